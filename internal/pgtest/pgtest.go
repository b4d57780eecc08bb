// Package pgtest starts throwaway PostgreSQL servers for tests that must stop, crash or restart
// one (durability, faults): a cluster made by initdb in a temporary directory, served by its own
// postgres process on a free local port, removed when the test ends.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Require finds initdb and postgres (on PATH or in Debian's /usr/lib/postgresql/*/bin) and returns
// the directory holding them. Without them the test is skipped, or fails under CI=true.
func Require(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p)
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	msg := "pgtest: initdb not found on PATH or in /usr/lib/postgresql/*/bin"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Server is one postgres process over its own data directory.
type Server struct {
	t    testing.TB
	bin  string
	dir  string // holds data/, the socket and the log
	port int
	cred *syscall.Credential // the postgres user's, when the test runs as root

	mu   sync.Mutex
	cmd  *exec.Cmd // nil while stopped
	done chan struct{}
}

// StartServer creates a cluster (trust authentication, user postgres, fsync on) and starts it on a
// free port; the test's cleanup stops it and removes its files.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir, port: freePort(t)}
	t.Cleanup(func() {
		s.Kill()
		os.RemoveAll(dir)
	})
	// postgres refuses to run as root: run it as the postgres user, who must own its files.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root and no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.Start()
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// URL is the server's connection URL, for the database postgres.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Start starts the server (again, after Kill or Stop, on the same port and files) and waits until
// it accepts connections: after a Kill that includes replaying the WAL, as after a crash.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "shared_buffers=16MB", "-c", "max_connections=100")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		log.Close()
		s.t.Fatalf("pgtest: start postgres: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.ready() {
			return
		}
		select {
		case <-done:
			s.cmd = nil
			s.t.Fatalf("pgtest: postgres exited at start:\n%s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pgtest: postgres not ready in 30 s:\n%s", s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports whether the server accepts connections (pg_isready's test).
func (s *Server) ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres")
	return cmd.Run() == nil
}

// Kill SIGKILLs the server and all its processes, as a crash or a power cut would end them: what
// was committed survives in the WAL, the rest is lost. A no-op while stopped.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

// Stop shuts the server down cleanly (fast shutdown: SIGINT).
func (s *Server) Stop() { s.stop(syscall.SIGINT) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	if sig == syscall.SIGKILL {
		// The postmaster's children run in sessions of their own: kill them with it, or the
		// shared memory they hold keeps the next Start out. The postmaster is stopped first, so
		// that it forks no child between the listing of its children and their killing: under
		// load it forks one per new connection.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		waitStopped(pid)
		children := childrenOf(pid)
		for _, c := range children {
			_ = syscall.Kill(c, sig)
		}
		_ = syscall.Kill(pid, sig)
		defer waitGone(children)
	} else {
		_ = s.cmd.Process.Signal(sig)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …": comm may hold spaces, so read after its closing parenthesis.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, child)
		}
	}
	return out
}

// waitStopped waits (at most 5 s) until pid is stopped by a signal, or gone.
func waitStopped(pid int) {
	deadline := time.Now().Add(5 * time.Second)
	for st := procState(pid); st != "" && st != "T" && st != "Z" && time.Now().Before(deadline); st = procState(pid) {
		time.Sleep(time.Millisecond)
	}
}

// waitGone waits (at most 10 s) until none of pids is alive: gone, or a zombie, which holds no
// memory (the orphans' new parent may take its time to reap them).
func waitGone(pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func alive(pid int) bool {
	st := procState(pid)
	return st != "" && st != "Z"
}

// procState is pid's state letter in /proc (R, S, T, Z…), or "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// "pid (comm) state …": comm may hold spaces, so read after its closing parenthesis.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// freePort returns a TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
