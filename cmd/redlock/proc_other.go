//go:build !unix

package main

import (
	"os"
	"syscall"
)

var forwarded = []os.Signal{os.Interrupt}

func fromTerminal(sig os.Signal) bool { return sig == os.Interrupt }

func childAttr(bool) *syscall.SysProcAttr { return nil }

func signalChild(p *os.Process, _ bool, sig os.Signal) error {
	if sig == syscall.SIGTERM || sig == os.Kill {
		return p.Kill()
	}
	return p.Signal(sig)
}

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signalStatus(os.Signal) int { return 130 }

func inForeground(*os.File) bool { return false }
