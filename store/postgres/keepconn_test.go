package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// A call that times out on a server that stopped answering costs no connection: once the server
// answers again, the store's connections are the same backends as before, and it decides at once.
func TestTimeoutKeepsConnections(t *testing.T) {
	pg := pgtest.StartServer(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.URL()+"&application_name=keep&pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, pgstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p := sluice.MustPolicy("keep", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1_000_000, WindowMs: 3_600_000}})
	check := func(timeout time.Duration, key string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := s.Check(ctx, 0, p, key, 1)
		return err
	}
	var held []*pgxpool.Conn // open all four connections before the server stops answering
	for range 4 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	backends := func() []int {
		t.Helper()
		var pids []int
		for _, c := range pool.AcquireAllIdle(ctx) {
			pids = append(pids, int(c.Conn().PgConn().PID()))
			c.Release()
		}
		slices.Sort(pids)
		return pids
	}
	before := backends()

	pg.Freeze()
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := check(50*time.Millisecond, k); !errors.Is(err, sluice.ErrUnavailable) {
			pg.Thaw()
			t.Fatalf("a check while the server is frozen: %v, want sluice.ErrUnavailable", err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the calls' deadlines long past, well within linger
	pg.Thaw()

	if err := check(5*time.Second, "a"); err != nil {
		t.Fatalf("the first check after the server answers again: %v", err)
	}
	kept := func(after []int) bool {
		for _, pid := range before {
			if !slices.Contains(after, pid) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	after := backends()
	for !kept(after) && time.Now().Before(deadline) { // statements still finishing
		time.Sleep(10 * time.Millisecond)
		after = backends()
	}
	if len(before) != 4 || !kept(after) {
		t.Errorf("backends %v before the timeouts, %v after: timed-out calls closed connections", before, after)
	}
}
