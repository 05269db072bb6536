//go:build tools

// Package e2e pins the etcdctl and etcdutl commands into the module graph so
// that the harness can build them with `go build go.etcd.io/etcd/etcdctl/v3`
// and `go build go.etcd.io/etcd/etcdutl/v3`.
package e2e

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)
