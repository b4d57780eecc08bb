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
	schema := fmt.Sprintf("stream_example_%d", os.Getpid())
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	expectPass(t, "--window", "500ms", "--store", url, "--schema", schema)
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
