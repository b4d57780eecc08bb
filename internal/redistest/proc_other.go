//go:build !linux

package redistest

import (
	"os"
	"syscall"
)

func procAttr() *syscall.SysProcAttr { return nil }

func killProc(p *os.Process) { _ = p.Kill() }

func termProc(p *os.Process) error { return p.Signal(os.Interrupt) }
