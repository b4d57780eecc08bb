package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// TestPostgresRestartUnderLoad crashes PostgreSQL under 32 checking goroutines: while it is down
// every Check is an admission or sluice.ErrUnavailable within its deadline, and once it is back
// the pool reconnects by itself and every Check succeeds.
func TestPostgresRestartUnderLoad(t *testing.T) {
	const timeout, slack = 200 * time.Millisecond, 200 * time.Millisecond
	pg := pgtest.StartServer(t)
	s := openFaultStore(t, pg.URL())
	if _, err := s.Check(context.Background(), 0, storetest.LoadPolicy, "warm", 1); err != nil {
		t.Fatal(err) // the pool's first connection exists before goroutines are counted
	}
	base := runtime.NumGoroutine()

	l := storetest.StartLoad(t, s, 32, timeout)
	l.WaitClean(t, 5*time.Second, 0)
	// The outage lasts a second under load. pg.Kill ends the server's children with it, as a
	// crash of the machine would, so nothing of the old server keeps the new one out.
	pg.Kill()
	time.Sleep(time.Second)
	pg.Start()
	started := time.Now()
	clean := l.WaitClean(t, 5*time.Second, timeout+slack)
	time.Sleep(time.Second) // a second of load after recovery
	all := l.Stop()

	var wrong, slow, late []string
	failures := 0
	for _, o := range all {
		switch {
		case o.Err != nil:
			failures++
			if !errors.Is(o.Err, sluice.ErrUnavailable) {
				wrong = append(wrong, o.Err.Error())
			}
			if o.Start.After(clean) {
				late = append(late, fmt.Sprintf("%v after recovery: %v", o.Start.Sub(clean), o.Err))
			}
		case !o.Decision.Allowed || o.Decision.Limit != storetest.LoadLimit || o.Decision.Remaining < 0 || o.Decision.Remaining >= storetest.LoadLimit:
			wrong = append(wrong, fmt.Sprintf("%+v", o.Decision))
		}
		if o.Took > timeout+slack {
			slow = append(slow, fmt.Sprintf("%v at %v: %v", o.Took, o.Start.Sub(clean), o.Err))
		}
	}
	for _, bad := range []struct {
		what string
		list []string
	}{{"wrong answers", wrong}, {"checks past their deadline", slow}, {"failures after recovery", late}} {
		if len(bad.list) > 0 {
			t.Errorf("%d %s, e.g. %v", len(bad.list), bad.what, bad.list[:min(5, len(bad.list))])
		}
	}
	t.Logf("%d checks, %d failed; clean %v after the restart", len(all), failures, clean.Sub(started))
	if failures == 0 {
		t.Error("no check failed while PostgreSQL was down")
	}

	// Checks that gave up must leave no goroutine behind; the slack is for pgx's own.
	const goroutineSlack = 10
	deadline := time.Now().Add(5 * time.Second)
	for n := runtime.NumGoroutine(); n > base+goroutineSlack; n = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines, %d before the load", n, base)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowPostgresIsBounded holds a key's row lock, as a transaction stuck in PostgreSQL would,
// while 16 goroutines check the key again and again: every check gives up within its deadline, and
// none of them is decided once the lock is released.
func TestSlowPostgresIsBounded(t *testing.T) {
	const timeout, slack, held = 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond
	const schema = "slow"
	pg := pgtest.StartServer(t)
	s := openFaultStore(t, pg.URL()+"&sluice_schema="+schema)
	pool := newPool(t, pg)
	ctx := context.Background()
	p := sluice.MustPolicy("slow", sluice.Limit{Strategy: sluice.FixedWindow{Limit: storetest.LoadLimit, WindowMs: 3_600_000}})
	if _, err := s.Check(ctx, t0, p, "k", 1); err != nil {
		t.Fatal(err) // the key's row now exists, to be locked
	}
	unlock := lockRow(t, pool, pgx.Identifier{schema}.Sanitize(), "k")

	var allowed atomic.Int64
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	end := time.Now().Add(held)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(end) {
				call, cancel := context.WithTimeout(ctx, timeout)
				start := time.Now()
				d, err := s.Check(call, t0, p, "k", 1)
				took := time.Since(start)
				cancel()
				if d.Allowed {
					allowed.Add(1)
				}
				if !errors.Is(err, sluice.ErrUnavailable) || took > timeout+slack {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%+v, %v after %v", d, err, took))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("%d checks of the locked key did not fail within %v + %v, e.g. %v", len(wrong), timeout, slack, wrong[:min(5, len(wrong))])
	}
	// The server gives up on a statement on its own (lock_timeout) or on pgx's cancel request, a
	// few milliseconds around its caller's deadline: a lock released within those milliseconds may
	// still decide a check that failed, which a store cannot rule out. Once none waits, none may.
	waitFor(t, "the server to stop waiting for the lock", slack, func() bool { return lockWaits(t, pool) == 0 })
	unlock()
	if got, want := spent(t, s, pool, p, "k"), 1+allowed.Load(); got != want {
		t.Errorf("%d spent after the lock was released, want %d: the first check and the %d answered allowed", got, want, allowed.Load())
	}
}

// TestGivenUpCheckIsNotDecided batches a check with one whose deadline is later, and has it give up
// while the batch waits, first for its key's lane (a call of the key in flight), then for a row
// lock: it must
// return by its own deadline, and once the lock is released the batch must not decide it, its caller
// having been told sluice.ErrUnavailable.
func TestGivenUpCheckIsNotDecided(t *testing.T) {
	const inFlight, slack = 2, 200 * time.Millisecond
	const schema = "given_up"
	pg := pgtest.StartServer(t)
	pool := newPool(t, pg)
	// A pool of its own: the store's statements never wait for a connection the test's hold.
	s, err := pgstore.New(newPool(t, pg), pgstore.Config{Schema: schema, InFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	p := sluice.MustPolicy("given-up", sluice.Limit{Strategy: sluice.FixedWindow{Limit: storetest.LoadLimit, WindowMs: 3_600_000}})

	tests := []struct {
		name string
		// blocker is the deadline of the check that takes the key's lane first: long, it holds
		// the lane until the lock is released; shorter, it gives up and frees the lane while the
		// lock is still held. Either way both checks below must join while the lane is taken, to
		// share a batch, which leaves a slow machine a second to start them.
		blocker time.Duration
		gaveUp  time.Duration // the deadline of the check that gives up, shorter than its batch's
		leads   bool          // the check that gives up comes first and leads the batch
	}{
		{"joins, gives up before the batch is sent", 5 * time.Second, time.Second, false},
		{"leads, gives up before the batch is sent", 5 * time.Second, time.Second, true},
		{"joins, gives up while the batch waits for the lock", time.Second, 1500 * time.Millisecond, false},
		{"leads, gives up while the batch waits for the lock", time.Second, 1500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.name
			if _, err := s.Check(ctx, t0, p, key, 1); err != nil {
				t.Fatal(err) // the key's row now exists, to be locked
			}
			unlock := lockRow(t, pool, pgx.Identifier{schema}.Sanitize(), key)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			check := func(timeout time.Duration) error {
				call, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				start := time.Now()
				d, err := s.Check(call, t0, p, key, 1)
				if d.Allowed {
					allowed.Add(1)
				}
				if took := time.Since(start); took > timeout+slack {
					t.Errorf("a check with a %v deadline returned after %v: %+v, %v", timeout, took, d, err)
				}
				return err
			}
			wg.Go(func() { check(tt.blocker) })
			waitFor(t, "a decide statement to wait for the lock", 5*time.Second, func() bool { return lockWaits(t, pool) == 1 })
			gaveUp := make(chan error, 1)
			var later error
			order := []func(){func() { later = check(3 * time.Second) }, func() { gaveUp <- check(tt.gaveUp) }}
			if tt.leads {
				order[0], order[1] = order[1], order[0]
			}
			for i, f := range order {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // the first has opened the batch, waiting for the lane
				}
				wg.Go(f)
			}
			if err := <-gaveUp; !errors.Is(err, sluice.ErrUnavailable) {
				t.Fatalf("the check with the %v deadline: %v, want sluice.ErrUnavailable", tt.gaveUp, err)
			}
			// Well past the store's margin between the server's lock timeout and the caller's
			// deadline: only a statement that outlives its caller can still decide the check.
			time.Sleep(100 * time.Millisecond)
			unlock()
			wg.Wait()
			// Deciding it is best, but failing it early, with the batch, spends nothing unannounced.
			if later != nil && !errors.Is(later, sluice.ErrUnavailable) {
				t.Fatalf("the check with the later deadline: %v", later)
			}
			if got, want := spent(t, s, pool, p, key), 1+allowed.Load(); got != want {
				t.Errorf("%d spent, want %d: the first check and the %d answered allowed; the check told "+
					"sluice.ErrUnavailable before the lock was released was decided after all", got, want, allowed.Load())
			}
		})
	}
}

// newPool is a pool on pg, closed when the test ends.
func newPool(t *testing.T, pg *pgtest.Server) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	// Registered before lockRow's cleanups, so it runs after them: Close waits for the connection of
	// a locking transaction.
	t.Cleanup(pool.Close)
	return pool
}

// lockWaits is how many decide statements wait for a lock.
func lockWaits(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%.decide(%'")
}

// spent waits until no decide statement runs (one still running could decide yet) and returns how
// much of p's limit key has spent.
func spent(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, p *sluice.Policy, key string) int64 {
	t.Helper()
	waitFor(t, "decide statements to end", 5*time.Second, func() bool {
		return count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%.decide(%' AND pid <> pg_backend_pid()") == 0
	})
	d, err := s.Peek(context.Background(), t0, p, key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Limit - d.Remaining
}

// waitFor polls cond until it holds, for at most within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openFaultStore opens the store at url, closing it when the test ends.
func openFaultStore(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
