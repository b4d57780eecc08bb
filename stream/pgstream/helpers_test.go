package pgstream

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/streamtest"
)

const t0 = streamtest.T0

// pgEngine is an Engine in a scratch schema. Without PostgreSQL the test is skipped, or fails
// under CI=true (pgtest.Pool).
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
