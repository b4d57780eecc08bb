package pgstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// TestConcurrentMigrations starts 8 stores at once on a schema that does not exist yet: all must
// succeed and each migration must be applied once.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	q := pgx.Identifier{schema}.Sanitize()
	const n = 8
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	files, _ := filepath.Glob("migrations/*.sql")
	if len(files) == 0 {
		t.Fatal("no migrations/*.sql")
	}
	if got := count(t, pool, "SELECT count(*) FROM "+q+".migrations"); got != len(files) {
		t.Errorf("%d migrations recorded, want %d", got, len(files))
	}
	if got := count(t, pool, "SELECT count(DISTINCT version) FROM "+q+".migrations"); got != len(files) {
		t.Errorf("%d distinct versions recorded, want %d", got, len(files))
	}
	p := sluice.MustPolicy("migrated", sluice.Limit{Strategy: sluice.FixedWindow{Limit: n, WindowMs: 1000}})
	for i, s := range stores {
		if d, err := s.Check(context.Background(), t0, p, "k", 1); err != nil || !d.Allowed || d.Remaining != int64(n-1-i) {
			t.Errorf("store %d: %+v, %v", i, d, err)
		}
	}
}

// TestSchemaNewer refuses a schema that a newer build migrated further.
func TestSchemaNewer(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	s, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Starting again on an up-to-date schema is fine.
	s, err = pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatalf("second New: %v", err)
	}
	s.Close()
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+pgx.Identifier{schema}.Sanitize()+".migrations (version) VALUES (9999)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1}); !errors.Is(err, sluice.ErrSchemaNewer) {
		t.Errorf("New on a newer schema: error %v, want sluice.ErrSchemaNewer", err)
	}
}
