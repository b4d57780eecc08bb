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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// faultLimit is far above what a load sends, so every decision it gets must be an admission.
const faultLimit = 1_000_000_000

var faultPolicy = sluice.MustPolicy("fault", sluice.Limit{Strategy: sluice.FixedWindow{Limit: faultLimit, WindowMs: 3_600_000}})

// outcome is one Check of a fault load.
type outcome struct {
	start time.Time
	took  time.Duration
	d     sluice.Decision
	err   error
}

// faultLoad is goroutines checking their own keys at the server clock in a loop, each Check under
// its own deadline, recording every one.
type faultLoad struct {
	stopc    chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	outcomes [][]outcome  // per goroutine
	lastErr  atomic.Int64 // start (unix ns) of the latest failed Check that has returned
	lastOK   atomic.Int64 // start (unix ns) of the latest successful Check that has returned
}

// startFaultLoad starts a load on s; it stops at the latest when the test ends.
func startFaultLoad(t *testing.T, s sluice.Store, goroutines int, timeout time.Duration) *faultLoad {
	t.Helper()
	l := &faultLoad{stopc: make(chan struct{}), outcomes: make([][]outcome, goroutines)}
	t.Cleanup(func() { l.stop() })
	for g := range goroutines {
		l.wg.Go(func() {
			key := fmt.Sprint("g", g)
			for {
				select {
				case <-l.stopc:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				o := outcome{start: time.Now()}
				o.d, o.err = s.Check(ctx, 0, faultPolicy, key, 1)
				o.took = time.Since(o.start)
				cancel()
				l.outcomes[g] = append(l.outcomes[g], o)
				if o.err != nil {
					l.lastErr.Store(o.start.UnixNano())
				} else {
					l.lastOK.Store(o.start.UnixNano())
				}
				// Pace the callers: a refused connection fails in microseconds, and spinning
				// goroutines would starve PostgreSQL's restart on a small machine.
				time.Sleep(time.Millisecond)
			}
		})
	}
	return l
}

// stop ends the load and returns every Check, in no particular order.
func (l *faultLoad) stop() []outcome {
	l.once.Do(func() { close(l.stopc) })
	l.wg.Wait()
	var all []outcome
	for _, g := range l.outcomes {
		all = append(all, g...)
	}
	return all
}

// waitClean waits, for at most within, until no Check has failed for quiet and one has succeeded
// since, and returns that moment: every Check started after it must succeed.
func (l *faultLoad) waitClean(t *testing.T, within, quiet time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		now := time.Now()
		lastErr := l.lastErr.Load()
		if now.UnixNano()-lastErr >= quiet.Nanoseconds() && l.lastOK.Load() > lastErr {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("checks still failing %v later (the last failure started %v ago)", within, now.Sub(time.Unix(0, lastErr)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPostgresRestartUnderLoad crashes PostgreSQL under 32 checking goroutines: while it is down
// every Check is an admission or sluice.ErrUnavailable within its deadline, and once it is back
// the pool reconnects by itself and every Check succeeds.
func TestPostgresRestartUnderLoad(t *testing.T) {
	const timeout, slack = 200 * time.Millisecond, 200 * time.Millisecond
	pg := pgtest.StartServer(t)
	s := openFaultStore(t, pg.URL())
	if _, err := s.Check(context.Background(), 0, faultPolicy, "warm", 1); err != nil {
		t.Fatal(err) // the pool's first connection exists before goroutines are counted
	}
	base := runtime.NumGoroutine()

	l := startFaultLoad(t, s, 32, timeout)
	l.waitClean(t, 5*time.Second, 0)
	// The outage lasts a second under load: ample time too for the old server's children, which
	// pg.Kill leaves to notice their parent's death, to be gone before Start (see crashPostgres in
	// cmd/sluice).
	pg.Kill()
	time.Sleep(time.Second)
	pg.Start()
	started := time.Now()
	clean := l.waitClean(t, 5*time.Second, timeout+slack)
	time.Sleep(time.Second) // a second of load after recovery
	all := l.stop()

	var wrong, slow, late []string
	failures := 0
	for _, o := range all {
		switch {
		case o.err != nil:
			failures++
			if !errors.Is(o.err, sluice.ErrUnavailable) {
				wrong = append(wrong, o.err.Error())
			}
			if o.start.After(clean) {
				late = append(late, fmt.Sprintf("%v after recovery: %v", o.start.Sub(clean), o.err))
			}
		case !o.d.Allowed || o.d.Limit != faultLimit || o.d.Remaining < 0 || o.d.Remaining >= faultLimit:
			wrong = append(wrong, fmt.Sprintf("%+v", o.d))
		}
		if o.took > timeout+slack {
			slow = append(slow, fmt.Sprintf("%v at %v: %v", o.took, o.start.Sub(clean), o.err))
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

// TestSlowPostgresIsBounded holds a key's row lock, as a transaction stuck in PostgreSQL would:
// checks of the key give up within their deadline, and none of them is decided once the lock is
// released.
func TestSlowPostgresIsBounded(t *testing.T) {
	const timeout, slack, held = 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond
	const schema = "slow"
	pg := pgtest.StartServer(t)
	s := openFaultStore(t, pg.URL()+"&sluice_schema="+schema)
	ctx := context.Background()
	p := sluice.MustPolicy("slow", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1000, WindowMs: 3_600_000}})
	if _, err := s.Check(ctx, t0, p, "k", 1); err != nil {
		t.Fatal(err) // the key's row now exists, to be locked
	}
	pool, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after lockRow's cleanup: Close waits for the locking transaction's connection
	unlock := lockRow(t, pool, pgx.Identifier{schema}.Sanitize(), "k")

	// 16 goroutines check the key again and again while the lock is held.
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

	// A statement still queued for the lock would decide now: wait until none runs, then count.
	unlock()
	deadline := time.Now().Add(5 * time.Second)
	for count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%.decide(%' AND pid <> pg_backend_pid()") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("decide statements still running 5 s after the lock was released")
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := 1000 - 1 - allowed.Load()
	if d, err := s.Peek(ctx, t0, p, "k"); err != nil || d.Remaining != want {
		t.Errorf("after the lock: %+v, %v; want %d remaining (the first check and the %d allowed while it was held)",
			d, err, want, allowed.Load())
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
