package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// migrateSchemaTo builds schema as an earlier build left it: its migrations up to upto.
func migrateSchemaTo(ctx context.Context, pool *pgxpool.Pool, schema string, upto int) error {
	return migrations.ApplyTo(ctx, pool, schema, upto)
}

// TestSchemaNewer refuses a schema that a newer build migrated further.
func TestSchemaNewer(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "stream_test")
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+pgx.Identifier{schema}.Sanitize()+".migrations (version) VALUES (9999)"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(pool, Config{Schema: schema}); !errors.Is(err, sluice.ErrSchemaNewer) {
		t.Errorf("New on a newer schema: %v, want sluice.ErrSchemaNewer", err)
	}
}

// TestMigrationKeepsFirstDecision upgrades a schema where an earlier build published a second
// decision for a window after a reset: the first stays, the later one goes.
func TestMigrationKeepsFirstDecision(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "stream_test")
	ctx := context.Background()
	if err := migrateSchemaTo(ctx, pool, schema, 2); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".decisions (run, stream, query, key, window_start, window_end, count, quota, over_by, part)"+
		" VALUES (1, 's', 'q', 'k', 0, 1000, 7, 5, 2, 0), (2, 's', 'q', 'k', 0, 1000, 7, 6, 1, 0), (2, 's', 'q', 'k', 1000, 2000, 9, 6, 3, 0)"); err != nil {
		t.Fatal(err)
	}
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ds, err := e.Decisions(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].WindowStart != 0 || ds[0].Quota != 5 || ds[1].WindowStart != 1000 {
		t.Fatalf("decisions after the upgrade %+v", ds)
	}
}

// TestMigrationBackfillsQueryEvents upgrades a schema whose queries have consumed part of a log
// that other streams share: each query's Events counts only its own stream's events.
func TestMigrationBackfillsQueryEvents(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "stream_test")
	ctx := context.Background()
	if err := migrateSchemaTo(ctx, pool, schema, 3); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	// Offsets 1..10 alternate streams a and b; query qa consumed a's through offset 7 (4 events).
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".log (at, cost, stream, key)"+
		" SELECT 1, 1, CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END, 'k' FROM generate_series(1, 10) i"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".queries (name, stream, window_ms, grace_ms, idle_flush_ms, quota, \"offset\", horizon, max_at)"+
		" VALUES ('qa', 'a', 1000, 0, 0, 0, 7, 0, 1), ('qb', 'b', 1000, 0, 0, 0, 0, 0, 0)"); err != nil {
		t.Fatal(err)
	}
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tc := range []struct {
		query  string
		events int64
	}{{"qa", 4}, {"qb", 0}} {
		st, err := e.Stats(ctx, tc.query)
		if err != nil || st.Events != tc.events {
			t.Errorf("%s: Stats %+v, %v; want Events %d", tc.query, st, err, tc.events)
		}
	}
}
