//go:build unix

package redistest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Pid returns the running server's process ID, or 0 while it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Freeze stops the server with SIGSTOP and waits until the kernel has stopped it: it keeps its
// port and connections but answers nothing, as a server stalled by a VM pause or a swap storm
// would. Commands sent meanwhile wait in its sockets and run at Thaw. A no-op if not running.
func (s *Server) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: freeze %s: %v", s.Addr(), err)
	}
	// SIGSTOP is delivered asynchronously: wait for the state to read stopped (Linux's /proc), so
	// that nothing the caller does after Freeze reaches a server still running.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, ok := procState(pid)
		if !ok || st == "T" || st == "t" {
			return
		}
		time.Sleep(time.Millisecond)
	}
	s.t.Fatalf("redistest: %s not stopped 5 s after SIGSTOP", s.Addr())
}

// Thaw resumes a server stopped by Freeze (SIGCONT). A no-op if not running.
func (s *Server) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		s.t.Fatalf("redistest: thaw %s: %v", s.Addr(), err)
	}
}

// procState is pid's state letter in /proc (R, S, T…); ok is false without /proc or the process.
func procState(pid int) (state string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// "pid (comm) state …": comm may hold spaces, so read after its closing parenthesis.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) == 0 {
		return "", false
	}
	return fields[0], true
}
