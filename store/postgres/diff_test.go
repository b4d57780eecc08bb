package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// diffPolicies are small enough that random traffic keeps them near their limits, so every path
// (admit, deny, refill, window roll-over, refund) runs.
var diffPolicies = []*sluice.Policy{
	sluice.MustPolicy("gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 4}}),
	sluice.MustPolicy("tokenBucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 2.5}}),
	sluice.MustPolicy("fixedWindow", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 6, WindowMs: 700}}),
	sluice.MustPolicy("slidingWindow", sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 7, WindowMs: 1000, Buckets: 4}}),
	sluice.MustPolicy("slidingWindowLog", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 5, WindowMs: 800}}),
	sluice.MustPolicy("model",
		sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 4, WindowMs: 1000, Buckets: 10}, Unit: sluice.UnitRequest},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 9, RefillPerSec: 3}}),
	sluice.MustPolicy("mixed",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 5, PeriodMs: 1000, Burst: 3}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 8, WindowMs: 2000}},
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 6, WindowMs: 1500}, Unit: sluice.UnitRequest}),
	// Fractional parameters, so that truncation and float rounding show.
	sluice.MustPolicy("fractional",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 2.5}},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 4.7, RefillPerSec: 1.3}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5.5, WindowMs: 333.3}},
		sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 6.2, WindowMs: 900.5, Buckets: 7}, Unit: sluice.UnitRequest}),
}

// TestSameAsMemory replays random traffic (every operation, every strategy, composite policies,
// keys repeated within one call) against the memory store and PostgreSQL at the same instants and
// requires every answer to be equal.
func TestSameAsMemory(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			s, _, _ := newStore(t, pgstore.Config{})
			sameAsMemory(t, s, seed, 1500)
		})
	}
}

// sameAsMemory runs steps random operations from seed on ps and on a fresh memory store and fails
// at the first answer that differs.
func sameAsMemory(t *testing.T, ps sluice.Store, seed uint64, steps int) {
	t.Helper()
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 42))
	keys := []string{"a", "b", "c"}
	policy := func() *sluice.Policy { return diffPolicies[r.IntN(len(diffPolicies))] }
	key := func() string { return keys[r.IntN(len(keys))] }
	now := t0
	for step := range steps {
		now += int64(r.IntN(250))
		cost := int64(1 + r.IntN(3))
		p := policy()
		var got, want any
		var what string
		switch op := r.IntN(20); {
		case op < 8:
			what = fmt.Sprintf("Check(%s, cost %d)", p.Name(), cost)
			k := key()
			d1, err1 := ps.Check(ctx, now, p, k, cost)
			d2, err2 := ms.Check(ctx, now, p, k, cost)
			got, want = []any{d1, err1}, []any{d2, err2}
		case op < 10:
			ks := make([]string, 1+r.IntN(4))
			for i := range ks {
				ks[i] = key()
			}
			what = fmt.Sprintf("CheckMany(%s, %v, cost %d)", p.Name(), ks, cost)
			out1, out2 := make([]sluice.Decision, len(ks)), make([]sluice.Decision, len(ks))
			err1 := ps.CheckMany(ctx, now, p, ks, cost, out1)
			err2 := ms.CheckMany(ctx, now, p, ks, cost, out2)
			got, want = []any{out1, err1}, []any{out2, err2}
		case op < 13:
			ops := make([]sluice.Op, 2+r.IntN(3))
			for i := range ops {
				ops[i] = sluice.Op{Policy: policy(), Key: key(), Cost: int64(1 + r.IntN(3))}
			}
			what = fmt.Sprintf("CheckAll(%d ops)", len(ops))
			out1, out2 := make([]sluice.Decision, len(ops)), make([]sluice.Decision, len(ops))
			err1 := ps.CheckAll(ctx, now, ops, out1)
			err2 := ms.CheckAll(ctx, now, ops, out2)
			got, want = []any{out1, err1}, []any{out2, err2}
		case op < 15:
			what = fmt.Sprintf("Peek(%s)", p.Name())
			k := key()
			d1, err1 := ps.Peek(ctx, now, p, k)
			d2, err2 := ms.Peek(ctx, now, p, k)
			got, want = []any{d1, err1}, []any{d2, err2}
		case op < 17:
			what = fmt.Sprintf("Forecast(%s, cost %d)", p.Name(), cost)
			k := key()
			f1, err1 := ps.Forecast(ctx, now, p, k, cost)
			f2, err2 := ms.Forecast(ctx, now, p, k, cost)
			got, want = []any{f1, err1}, []any{f2, err2}
		case op < 19:
			what = fmt.Sprintf("Refund(%s, cost %d)", p.Name(), cost)
			k := key()
			got, want = ps.Refund(ctx, now, p, k, cost), ms.Refund(ctx, now, p, k, cost)
		default:
			what = fmt.Sprintf("Reset(%s)", p.Name())
			k := key()
			got, want = ps.Reset(ctx, p, k), ms.Reset(ctx, p, k)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d at %d: %s\npostgres: %+v\nmemory:   %+v", step, now-t0, what, got, want)
		}
	}
}
