//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// forwarded are the signals that redlock passes on to COMMAND.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// fromTerminal reports whether the terminal sends sig to its whole foreground
// process group: when COMMAND is in redlock's group, it already got it.
func fromTerminal(sig os.Signal) bool { return sig == syscall.SIGINT || sig == syscall.SIGQUIT }

// childAttr puts COMMAND in a process group of its own, when ownGroup, so that
// it can be stopped with everything it started.
func childAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

// signalChild sends sig to COMMAND, or to its whole process group.
func signalChild(p *os.Process, group bool, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !group || !ok {
		return p.Signal(sig)
	}
	err := syscall.Kill(-p.Pid, s)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// exitStatus returns a process's exit status the way a shell reports it:
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalStatus is the exit status that reports an interruption by sig.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
