package bench

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server if the benchmark process dies
// without cleaning up (Linux only).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
