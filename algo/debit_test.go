package algo_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// debitor returns check and debit functions over one private state for strategy s.
func debitor(s sluice.Strategy) (check func(now, cost int64) sluice.Decision, debit func(now, cost int64)) {
	switch s := s.(type) {
	case sluice.GCRA:
		a := algo.NewGCRA(s)
		return newDebitor(a.Check, a.Debit)
	case sluice.TokenBucket:
		a := algo.NewTokenBucket(s)
		return newDebitor(a.Check, a.Debit)
	case sluice.FixedWindow:
		a := algo.NewFixedWindow(s)
		return newDebitor(a.Check, a.Debit)
	case sluice.SlidingWindow:
		a := algo.NewSlidingWindow(s)
		return newDebitor(a.Check, a.Debit)
	case sluice.SlidingWindowLog:
		a := algo.NewSlidingWindowLog(s)
		return newDebitor(a.Check, a.Debit)
	}
	panic("unknown strategy")
}

func newDebitor[S any](check func(S, int64, int64) (S, sluice.Decision), debit func(S, int64, int64) S) (func(int64, int64) sluice.Decision, func(int64, int64)) {
	var st S
	return func(now, cost int64) sluice.Decision {
			var d sluice.Decision
			st, d = check(st, now, cost)
			return d
		}, func(now, cost int64) {
			st = debit(st, now, cost)
		}
}

// TestDebit charges a fresh key of a limit of 10 with 15 units, 5 past its ceiling, and checks
// that the next check is denied until the debt is paid back at the limit's rate, then admitted.
func TestDebit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy sluice.Strategy
		at       int64 // the debit's instant, and the denied check's
		retry    int64 // the denied check's retryAfterMs
		free     int64 // the first instant a check is admitted again
	}{
		// T = 100 ms, tau = 1000: TAT 1500 after the debit; a check at 0 needs TAT+T-tau = 600.
		{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}, 0, 600, 600},
		// 10 tokens - 15 = -5; one token needs 6 more, at 10 a second.
		{"token bucket", sluice.TokenBucket{Capacity: 10, RefillPerSec: 10}, 1000, 600, 1600},
		// 15 counted in [0, 1000); the next window starts at 1000.
		{"fixed window", sluice.FixedWindow{Limit: 10, WindowMs: 1000}, 100, 900, 1000},
		// 15 in bucket 0 of 100 ms. Once it is the oldest bucket (from 1000) it weighs 15×(1100-t)/100,
		// which leaves room for one more at 1040; retryAfterMs is the sliding window's usual hint,
		// the next bucket boundary.
		{"sliding window", sluice.SlidingWindow{Limit: 10, WindowMs: 1000, Buckets: 10}, 50, 50, 1040},
		// 15 units logged at 100 leave the window at 1100.
		{"sliding window log", sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}, 100, 1000, 1100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, debit := debitor(tc.strategy)
			debit(tc.at, 15)
			d := check(tc.at, 1)
			if d.Allowed || d.Remaining != 0 || d.RetryAfterMs != tc.retry {
				t.Fatalf("check after the debit: allowed %v, remaining %d, retryAfterMs %d; want denied, 0, %d",
					d.Allowed, d.Remaining, d.RetryAfterMs, tc.retry)
			}
			if d := check(tc.free-1, 1); d.Allowed {
				t.Fatalf("check at %d, before the debt is paid, was admitted: %+v", tc.free-1, d)
			}
			if d := check(tc.free, 1); !d.Allowed {
				t.Fatalf("check at %d, when the debt is paid, was denied: %+v", tc.free, d)
			}
		})
	}
}
