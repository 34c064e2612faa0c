//go:build tools

// Package tools pins the Helm CLI that build.sh compiles.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
