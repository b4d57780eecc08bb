//go:build linux

package redistest

import (
	"os"
	"syscall"
)

// procAttr gives the server its own process group (so killing it also kills
// its fork children) and has the kernel kill it if the test binary dies.
// (Pdeathsig fires when the starting OS thread exits; Go only ends threads
// whose goroutine exits while locked with runtime.LockOSThread.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killProc(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}

func termProc(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
