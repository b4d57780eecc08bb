package storetest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// coalesceCallers is how many goroutines call at once in Coalesced.
const coalesceCallers = 32

// coalesceCases are the policies Coalesced runs: one limit of each strategy, and a composite one
// whose first limit counts cost and second requests, so that its Refunds and Debits reach one
// limit of two. sameAsAlone's traffic keeps each near its limits.
var coalesceCases = []struct {
	name   string
	limits []sluice.Limit
}{
	{"gcra", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 6}}}},
	{"tokenBucket", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 6, RefillPerSec: 2.5}}}},
	{"fixedWindow", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 6, WindowMs: 700}}}},
	{"slidingWindow", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: 6, WindowMs: 1000, Buckets: 4}}}},
	{"slidingWindowLog", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: 6, WindowMs: 800}}}},
	{"composite", []sluice.Limit{
		{Strategy: sluice.TokenBucket{Capacity: 9, RefillPerSec: 3}},
		{Strategy: sluice.SlidingWindow{Limit: 5, WindowMs: 1000, Buckets: 10}, Unit: sluice.UnitRequest},
	}},
}

// coalesceOps are the operations Coalesced sends concurrently, each at the instant now for caller
// g on g's own keys, the answer as a comparable value. Costs and key counts differ by caller, so
// that the callers sharing a run want different answers.
var coalesceOps = []struct {
	name string
	do   func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any
}{
	{"CheckMany", func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any {
		ks := []string{keys[0], keys[1], keys[0]}[:1+g%3] // one key, two, or the first again
		out := make([]sluice.Decision, len(ks))
		err := s.CheckMany(ctx, now, p, ks, 1+int64(g%2), out)
		return []any{out, err}
	}},
	{"Peek", func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any {
		d, err := s.Peek(ctx, now, p, keys[g%2])
		return []any{d, err}
	}},
	{"Forecast", func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any {
		f, err := s.Forecast(ctx, now, p, keys[g%2], 1+int64(g%3))
		return []any{f, err}
	}},
	{"Debit", func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any {
		return s.Debit(ctx, now, p, keys[1], 1+int64(g%4))
	}},
	{"Refund", func(ctx context.Context, s sluice.Store, now int64, p *sluice.Policy, keys [2]string, g int) any {
		return s.Refund(ctx, now, p, keys[g%2], 1+int64(g%3))
	}},
}

// Coalesced checks that calls of many concurrent callers, however s coalesces them, answer what
// each would alone: CheckMany, Peek, Forecast, Debit and Refund at fixed instants answer as the
// memory store does to the same calls one after another, and a hot key checked by concurrent
// CheckManys at one instant admits exactly its limit. Keys start with a prefix of their own per
// call, so s may hold other state.
func Coalesced(t *testing.T, s sluice.Store) {
	t.Helper()
	prefix := fmt.Sprintf("coalesce-%d-", time.Now().UnixNano())
	t.Run("sameAsAlone", func(t *testing.T) { coalescedSameAsAlone(t, s, prefix) })
	t.Run("hotKey", func(t *testing.T) { coalescedHotKey(t, s, prefix) })
}

// coalescedSameAsAlone runs rounds of coalesceOps, each operation by coalesceCallers goroutines
// released at once at one instant, each caller on two keys of its own, and compares every answer
// with the memory store's for the same caller's calls on its keys.
func coalescedSameAsAlone(t *testing.T, s sluice.Store, prefix string) {
	t.Helper()
	const rounds = 6
	ctx := context.Background()
	for _, c := range coalesceCases {
		t.Run(c.name, func(t *testing.T) {
			p := sluice.MustPolicy("coalesce-"+c.name, c.limits...)
			ms := memory.New(memory.Config{})
			defer ms.Close()
			keys := make([][2]string, coalesceCallers)
			for g := range keys {
				keys[g] = [2]string{fmt.Sprint(prefix, c.name, "-", g, "-a"), fmt.Sprint(prefix, c.name, "-", g, "-b")}
			}
			var denied atomic.Int64
			for r := range rounds {
				now := t0 + int64(r)*173
				for _, op := range coalesceOps {
					together(coalesceCallers, func(g int) {
						got := op.do(ctx, s, now, p, keys[g], g)
						want := op.do(ctx, ms, now, p, keys[g], g)
						if !reflect.DeepEqual(got, want) {
							t.Errorf("round %d, %s of caller %d:\nstore:  %+v\nmemory: %+v", r, op.name, g, got, want)
						}
						if op.name == "CheckMany" {
							for _, d := range got.([]any)[0].([]sluice.Decision) {
								if !d.Allowed {
									denied.Add(1)
								}
							}
						}
					})
					if t.Failed() {
						return
					}
				}
			}
			if denied.Load() == 0 {
				t.Error("no CheckMany was denied: the denials' answers went untested")
			}
		})
	}
}

// coalescedHotKey has coalesceCallers goroutines, released at once, each send three CheckManys
// of one shared key and a key of its own at one instant: the shared key must admit exactly its
// limit of 40 in all, and each own key all three checks.
func coalescedHotKey(t *testing.T, s sluice.Store, prefix string) {
	t.Helper()
	const limit, each = 40, 3
	cases := []struct {
		name   string
		limits []sluice.Limit
	}{
		{"gcra", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: limit}}}},
		{"tokenBucket", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: limit, RefillPerSec: 1e-6}}}},
		{"fixedWindow", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 1e9}}}},
		{"slidingWindow", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: limit, WindowMs: 1e9, Buckets: 10}}}},
		{"slidingWindowLog", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: limit, WindowMs: 1e9}}}},
		{"composite", []sluice.Limit{
			{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}},
			{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 1e9}, Unit: sluice.UnitRequest},
		}},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := sluice.MustPolicy("coalesce-hot-"+c.name, c.limits...)
			hot := prefix + "hot-" + c.name
			var admitted atomic.Int64
			together(coalesceCallers, func(g int) {
				keys := []string{hot, fmt.Sprint(prefix, "own-", c.name, "-", g)}
				out := make([]sluice.Decision, len(keys))
				for i := range each {
					if err := s.CheckMany(ctx, t0, p, keys, 1, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed {
						admitted.Add(1)
					}
					if !out[1].Allowed {
						t.Errorf("caller %d, CheckMany %d: its own key was denied: %+v", g, i, out[1])
					}
				}
			})
			if got := admitted.Load(); got != limit {
				t.Errorf("the hot key admitted %d of %d checks, want exactly %d", got, coalesceCallers*each, limit)
			}
		})
	}
}

// together runs f(0) to f(n-1) on goroutines of their own, released at once, and waits for them.
func together(n int, f func(g int)) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			<-gate
			f(g)
		})
	}
	close(gate)
	wg.Wait()
}
