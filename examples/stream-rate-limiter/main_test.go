package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func expectPass(t *testing.T, args ...string) {
	t.Helper()
	var out bytes.Buffer
	if code := run(context.Background(), args, &out); code != 0 || !strings.Contains(out.String(), "PASS: 7 checks") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	expectPass(t, "--window", "500ms", "--quota", "5", "--quiet", "3", "--noisy", "20")
	expectPass(t, "--window", "300ms", "--quota", "2", "--quiet", "1", "--noisy", "5")
}

func TestRefusesScenarioThatCannotBeDecided(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--quota", "5", "--noisy", "10"}, &out); code != 1 || !strings.Contains(out.String(), "FAIL:") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
}

// TestPostgres runs the example on PostgreSQL and checks that it leaves no schema behind: when
// it passes, when it is interrupted (Ctrl-C cancels run's context), and that it refuses a schema
// it did not create.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url := os.Getenv("SLUICE_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI: %v", err)
		}
		t.Skipf("no PostgreSQL at %s: %v", url, err)
	}
	t.Cleanup(pool.Close)
	exists := func(t *testing.T, schema string) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	named := regexp.MustCompile(`schema (\S+) \(dropped at exit\)`)
	for _, tc := range []struct {
		name      string
		args      []string // after --store url
		existing  bool     // the --schema exists before the run
		interrupt time.Duration
		want      string // in the output
	}{
		{name: "own schema", args: []string{"--window", "500ms"}, want: "PASS: 7 checks"},
		{name: "named schema", args: []string{"--window", "500ms", "--schema", "stream_example_named"}, want: "PASS: 7 checks"},
		{name: "interrupted", args: []string{"--window", "30s"}, interrupt: 300 * time.Millisecond, want: "interrupted"},
		{name: "existing schema refused", args: []string{"--schema", "stream_example_existing"}, existing: true, want: "exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--store", url}, tc.args...)
			for i, a := range args {
				if strings.HasPrefix(a, "stream_example_") {
					args[i] = fmt.Sprintf("%s_%d", a, os.Getpid()) // apart from concurrent runs
				}
			}
			if tc.existing {
				schema := pgx.Identifier{args[len(args)-1]}.Sanitize()
				if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out lockedBuffer
			if tc.interrupt > 0 {
				// Interrupted once its schema exists, however slow the machine is to get there.
				go func() {
					for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
						if named.MatchString(out.String()) {
							time.Sleep(tc.interrupt)
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					cancel()
				}()
			}
			code := run(ctx, args, &out)
			if (code == 0) != strings.HasPrefix(tc.want, "PASS") || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d, want output with %q:\n%s", code, tc.want, out.String())
			}
			if tc.existing {
				if !exists(t, args[len(args)-1]) {
					t.Errorf("the example dropped a schema it did not create")
				}
				return
			}
			m := named.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no schema named in:\n%s", out.String())
			}
			if exists(t, m[1]) {
				t.Errorf("schema %s left behind:\n%s", m[1], out.String())
				pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{m[1]}.Sanitize()+" CASCADE")
			}
		})
	}
}

// TestServer runs the example against a sluice serve built from ../../cmd/sluice, whose config
// defines the query.
func TestServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sluice binary")
	}
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../../cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(`
streams:
  store: memory
  queries:
    rate-limiter: {stream: api-requests, window: 2s, quota: 5, idleFlush: 500ms}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }() // stops it with an interrupt, as at a terminal
	addr := make(chan string, 1)
	var logs bytes.Buffer
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		listening := regexp.MustCompile(`listening"? http=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var http string
	select {
	case http = <-addr:
	case <-logDone:
		t.Fatalf("sluice serve ended:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		cancel()
		<-logDone
		t.Fatalf("sluice serve did not listen:\n%s", logs.String())
	}
	expectPass(t, "--server", "http://"+http, "--stream", "api-requests", "--window", "2s", "--quota", "5", "--quiet", "3", "--noisy", "20")
	// A second run on the same server sees only its own keys.
	expectPass(t, "--server", "http://"+http, "--stream", "api-requests", "--window", "2s", "--quota", "5")
}

// lockedBuffer is a bytes.Buffer that the example writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
