package memory_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

// TestLimitChangeKeepsState: a key's state survives a change of its limit (a policy of the same
// name and strategy with other numbers) and is read under the numbers of the policy checked, as
// Redis and PostgreSQL read it (docs/semantics.md, When a key's limit changes). Each case spends
// under before, then peeks and checks under after at the instant given; every decision reports the
// limit applied, after's.
func TestLimitChangeKeepsState(t *testing.T) {
	type spend struct{ at, cost int64 }
	for _, tc := range []struct {
		name          string
		before, after sluice.Strategy
		spent         []spend
		at            int64 // ms after epoch0
		allowed       bool  // what a Peek under after says
		remaining     int64
		apart         bool // after has a keyspace of its own: the key is held twice
	}{
		{
			name:   "tokenBucket capacity 10 to 5, 8 tokens left: 5",
			before: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}, after: sluice.TokenBucket{Capacity: 5, RefillPerSec: 1},
			spent: []spend{{0, 2}}, at: 0, allowed: true, remaining: 5,
		},
		{
			name:   "tokenBucket capacity 10 to 20, 2 left, refilled at the new rate",
			before: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}, after: sluice.TokenBucket{Capacity: 20, RefillPerSec: 4},
			spent: []spend{{0, 8}}, at: 1000, allowed: true, remaining: 6, // 2 + 4 in one second
		},
		{
			name:   "fixedWindow limit 10 to 20, 8 spent: 12 left",
			before: sluice.FixedWindow{Limit: 10, WindowMs: 10_000}, after: sluice.FixedWindow{Limit: 20, WindowMs: 10_000},
			spent: []spend{{0, 5}, {3000, 3}}, at: 5000, allowed: true, remaining: 12,
		},
		{
			name:   "fixedWindow limit 10 to 5, 8 spent: none left",
			before: sluice.FixedWindow{Limit: 10, WindowMs: 10_000}, after: sluice.FixedWindow{Limit: 5, WindowMs: 10_000},
			spent: []spend{{0, 8}}, at: 5000, allowed: false, remaining: 0,
		},
		{
			name:   "fixedWindow 10 s to 20 s, 8 spent in a window starting at the same instant",
			before: sluice.FixedWindow{Limit: 10, WindowMs: 10_000}, after: sluice.FixedWindow{Limit: 20, WindowMs: 20_000},
			spent: []spend{{0, 8}}, at: 12_000, allowed: true, remaining: 12,
		},
		{
			// T 100 ms, tau 500 ms, 3 cells: TAT epoch0+300. Under T 50 ms, tau 500 ms it leaves
			// (500 - 300) / 50 = 4 cells.
			name:   "gcra 10/s burst 5 to 20/s burst 10: the TAT kept",
			before: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}, after: sluice.GCRA{Limit: 20, PeriodMs: 1000, Burst: 10},
			spent: []spend{{0, 3}}, at: 0, allowed: true, remaining: 4,
		},
		{
			name:   "gcra 10/s burst 5 to 2/s burst 1: the TAT kept",
			before: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}, after: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 1},
			spent: []spend{{0, 3}}, at: 100, allowed: false, remaining: 0, // TAT 200 ms ahead, tau 500
		},
		{
			name:   "slidingWindow limit 10 to 20, same window and buckets: the counts kept",
			before: sluice.SlidingWindow{Limit: 10, WindowMs: 10_000, Buckets: 5}, after: sluice.SlidingWindow{Limit: 20, WindowMs: 10_000, Buckets: 5},
			spent: []spend{{0, 4}, {4000, 2}}, at: 6000, allowed: true, remaining: 14,
		},
		{
			name:   "slidingWindow buckets 5 to 10: another layout starts afresh",
			before: sluice.SlidingWindow{Limit: 10, WindowMs: 10_000, Buckets: 5}, after: sluice.SlidingWindow{Limit: 10, WindowMs: 10_000, Buckets: 10},
			spent: []spend{{0, 6}}, at: 1000, allowed: true, remaining: 10, apart: true,
		},
		{
			name:   "slidingWindowLog limit 10 to 5: the instants kept",
			before: sluice.SlidingWindowLog{Limit: 10, WindowMs: 10_000}, after: sluice.SlidingWindowLog{Limit: 5, WindowMs: 10_000},
			spent: []spend{{0, 2}, {5000, 2}}, at: 6000, allowed: true, remaining: 1,
		},
		{
			name:   "slidingWindowLog 10 s to 5 s: the instants kept, counted in the new window",
			before: sluice.SlidingWindowLog{Limit: 10, WindowMs: 10_000}, after: sluice.SlidingWindowLog{Limit: 10, WindowMs: 5000},
			spent: []spend{{0, 4}, {5000, 3}}, at: 6000, allowed: true, remaining: 7,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, memory.Config{SweepInterval: -1})
			before := sluice.MustPolicy("plan", sluice.Limit{Strategy: tc.before})
			after := sluice.MustPolicy("plan", sluice.Limit{Strategy: tc.after})
			for _, s := range tc.spent {
				if d := storeCheck(t, st, epoch0+s.at, before, "k", s.cost); !d.Allowed {
					t.Fatalf("spending %d at +%d under before: %+v", s.cost, s.at, d)
				}
			}
			limit := int64(tc.after.Ceiling())
			d := storePeek(t, st, epoch0+tc.at, after, "k")
			if d.Allowed != tc.allowed || d.Remaining != tc.remaining || d.Limit != limit {
				t.Fatalf("Peek under after: %+v, want allowed %v, remaining %d, limit %d", d, tc.allowed, tc.remaining, limit)
			}
			d = storeCheck(t, st, epoch0+tc.at, after, "k", 1)
			want := tc.remaining
			if tc.allowed {
				want--
			}
			if d.Allowed != tc.allowed || d.Remaining != want || d.Limit != limit {
				t.Fatalf("Check under after: %+v, want allowed %v, remaining %d, limit %d", d, tc.allowed, want, limit)
			}
			if v, err := st.CheckVerdict(bg, epoch0+tc.at, after, "k", 1); err != nil || (tc.allowed && v.Remaining != max(want-1, 0)) {
				t.Fatalf("CheckVerdict under after: %+v, %v", v, err)
			}
			if tc.apart {
				wantLen(t, st, 2, "the key in each layout's keyspace")
			} else {
				wantLen(t, st, 1, "one key whichever limit reads it")
			}
		})
	}
}

// TestLimitChangeSweep: the sweep forgets a key only once it is idle under every limit bound to
// its keyspace. A token bucket spent under capacity 3 is full again under it after 3 s, but holds 3
// of capacity 10 then, and is kept until it is full under both.
func TestLimitChangeSweep(t *testing.T) {
	clk := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clk.Now, SweepInterval: -1})
	small := sluice.MustPolicy("plan", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 1}})
	large := sluice.MustPolicy("plan", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}})
	storePeek(t, st, 0, large, "other") // binds large
	if d := storeCheck(t, st, 0, small, "k", 3); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("check under capacity 3: %+v", d)
	}
	clk.Set(epoch0 + 3000)
	st.Sweep()
	wantLen(t, st, 1, "full under capacity 3, not under 10")
	if d := storePeek(t, st, 0, large, "k"); d.Remaining != 3 {
		t.Fatalf("Peek under capacity 10 after the sweep: %+v, want the 3 tokens refilled", d)
	}
	clk.Set(epoch0 + 10_000)
	st.Sweep()
	wantLen(t, st, 0, "full under both")
}

// TestLimitChangeSwept: sweeping the memory store never shows in its answers while keys' limits
// change (storetest.LimitChangeSwept).
func TestLimitChangeSwept(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			storetest.LimitChangeSwept(t, seed, 1500)
		})
	}
}

// TestLimitChangeCheckAll: items of one key under two policies of one name with different limits
// share the key's slot (locked once), each deciding it with its own numbers, and a denied call puts
// it back.
func TestLimitChangeCheckAll(t *testing.T) {
	st := openStore(t, memory.Config{SweepInterval: -1})
	ten := sluice.MustPolicy("plan", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 10_000}})
	four := sluice.MustPolicy("plan", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 4, WindowMs: 10_000}})
	ps := []*sluice.Policy{ten, four}
	out := make([]sluice.Decision, 2)
	items := []sluice.Item{{Policy: "plan", Key: "k", Cost: 2}, {Policy: "plan", Key: "k", Cost: 3}}
	if err := st.CheckAll(bg, epoch0, ps, items, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Limit != 10 || out[1].Limit != 4 || out[1].Allowed || out[1].Remaining != 2 {
		t.Fatalf("2 then 3 under limits 10 and 4: %+v, want the second denied with 2 of 4 left", out)
	}
	if d := storePeek(t, st, epoch0, ten, "k"); d.Remaining != 10 {
		t.Fatalf("after the denied call: %+v, want nothing spent", d)
	}
	items[1].Cost = 2
	if err := st.CheckAll(bg, epoch0, ps, items, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[0].Remaining != 8 || !out[1].Allowed || out[1].Remaining != 0 {
		t.Fatalf("2 then 2 under limits 10 and 4: %+v", out)
	}
	if d := storePeek(t, st, epoch0, ten, "k"); d.Remaining != 6 {
		t.Fatalf("after the allowed call: %+v, want 4 spent", d)
	}
}
