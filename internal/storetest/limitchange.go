package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// LimitVariants holds, for each strategy, policies of one name whose limits differ: what a plan, an
// override or a reload changes a key's limit between. The strategy stays; the numbers change, and
// for a fixed window and a log the window's length too (every store reads the state kept under the
// new window). A sliding window keeps its window and buckets: a state of another layout is read
// differently by Redis and PostgreSQL, and as a fresh key by the memory store (docs/semantics.md,
// When a key's limit changes).
var LimitVariants = [][]*sluice.Policy{
	variants("lc-gcra",
		sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5},
		sluice.GCRA{Limit: 20, PeriodMs: 1000, Burst: 10},
		sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 1}),
	variants("lc-bucket",
		sluice.TokenBucket{Capacity: 10, RefillPerSec: 2},
		sluice.TokenBucket{Capacity: 20, RefillPerSec: 10},
		sluice.TokenBucket{Capacity: 3, RefillPerSec: 1}),
	variants("lc-fixed",
		sluice.FixedWindow{Limit: 10, WindowMs: 10_000},
		sluice.FixedWindow{Limit: 20, WindowMs: 10_000},
		sluice.FixedWindow{Limit: 3, WindowMs: 10_000}),
	variants("lc-sliding",
		sluice.SlidingWindow{Limit: 10, WindowMs: 10_000, Buckets: 5},
		sluice.SlidingWindow{Limit: 20, WindowMs: 10_000, Buckets: 5},
		sluice.SlidingWindow{Limit: 3, WindowMs: 10_000, Buckets: 5}),
	variants("lc-log",
		sluice.SlidingWindowLog{Limit: 10, WindowMs: 10_000},
		sluice.SlidingWindowLog{Limit: 20, WindowMs: 10_000},
		sluice.SlidingWindowLog{Limit: 3, WindowMs: 10_000}),
	variants("lc-fixed-length",
		sluice.FixedWindow{Limit: 10, WindowMs: 10_000},
		sluice.FixedWindow{Limit: 20, WindowMs: 20_000},
		sluice.FixedWindow{Limit: 5, WindowMs: 5_000}),
	variants("lc-log-length",
		sluice.SlidingWindowLog{Limit: 10, WindowMs: 10_000},
		sluice.SlidingWindowLog{Limit: 20, WindowMs: 20_000},
		sluice.SlidingWindowLog{Limit: 3, WindowMs: 5_000}),
}

func variants(name string, strategies ...sluice.Strategy) []*sluice.Policy {
	ps := make([]*sluice.Policy, len(strategies))
	for i, st := range strategies {
		ps[i] = sluice.MustPolicy(name, sluice.Limit{Strategy: st})
	}
	return ps
}

// LimitChange replays steps random checks, peeks, forecasts, refunds and debits from seed on s and
// on a fresh memory store at the same instants, each step under one of its strategy's
// LimitVariants picked at random, so that a key's limit changes between and within windows; it
// fails at the first answer that differs, or a decision whose Limit is not the one applied.
func LimitChange(t *testing.T, s sluice.Store, seed uint64, steps int) {
	t.Helper()
	ms := memory.New(memory.Config{})
	defer ms.Close()
	LimitChangeBetween(t, s, ms, LimitVariants, seed, steps)
}

// LimitChangeBetween is LimitChange with the reference store ms, over the variant sets given (each
// a slice of policies of one name): it compares any two stores, such as Redis and PostgreSQL.
func LimitChangeBetween(t *testing.T, s, ms sluice.Store, variants [][]*sluice.Policy, seed uint64, steps int) {
	t.Helper()
	limitChange(t, s, ms, variants, seed, steps, nil)
}

// LimitChangeSwept is LimitChange between two memory stores, one of which is swept every 25 steps:
// the sweep forgets a key only once it is idle under every limit bound to its keyspace, so no
// answer may tell the two apart. Every variant is bound before the first step (a limit first used
// after a key was forgotten reads it as fresh). A token bucket's refunds are left out: a refund
// under a smaller capacity fills a kept key to that capacity only, which a later check under a
// larger one tells from a forgotten key, however full the key was (docs/semantics.md, When a key's
// limit changes).
func LimitChangeSwept(t *testing.T, seed uint64, steps int) {
	t.Helper()
	kept := memory.New(memory.Config{SweepInterval: -1})
	defer kept.Close()
	swept := memory.New(memory.Config{SweepInterval: -1})
	defer swept.Close()
	for _, vs := range LimitVariants {
		for _, p := range vs {
			if _, err := swept.Peek(context.Background(), t0, p, "bound"); err != nil {
				t.Fatal(err)
			}
		}
	}
	limitChange(t, kept, swept, LimitVariants, seed, steps, swept.Sweep)
}

func limitChange(t *testing.T, s, ms sluice.Store, variants [][]*sluice.Policy, seed uint64, steps int, sweep func()) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 7))
	keys := []string{"a", "b", "c"}
	now := t0
	for step := range steps {
		now += int64(r.IntN(700))
		if sweep != nil && step%25 == 24 {
			sweep()
		}
		vs := variants[r.IntN(len(variants))]
		v := r.IntN(len(vs))
		p, k, cost := vs[v], keys[r.IntN(len(keys))], int64(1+r.IntN(3))
		var got, want any
		var what string
		op := r.IntN(10)
		if _, ok := p.Limits()[0].Strategy.(sluice.TokenBucket); ok && sweep != nil && op == 8 {
			op = 6 // a peek for a refund (LimitChangeSwept)
		}
		switch {
		case op < 5:
			what = fmt.Sprintf("Check(%s #%d, %s, cost %d)", p.Name(), v, k, cost)
			d1, err1 := s.Check(ctx, now, p, k, cost)
			d2, err2 := ms.Check(ctx, now, p, k, cost)
			got, want = []any{d1, err1}, []any{d2, err2}
			if err1 == nil && d1.Limit != int64(p.Limits()[0].Strategy.Ceiling()) {
				t.Fatalf("step %d: %s: limit %d, want the applied %v", step, what, d1.Limit, p.Limits()[0].Strategy.Ceiling())
			}
		case op < 7:
			what = fmt.Sprintf("Peek(%s #%d, %s)", p.Name(), v, k)
			d1, err1 := s.Peek(ctx, now, p, k)
			d2, err2 := ms.Peek(ctx, now, p, k)
			got, want = []any{d1, err1}, []any{d2, err2}
		case op < 8:
			what = fmt.Sprintf("Forecast(%s #%d, %s, cost %d)", p.Name(), v, k, cost)
			f1, err1 := s.Forecast(ctx, now, p, k, cost)
			f2, err2 := ms.Forecast(ctx, now, p, k, cost)
			got, want = []any{f1, err1}, []any{f2, err2}
		case op < 9:
			what = fmt.Sprintf("Refund(%s #%d, %s, cost %d)", p.Name(), v, k, cost)
			got, want = s.Refund(ctx, now, p, k, cost), ms.Refund(ctx, now, p, k, cost)
		default:
			what = fmt.Sprintf("Debit(%s #%d, %s, cost %d)", p.Name(), v, k, 2*cost)
			got, want = s.Debit(ctx, now, p, k, 2*cost), ms.Debit(ctx, now, p, k, 2*cost)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d at %d: %s\nstore:  %+v\nmemory: %+v", step, now-t0, what, got, want)
		}
	}
}
