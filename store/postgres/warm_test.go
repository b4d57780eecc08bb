package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// Open warms its connections, and each connection made later, with checks it rolls back: none of
// them leaves a row, and the store decides as before. (What warming saves, a backend's first
// compile and plan, shows as time: scripts/soak.sh's first seconds.)
func TestOpenWarmsConnectionsLeavingNothing(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "warm")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, pgtest.URL()+"?sluice_schema="+schema+"&pool_max_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var warm int
	q := pgx.Identifier{schema}.Sanitize()
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".limits WHERE key LIKE 'sluice-warm-%'").Scan(&warm); err != nil {
		t.Fatal(err)
	}
	if warm != 0 {
		t.Errorf("%d warm-up rows left in the table", warm)
	}
	p := sluice.MustPolicy("after-warm", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}})
	for i, want := range []bool{true, false} {
		if d, err := s.Check(ctx, 0, p, "k", 1); err != nil || d.Allowed != want {
			t.Errorf("check %d: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
}
