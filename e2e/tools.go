//go:build tools

// Package e2e pins the etcdctl command into the module graph so that the
// harness can build it with `go build go.etcd.io/etcd/etcdctl/v3`.
package e2e

import _ "go.etcd.io/etcd/etcdctl/v3"
