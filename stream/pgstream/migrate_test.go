package pgstream

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/stream"
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

// TestMigrationBackfillsPartitions upgrades a schema holding outputs of the first release: the
// SQL backfill computes Partition exactly, and groups see the old outputs.
func TestMigrationBackfillsPartitions(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "stream_test")
	ctx := context.Background()
	if err := migrateSchemaTo(ctx, pool, schema, 1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aAqQ019-_.:/ éжß中🔑\u007f")
	keys := []string{"k", "key-1", "key-A", strings.Repeat("long", 200), "🔑"}
	for len(keys) < 2000 {
		n := 1 + rng.IntN(40)
		var sb strings.Builder
		for range n {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		keys = append(keys, sb.String())
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".windows (run, stream, query, key, start, \"end\", count, sum)"+
		" SELECT 1, 's', 'q', k, 0, 1000, 5, 5 FROM unnest($1::text[]) k", keys); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+q+".decisions (run, stream, query, key, window_start, window_end, count, quota, over_by)"+
		" SELECT 1, 's', 'q', k, 0, 1000, 5, 1, 4 FROM unnest($1::text[]) k", keys); err != nil {
		t.Fatal(err)
	}
	e, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, table := range []string{"windows", "decisions"} {
		rows, err := pool.Query(ctx, "SELECT key, part FROM "+q+"."+table)
		if err != nil {
			t.Fatal(err)
		}
		var key string
		var part int16
		n := 0
		for rows.Next() {
			if err := rows.Scan(&key, &part); err != nil {
				t.Fatal(err)
			}
			if int(part) != stream.Partition(key) {
				t.Errorf("%s: key %q backfilled into partition %d, Partition says %d", table, key, part, stream.Partition(key))
			}
			n++
		}
		if rows.Err() != nil || n != len(keys) {
			t.Fatalf("%s: %d rows, %v", table, n, rows.Err())
		}
	}
	for _, kind := range []stream.Kind{stream.KindWindows, stream.KindDecisions} {
		n := 0
		for {
			batch, err := e.Pull(ctx, stream.PullRequest{Group: "g", Stream: "s", Kind: kind, Consumer: "c", Limit: stream.MaxPullLimit})
			if err != nil {
				t.Fatal(err)
			}
			if batch.Lease == "" {
				break
			}
			last := int64(0)
			for _, w := range batch.Windows {
				n, last = n+1, w.Offset
			}
			for _, d := range batch.Decisions {
				n, last = n+1, d.Offset
			}
			if err := e.Ack(ctx, stream.AckRequest{Group: "g", Stream: "s", Kind: kind, Lease: batch.Lease, Offset: last}); err != nil {
				t.Fatal(err)
			}
		}
		if n != len(keys) {
			t.Errorf("%s: the group saw %d of the %d outputs emitted before the upgrade", kind, n, len(keys))
		}
	}
}
