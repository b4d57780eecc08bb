package stream

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// pgEngine is an Engine in a scratch schema.
func pgEngine(t testing.TB) (*Engine, *pgxpool.Pool, string) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "stream_test")
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, pool, schema
}
