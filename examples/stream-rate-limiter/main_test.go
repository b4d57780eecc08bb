package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
