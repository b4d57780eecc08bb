package algo_test

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// A strategy's Check is a pure function of the state, the instant and the cost: the caller keeps
// the state and decides at fixed instants.
func ExampleGCRA_Check() {
	g := algo.NewGCRA(sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5})
	var s algo.GCRAState // a fresh key
	for _, now := range []int64{1000, 1000, 1000, 1000, 1000, 1000, 1100} {
		var d sluice.Decision
		s, d = g.Check(s, now, 1)
		fmt.Printf("t=%d allowed=%v remaining=%d retryAfterMs=%d\n", now, d.Allowed, d.Remaining, d.RetryAfterMs)
	}
	// Output:
	// t=1000 allowed=true remaining=4 retryAfterMs=0
	// t=1000 allowed=true remaining=3 retryAfterMs=0
	// t=1000 allowed=true remaining=2 retryAfterMs=0
	// t=1000 allowed=true remaining=1 retryAfterMs=0
	// t=1000 allowed=true remaining=0 retryAfterMs=0
	// t=1000 allowed=false remaining=0 retryAfterMs=100
	// t=1100 allowed=true remaining=0 retryAfterMs=0
}

// Spend and Verdict split a check around a compare-and-swap of the key's state: only Spend's few
// operations run between reading the state and swapping in the next one, and the verdict's
// divisions come after, when other checks of the key no longer wait on them.
func ExampleGCRA_Spend() {
	g := algo.NewGCRA(sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 2})
	var tat atomic.Uint64 // the key's state, as a float64's bits; 0 is a fresh key
	check := func(now int64) sluice.Verdict {
		for {
			bits := tat.Load()
			old := algo.GCRAState{TAT: math.Float64frombits(bits)}
			next, ok := g.Spend(old, now, 1)
			if !ok || tat.CompareAndSwap(bits, math.Float64bits(next.TAT)) {
				return g.Verdict(old, next, now, 1, ok)
			}
		}
	}
	for _, now := range []int64{1000, 1000, 1000, 1100} {
		v := check(now)
		fmt.Printf("t=%d allowed=%v remaining=%d retryAfterMs=%d\n", now, v.Allowed, v.Remaining, v.RetryAfterMs)
	}
	// Output:
	// t=1000 allowed=true remaining=1 retryAfterMs=0
	// t=1000 allowed=true remaining=0 retryAfterMs=0
	// t=1000 allowed=false remaining=0 retryAfterMs=100
	// t=1100 allowed=true remaining=0 retryAfterMs=0
}

// A token bucket's state is two words, so a store locks it; Spend is all it does under the lock,
// and the verdict's divisions come after.
func ExampleTokenBucket_Spend() {
	b := algo.NewTokenBucket(sluice.TokenBucket{Capacity: 2, RefillPerSec: 10})
	var (
		mu    sync.Mutex // guards state
		state algo.TokenBucketState
	)
	check := func(now int64) sluice.Verdict {
		mu.Lock()
		next, tokens := b.Spend(state, now, 1)
		state = next
		mu.Unlock()
		return b.Verdict(tokens, now, 1)
	}
	for _, now := range []int64{1000, 1000, 1000, 1100} {
		v := check(now)
		fmt.Printf("t=%d allowed=%v remaining=%d retryAfterMs=%d\n", now, v.Allowed, v.Remaining, v.RetryAfterMs)
	}
	// Output:
	// t=1000 allowed=true remaining=1 retryAfterMs=0
	// t=1000 allowed=true remaining=0 retryAfterMs=0
	// t=1000 allowed=false remaining=0 retryAfterMs=100
	// t=1100 allowed=true remaining=0 retryAfterMs=0
}

func ExampleTokenBucket_Forecast() {
	b := algo.NewTokenBucket(sluice.TokenBucket{Capacity: 100, RefillPerSec: 10})
	s, _ := b.Check(algo.TokenBucketState{}, 1000, 95) // 5 tokens left
	f := b.Forecast(s, 1000, 2)
	fmt.Printf("spendable now: %d checks of 2; one more token at %d; full at %d\n", f.SpendableNow, f.NextReplenishAt, f.FullAt)
	// Output:
	// spendable now: 2 checks of 2; one more token at 1100; full at 10500
}
