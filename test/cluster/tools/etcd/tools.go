//go:build tools

// Package tools pins etcd; its main package is the module root,
// go.etcd.io/etcd/server/v3, which build.sh compiles as "etcd".
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
