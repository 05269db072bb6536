package pluginhost

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the plugin when kvd dies, even by
// SIGKILL, so a crashed member leaves no plugin processes behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
