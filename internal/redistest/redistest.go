// Package redistest starts real, throwaway Redis servers, clusters and
// Sentinel setups on free local ports for tests, from the redis-server binary
// on PATH, and tears them down when the test ends.
package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	startTimeout = 10 * time.Second
	pollInterval = 50 * time.Millisecond
)

// Require skips the test if any of bins is not on PATH, or fails it under
// CI=true, so Redis tests never silently skip in CI.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("redistest: %s not found in PATH (required under CI): %v", b, err)
			}
			t.Skipf("redistest: %s not found in PATH: %v", b, err)
		}
	}
}

// Server is one redis-server (or sentinel) process on a fixed 127.0.0.1
// port. It persists nothing, so a Kill and Start loses all data and scripts.
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while not running
	done chan struct{} // closed when cmd has exited and been reaped
}

// StartServer starts a redis-server on a free port with args appended to
// the defaults, waits until it answers PING and kills it at test cleanup.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	return startServer(t, dir, func(port int) []string {
		return append(serverArgs(port, dir), args...)
	})
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the server's "redis://127.0.0.1:port".
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Kill SIGKILLs the server and waits for it to exit; a no-op if not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// Stop shuts the server down gracefully (SIGTERM), killing it after 10 s.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if termProc(s.cmd.Process) == nil {
		select {
		case <-s.done:
			s.cmd = nil
			return
		case <-time.After(10 * time.Second):
		}
	}
	s.kill()
}

// Start restarts a killed or stopped server on the same port, empty, and
// waits until it answers PING. It calls t.Fatal on failure, so call it from
// the test goroutine. A no-op if already running.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart %s: %v\nlog tail:\n%s", s.Addr(), err, s.logTail())
	}
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--repl-diskless-sync-delay", "0",
	}
}

// startServer starts redis-server with argv(port) on a free port, retrying
// with another port if the chosen one was taken meanwhile.
func startServer(t testing.TB, dir string, argv func(port int) []string) *Server {
	t.Helper()
	Require(t, "redis-server")
	var err error
	for range 5 {
		port := freePort(t)
		s := &Server{t: t, port: port, dir: dir, args: argv(port),
			log: filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))}
		if err = s.start(); err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("redistest: %s log tail:\n%s", s.Addr(), s.logTail())
				}
				s.Kill()
			})
			return s
		}
		if !strings.Contains(s.logTail(), "Address already in use") {
			t.Fatalf("redistest: start redis-server on %s: %v\nlog tail:\n%s", s.Addr(), err, s.logTail())
		}
	}
	t.Fatalf("redistest: start redis-server: no usable port: %v", err)
	return nil
}

// start launches the process and waits until it answers PING; s.mu must be
// held or s not yet shared.
func (s *Server) start() error {
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== redistest: starting redis-server %q at %s\n", s.args, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procAttr()
	err = cmd.Start()
	f.Close()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done

	deadline := time.Now().Add(startTimeout)
	for {
		err = s.ping()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("exited during startup (%v)", cmd.ProcessState)
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("no PONG after %v: %v", startTimeout, err)
		}
	}
}

// ping checks that our process (not some other one on the port) answers.
func (s *Server) ping() error {
	if r, err := do(s.Addr(), "PING"); err != nil || r != "PONG" {
		return fmt.Errorf("PING: %v %v", r, err)
	}
	return infoWant(s.Addr(), []any{"INFO", "server"},
		map[string]string{"process_id": strconv.Itoa(s.cmd.Process.Pid)})
}

// kill requires s.mu.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		killProc(s.cmd.Process)
		<-s.done
	}
	s.cmd = nil
}

// logTail returns the last lines of the server's log.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// waitFor polls cond until it returns nil, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(pollInterval)
	}
}

// ports handed out by this process; a port p also reserves p+10000, the
// cluster bus port.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// freePort picks a port p in [10000, 22000) with p and p+10000 free. Both
// stay below Linux's default ephemeral range (32768+).
func freePort(t testing.TB) int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 1000 {
		p := 10000 + rand.IntN(12000)
		if ports.used[p] || ports.used[p+10000] || ports.used[p-10000] {
			continue
		}
		if canListen(p) && canListen(p+10000) {
			ports.used[p] = true
			return p
		}
	}
	t.Fatalf("redistest: no free port pair found")
	return 0
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	return l.Close() == nil
}
