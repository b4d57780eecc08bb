package region_test

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

// pgURL is the test database: SLUICE_POSTGRES_URL, else the local server.
func pgURL() string {
	if u := os.Getenv("SLUICE_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

// needPool connects to the test database, skipping the test without one (failing under CI=true).
// The pool is closed when the test ends.
func needPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI at %s: %v", pgURL(), err)
		}
		t.Skipf("no PostgreSQL at %s (set SLUICE_POSTGRES_URL): %v", pgURL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var schemaSeq atomic.Int64

// scratchSchema names a schema for this test alone, dropped (through pool) when the test ends.
func scratchSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("region_test_%d_%d", os.Getpid(), schemaSeq.Add(1))
	drop := func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	}
	drop()
	t.Cleanup(drop)
	return name
}
