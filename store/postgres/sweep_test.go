package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// TestSweepDeletesOnlyIdleRows writes keys that are idle by the sweep's instant (every policy of
// storetest.Policies goes idle within about 2 s of a check) and keys that are not, sweeps, and requires that exactly the idle rows are gone and that every key still decides
// as in the memory store.
func TestSweepDeletesOnlyIdleRows(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1, IdleRounding: -1, SweepGrace: time.Second})
	ms := memory.New(memory.Config{SweepInterval: -1})
	defer ms.Close()
	ctx := context.Background()
	both := func(now int64, p *sluice.Policy, key string) {
		t.Helper()
		d1, err := s.Check(ctx, now, p, key, 2)
		if err != nil {
			t.Fatal(err)
		}
		if d2, _ := ms.Check(ctx, now, p, key, 2); !reflect.DeepEqual(d1, d2) {
			t.Fatalf("Check(%s, %s) at %d: postgres %+v, memory %+v", p.Name(), key, now, d1, d2)
		}
	}
	const later = t0 + 10_000
	for _, p := range storetest.Policies {
		both(t0, p, "old")    // idle by t0+1000: swept at later (grace 1 s)
		both(later, p, "new") // still counting at later: kept
	}
	rows := func() int { return count(t, pool, "SELECT count(*) FROM "+q+".limits") }
	before := rows()
	n, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := before / 2; n != int64(want) || rows() != want {
		t.Errorf("Sweep deleted %d of %d rows, leaving %d; want %d deleted", n, before, rows(), want)
	}
	if got := count(t, pool, "SELECT count(*) FROM "+q+".limits WHERE key = 'old'"); got != 0 {
		t.Errorf("%d idle rows left", got)
	}
	for _, p := range storetest.Policies {
		for _, key := range []string{"old", "new"} {
			d1, err := s.Peek(ctx, later, p, key)
			if err != nil {
				t.Fatal(err)
			}
			if d2, _ := ms.Peek(ctx, later, p, key); !reflect.DeepEqual(d1, d2) {
				t.Errorf("Peek(%s, %s) after the sweep: postgres %+v, memory %+v", p.Name(), key, d1, d2)
			}
		}
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("second Sweep = %d, %v; want nothing left to delete", n, err)
	}
}

// TestSweepWhileChecking runs the background sweep every millisecond while goroutines check one
// key window after window: between windows the key's row goes idle and the sweep deletes it, racing
// the next window's first checks. Every window must admit exactly its limit.
func TestSweepWhileChecking(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: time.Millisecond, IdleRounding: -1, SweepGrace: time.Second, SweepBatch: 1})
	p := sluice.MustPolicy("swept", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 100, WindowMs: 1000}})
	const windows, goroutines, checks = 12, 8, 20
	for w := range windows {
		now := t0 + int64(w)*3000 + 500 // the previous window's row went idle 2.5 s before
		if got := hammer(t, s, p, now, goroutines, checks); got != 100 {
			t.Fatalf("window %d admitted %d of %d, want exactly 100", w, got, goroutines*checks)
		}
	}
	// The last window's row goes idle too once callers move on.
	if _, err := s.Check(context.Background(), t0+int64(windows)*3000+5000, p, "other", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count(t, pool, "SELECT count(*) FROM "+q+".limits WHERE key = 'hot'") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweep did not delete the idle row")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSweepSkipsLockedRows: a sweep never waits for a row a check holds.
func TestSweepSkipsLockedRows(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1, IdleRounding: -1, SweepGrace: time.Second})
	ctx := context.Background()
	p := storetest.Policies[0]
	for i := range 3 {
		if _, err := s.Check(ctx, t0, p, fmt.Sprint("k", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Check(ctx, t0+10_000, p, "now", 1); err != nil {
		t.Fatal(err)
	}
	unlock := lockRow(t, pool, q, "k0")
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if n, err := s.Sweep(short); err != nil || n != 2 {
		t.Errorf("Sweep with k0 locked = %d, %v; want k1 and k2 deleted at once", n, err)
	}
	unlock()
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("Sweep after the lock = %d, %v; want k0 deleted", n, err)
	}
}

// TestUpdatesAreHOT checks that a busy key's updates do not touch the indexes: idle_at moves once
// per IdleRounding step, and the other updates change only state.
func TestUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	// One connection, so that the statistics flushed below are those of the checks.
	one, err := pgxpool.New(context.Background(), dbURL()+"?pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	s, err := pgstore.New(one, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := sluice.MustPolicy("hot", sluice.Limit{Strategy: sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: 1000}})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if d, err := s.Check(ctx, t0+int64(i*100+g), p, "k", 1); err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 200 {
		t.Fatalf("admitted %d of 200", admitted.Load())
	}
	// The checks ran on the pool's one connection: flush its statistics, then read them.
	if _, err := one.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	var upd, hot int64
	deadline := time.Now().Add(5 * time.Second)
	for upd < 199 && time.Now().Before(deadline) {
		if err := pool.QueryRow(ctx, "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'limits'", schema).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d updates, %d HOT", upd, hot)
	if upd < 199 || hot < upd*9/10 {
		t.Errorf("%d of %d updates HOT, want at least 90%%", hot, upd)
	}
}
