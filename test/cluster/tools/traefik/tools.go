//go:build tools

package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
