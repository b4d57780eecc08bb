package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// LoadLimit is far above what a Load sends, so every decision a Load gets must be an admission.
const LoadLimit = 1_000_000_000

// LoadPolicy is the policy a Load checks.
var LoadPolicy = sluice.MustPolicy("load", sluice.Limit{Strategy: sluice.FixedWindow{Limit: LoadLimit, WindowMs: 3_600_000}})

// Result is one Check of a Load.
type Result struct {
	Start    time.Time
	Took     time.Duration
	Decision sluice.Decision
	Err      error
}

// Load is goroutines checking their own keys of LoadPolicy at the store's clock in a loop, each
// Check under its own deadline, recording every one: the traffic of the fault tests, which stop,
// stall or restart a store under it.
type Load struct {
	stopc   chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	results [][]Result   // per goroutine
	lastErr atomic.Int64 // start (unix ns) of the latest failed Check that has returned
	lastOK  atomic.Int64 // start (unix ns) of the latest successful Check that has returned
}

// StartLoad starts a Load on s; it stops at the latest when the test ends.
func StartLoad(t *testing.T, s sluice.Store, goroutines int, timeout time.Duration) *Load {
	t.Helper()
	l := &Load{stopc: make(chan struct{}), results: make([][]Result, goroutines)}
	t.Cleanup(func() { l.Stop() })
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
				r := Result{Start: time.Now()}
				r.Decision, r.Err = s.Check(ctx, 0, LoadPolicy, key, 1)
				r.Took = time.Since(r.Start)
				cancel()
				l.results[g] = append(l.results[g], r)
				if r.Err != nil {
					l.lastErr.Store(r.Start.UnixNano())
				} else {
					l.lastOK.Store(r.Start.UnixNano())
				}
				// Pace the callers: a refused connection fails in microseconds, and spinning
				// goroutines would starve the restarting store and the timers on a small machine.
				time.Sleep(time.Millisecond)
			}
		})
	}
	return l
}

// Stop ends the load and returns every Check, in no particular order.
func (l *Load) Stop() []Result {
	l.once.Do(func() { close(l.stopc) })
	l.wg.Wait()
	var all []Result
	for _, rs := range l.results {
		all = append(all, rs...)
	}
	return all
}

// WaitClean waits, for at most within, until no Check has failed for quiet and one has succeeded
// since, and returns that moment: every Check started after it must succeed.
func (l *Load) WaitClean(t *testing.T, within, quiet time.Duration) time.Time {
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
