package stream

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/pgtest"
)

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
