package stream

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

// scratchSchema is a schema name for this test alone, dropped when it ends.
func scratchSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("stream_test_%d_%d", os.Getpid(), schemaSeq.Add(1))
	drop := func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	}
	drop()
	t.Cleanup(drop)
	return name
}

// pgEngine is an Engine in a scratch schema.
func pgEngine(t testing.TB) (*Engine, *pgxpool.Pool, string) {
	t.Helper()
	pool := needPool(t)
	schema := scratchSchema(t, pool)
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, pool, schema
}
