package pgtest

import "syscall"

// Freeze stops the server and every backend with SIGSTOP, the postmaster first so that it forks
// none meanwhile: connections stay open but nothing answers, as on a server stalled by a VM pause
// or a swap storm. Statements sent meanwhile wait in their sockets and run at Thaw. A no-op if
// not running.
func (s *Server) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	waitStopped(pid)
	for _, c := range childrenOf(pid) {
		_ = syscall.Kill(c, syscall.SIGSTOP)
		waitStopped(c)
	}
}

// Thaw resumes a frozen server: its children first, then the postmaster.
func (s *Server) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	for _, c := range childrenOf(pid) {
		_ = syscall.Kill(c, syscall.SIGCONT)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
}
