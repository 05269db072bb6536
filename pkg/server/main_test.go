package server

import (
	"os"
	"testing"
)

// TestMain counts a peer for the strict reconfiguration check as soon as
// its stream is up: the tests change members right after a start, where
// etcd's 5s would refuse them as an unhealthy cluster. pkg/api's tests
// check the 5s rule; the e2e tests run with it.
func TestMain(m *testing.M) {
	healthInterval = -1
	os.Exit(m.Run())
}
