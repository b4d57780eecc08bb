package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// URL is the shared test database, which tests use through schemas of their own:
// SLUICE_POSTGRES_URL, else the local server.
func URL() string {
	if u := os.Getenv("SLUICE_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

// Pool connects to URL, skipping the test without a database (failing it under CI=true). The pool
// is closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, URL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI at %s: %v", URL(), err)
		}
		t.Skipf("no PostgreSQL at %s (set SLUICE_POSTGRES_URL): %v", URL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var schemaSeq atomic.Int64

// Schema names a schema for this test alone, prefix_<pid>_<n>, and drops it through pool before
// the test uses it and when the test ends.
func Schema(t testing.TB, pool *pgxpool.Pool, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), schemaSeq.Add(1))
	drop := func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	}
	drop()
	t.Cleanup(drop)
	return name
}
