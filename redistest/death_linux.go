package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server if its parent dies without
// cleaning up.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
