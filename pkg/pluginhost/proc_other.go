//go:build !linux

package pluginhost

import "os/exec"

// dieWithParent has no portable equivalent outside Linux: there, go-plugin's
// own shutdown on a clean stop is all.
func dieWithParent(*exec.Cmd) {}
