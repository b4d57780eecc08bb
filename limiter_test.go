package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the fixed instant (epoch ms) the tests decide at.
const t0 int64 = 1_700_000_000_000

// at is a context that makes a Limiter decide at the instant ms.
func at(ms int64) context.Context { return sluice.WithNow(context.Background(), ms) }

// newStore returns a memory store whose clock is fixed at now, closed when the test ends.
func newStore(t testing.TB, now int64) *memory.Store {
	t.Helper()
	s := memory.New(memory.Config{Now: func() int64 { return now }, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// newLimiter returns a Limiter with the given policies over a memory store fixed at t0.
func newLimiter(t testing.TB, policies ...*sluice.Policy) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(newStore(t, t0), policies...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lim
}

func mustCheck(t testing.TB, lim *sluice.Limiter, ctx context.Context, policy, key string, cost int64) sluice.Decision {
	t.Helper()
	d, err := lim.Check(ctx, policy, key, cost)
	if err != nil {
		t.Fatalf("Check(%s, %s, %d): %v", policy, key, cost, err)
	}
	return d
}

func mustPeek(t testing.TB, lim *sluice.Limiter, ctx context.Context, policy, key string) sluice.Decision {
	t.Helper()
	d, err := lim.Peek(ctx, policy, key)
	if err != nil {
		t.Fatalf("Peek(%s, %s): %v", policy, key, err)
	}
	return d
}

// wantLastOne checks that key under policy has exactly one unit left at ctx's instant: Peek says
// so, one check of cost 1 passes and the next one does not.
func wantLastOne(t *testing.T, lim *sluice.Limiter, ctx context.Context, policy, key string) {
	t.Helper()
	if d := mustPeek(t, lim, ctx, policy, key); !d.Allowed || d.Remaining != 1 {
		t.Errorf("%s/%s: Peek = allowed %v remaining %d, want allowed with 1 remaining", policy, key, d.Allowed, d.Remaining)
	}
	if d := mustCheck(t, lim, ctx, policy, key, 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("%s/%s: the last check: allowed %v remaining %d, want allowed with 0 remaining", policy, key, d.Allowed, d.Remaining)
	}
	if d := mustCheck(t, lim, ctx, policy, key, 1); d.Allowed {
		t.Errorf("%s/%s: a check past the last one was allowed", policy, key)
	}
}

func TestLimiterBadInputChangesNothing(t *testing.T) {
	// Policy "p" (capacity 3) and "q" (limit 3); the keys below are left with one unit each.
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 1}})
	q := sluice.MustPolicy("q", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}})
	victims := [][2]string{{"p", "a"}, {"p", "b"}, {"p", "c"}, {"q", "a"}}
	long := strings.Repeat("k", sluice.MaxKeyLen+1)
	ctx := at(t0)

	tests := []struct {
		name  string
		op    func(*sluice.Limiter) error
		field string
	}{
		{"Check cost 0", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", "a", 0); return err }, "cost"},
		{"Check cost -1", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", "a", -1); return err }, "cost"},
		{"Check cost MinInt64", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", "a", math.MinInt64); return err }, "cost"},
		{"Check cost above MaxCost", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", "a", 4); return err }, "cost"},
		{"Check cost MaxInt64", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "q", "a", math.MaxInt64); return err }, "cost"},
		{"Check empty key", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", "", 1); return err }, "key"},
		{"Check key of 1025 bytes", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "p", long, 1); return err }, "key"},
		{"CheckVerdict cost 0", func(l *sluice.Limiter) error { _, err := l.CheckVerdict(ctx, "p", "a", 0); return err }, "cost"},
		{"CheckVerdict cost above MaxCost", func(l *sluice.Limiter) error { _, err := l.CheckVerdict(ctx, "p", "a", 4); return err }, "cost"},
		{"CheckVerdict empty key", func(l *sluice.Limiter) error { _, err := l.CheckVerdict(ctx, "p", "", 1); return err }, "key"},
		{"CheckVerdict key of 1025 bytes", func(l *sluice.Limiter) error { _, err := l.CheckVerdict(ctx, "p", long, 1); return err }, "key"},
		{"CheckMany cost 0", func(l *sluice.Limiter) error { _, err := l.CheckMany(ctx, "p", []string{"a", "b"}, 0); return err }, "cost"},
		{"CheckMany cost above MaxCost", func(l *sluice.Limiter) error { _, err := l.CheckMany(ctx, "p", []string{"a", "b"}, 4); return err }, "cost"},
		{"CheckMany empty key at 2", func(l *sluice.Limiter) error {
			_, err := l.CheckMany(ctx, "p", []string{"a", "b", "", "c"}, 1)
			return err
		}, "keys[2]"},
		{"CheckMany long key at 2", func(l *sluice.Limiter) error {
			_, err := l.CheckMany(ctx, "p", []string{"a", "b", long}, 1)
			return err
		}, "keys[2]"},
		{"CheckMany empty key at 0", func(l *sluice.Limiter) error { _, err := l.CheckMany(ctx, "p", []string{"", "a"}, 1); return err }, "keys[0]"},
		{"CheckAll no items", func(l *sluice.Limiter) error { _, err := l.CheckAll(ctx); return err }, "items"},
		{"CheckAll cost 0 at 1", func(l *sluice.Limiter) error {
			_, err := l.CheckAll(ctx, sluice.Item{Policy: "p", Key: "a", Cost: 1}, sluice.Item{Policy: "q", Key: "a", Cost: 0})
			return err
		}, "items[1].cost"},
		{"CheckAll cost above MaxCost at 1", func(l *sluice.Limiter) error {
			_, err := l.CheckAll(ctx, sluice.Item{Policy: "q", Key: "a", Cost: 1}, sluice.Item{Policy: "p", Key: "b", Cost: 4})
			return err
		}, "items[1].cost"},
		{"CheckAll empty key at 2", func(l *sluice.Limiter) error {
			_, err := l.CheckAll(ctx, sluice.Item{Policy: "p", Key: "a", Cost: 1}, sluice.Item{Policy: "p", Key: "b", Cost: 1},
				sluice.Item{Policy: "q", Key: "", Cost: 1})
			return err
		}, "items[2].key"},
		{"CheckAll long key at 0", func(l *sluice.Limiter) error {
			_, err := l.CheckAll(ctx, sluice.Item{Policy: "p", Key: long, Cost: 1}, sluice.Item{Policy: "p", Key: "a", Cost: 1})
			return err
		}, "items[0].key"},
		{"Peek empty key", func(l *sluice.Limiter) error { _, err := l.Peek(ctx, "p", ""); return err }, "key"},
		{"Peek key of 1025 bytes", func(l *sluice.Limiter) error { _, err := l.Peek(ctx, "p", long); return err }, "key"},
		{"Forecast cost 0", func(l *sluice.Limiter) error { _, err := l.Forecast(ctx, "p", "a", 0); return err }, "cost"},
		{"Forecast cost above MaxCost", func(l *sluice.Limiter) error { _, err := l.Forecast(ctx, "p", "a", 4); return err }, "cost"},
		{"Forecast empty key", func(l *sluice.Limiter) error { _, err := l.Forecast(ctx, "p", "", 1); return err }, "key"},
		{"Refund cost 0", func(l *sluice.Limiter) error { return l.Refund(ctx, "p", "a", 0) }, "cost"},
		{"Refund cost -2", func(l *sluice.Limiter) error { return l.Refund(ctx, "q", "a", -2) }, "cost"},
		{"Refund empty key", func(l *sluice.Limiter) error { return l.Refund(ctx, "p", "", 1) }, "key"},
		{"Refund key of 1025 bytes", func(l *sluice.Limiter) error { return l.Refund(ctx, "p", long, 1) }, "key"},
		{"Reset empty key", func(l *sluice.Limiter) error { return l.Reset(ctx, "p", "") }, "key"},
		{"Reset key of 1025 bytes", func(l *sluice.Limiter) error { return l.Reset(ctx, "q", long) }, "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, p, q)
			for _, v := range victims {
				mustCheck(t, lim, ctx, v[0], v[1], 2)
			}
			before, _ := lim.Stats("p")
			wantInvalid(t, tt.op(lim), tt.field)
			if after, _ := lim.Stats("p"); after != before {
				t.Errorf("Stats changed by bad input: %+v, then %+v", before, after)
			}
			for _, v := range victims {
				wantLastOne(t, lim, ctx, v[0], v[1])
			}
		})
	}
}

// TestCheckVerdict runs one sequence of checks through Check on one limiter and through
// CheckVerdict on another, on the fast path (the memory store) and off it (a store that does not
// decide in Verdicts), and wants the same verdicts and the same counts.
func TestCheckVerdict(t *testing.T) {
	type plainStore struct{ sluice.Store } // hides the memory store's CheckVerdict
	policies := []*sluice.Policy{
		sluice.MustPolicy("gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 3}}),
		sluice.MustPolicy("bucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 2}}),
		sluice.MustPolicy("window", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 1000}}),
		sluice.MustPolicy("sliding", sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 3, WindowMs: 1000, Buckets: 4}}),
		sluice.MustPolicy("log", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 1000}}),
		sluice.MustPolicy("model",
			sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 4, WindowMs: 1000, Buckets: 10}, Unit: sluice.UnitRequest},
			sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 5}}),
	}
	steps := []struct {
		at   int64 // ms after t0
		key  string
		cost int64
	}{
		{0, "a", 1}, {0, "a", 2}, {0, "a", 1}, {0, "b", 3}, {250, "a", 1}, {400, "a", 2},
		{999, "b", 1}, {1000, "a", 1}, {1001, "a", 3}, {1500, "b", 2}, {2600, "a", 1},
	}
	for _, fast := range []bool{true, false} {
		for _, p := range policies {
			t.Run(fmt.Sprintf("%s/fast=%v", p.Name(), fast), func(t *testing.T) {
				var byCheck, byVerdict sluice.Store = newStore(t, t0), newStore(t, t0)
				if !fast {
					byCheck, byVerdict = plainStore{byCheck}, plainStore{byVerdict}
				}
				lc, err := sluice.New(byCheck, p)
				if err != nil {
					t.Fatal(err)
				}
				lv, err := sluice.New(byVerdict, p)
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range steps {
					cost := min(st.cost, p.MaxCost())
					ctx := at(t0 + st.at)
					d := mustCheck(t, lc, ctx, p.Name(), st.key, cost)
					v, err := lv.CheckVerdict(ctx, p.Name(), st.key, cost)
					if err != nil {
						t.Fatalf("step %d: CheckVerdict: %v", i, err)
					}
					want := sluice.Verdict{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfterMs}
					if v != want {
						t.Errorf("step %d: CheckVerdict = %+v, Check = %+v", i, v, want)
					}
				}
				sc, _ := lc.Stats(p.Name())
				sv, _ := lv.Stats(p.Name())
				if sc != sv || sc.Denied == 0 || sc.Allowed == 0 {
					t.Errorf("Stats after CheckVerdict %+v, after Check %+v; want equal, with both outcomes", sv, sc)
				}
			})
		}
	}
}

func TestLimiterKeyLength(t *testing.T) {
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"1 byte", "k", true},
		{"1024 bytes", strings.Repeat("k", 1024), true},
		{"1024 bytes of multi-byte runes", strings.Repeat("é", 512), true},
		{"1025 bytes", strings.Repeat("k", 1025), false},
		{"513 two-byte runes", strings.Repeat("é", 513), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, p)
			d, err := lim.Check(at(t0), "p", tt.key, 1)
			if !tt.ok {
				wantInvalid(t, err, "key")
				return
			}
			if err != nil || !d.Allowed {
				t.Fatalf("Check = %+v, %v; want allowed", d, err)
			}
			if d := mustCheck(t, lim, at(t0), "p", tt.key, 1); d.Allowed {
				t.Errorf("the key's state was not kept: second check allowed")
			}
		})
	}
}

func TestLimiterUnknownPolicy(t *testing.T) {
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}})
	ctx := at(t0)
	tests := []struct {
		name string
		op   func(*sluice.Limiter) error
	}{
		{"Check", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "nope", "a", 1); return err }},
		{"Check with bad cost too", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "nope", "a", 0); return err }},
		{"Check empty name", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "", "a", 1); return err }},
		{"CheckVerdict", func(l *sluice.Limiter) error { _, err := l.CheckVerdict(ctx, "nope", "a", 1); return err }},
		{"CheckMany", func(l *sluice.Limiter) error { _, err := l.CheckMany(ctx, "nope", []string{"a", "b"}, 1); return err }},
		{"CheckAll unknown second item", func(l *sluice.Limiter) error {
			_, err := l.CheckAll(ctx, sluice.Item{Policy: "p", Key: "a", Cost: 1}, sluice.Item{Policy: "nope", Key: "a", Cost: 1})
			return err
		}},
		{"Peek", func(l *sluice.Limiter) error { _, err := l.Peek(ctx, "nope", "a"); return err }},
		{"Forecast", func(l *sluice.Limiter) error { _, err := l.Forecast(ctx, "nope", "a", 1); return err }},
		{"Refund", func(l *sluice.Limiter) error { return l.Refund(ctx, "nope", "a", 1) }},
		{"Reset", func(l *sluice.Limiter) error { return l.Reset(ctx, "nope", "a") }},
		{"name differs in case", func(l *sluice.Limiter) error { _, err := l.Check(ctx, "P", "a", 1); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, p)
			mustCheck(t, lim, ctx, "p", "a", 2)
			err := tt.op(lim)
			if !errors.Is(err, sluice.ErrUnknownPolicy) {
				t.Fatalf("error %v, want one matching ErrUnknownPolicy", err)
			}
			if errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("error %v also matches ErrInvalid", err)
			}
			wantLastOne(t, lim, ctx, "p", "a")
			if st, ok := lim.Stats("p"); !ok || st != (sluice.Stats{Allowed: 2, Denied: 1}) {
				t.Errorf("Stats(p) = %+v, %v; want {2 1}", st, ok)
			}
		})
	}
	lim := newLimiter(t, p)
	if _, ok := lim.Stats("nope"); ok {
		t.Errorf("Stats of an unknown policy reported ok")
	}
	if _, ok := lim.Policy("nope"); ok {
		t.Errorf("Policy of an unknown policy reported ok")
	}
}

func TestNewRejectsBadPolicySet(t *testing.T) {
	a := sluice.MustPolicy("a", sluice.Limit{Strategy: validFixed})
	a2 := sluice.MustPolicy("a", sluice.Limit{Strategy: validGCRA})
	b := sluice.MustPolicy("b", sluice.Limit{Strategy: validFixed})
	tests := []struct {
		name     string
		policies []*sluice.Policy
	}{
		{"duplicate names", []*sluice.Policy{a, b, a2}},
		{"same policy twice", []*sluice.Policy{a, a}},
		{"nil policy", []*sluice.Policy{a, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := sluice.New(newStore(t, t0), tt.policies...)
			if lim != nil {
				t.Errorf("New returned a Limiter with an error expected")
			}
			wantInvalid(t, err, "policies")
		})
	}
}

func TestNewWithoutPolicies(t *testing.T) {
	lim := newLimiter(t)
	if n := len(lim.Policies()); n != 0 {
		t.Errorf("Policies() holds %d, want 0", n)
	}
	if _, err := lim.Check(at(t0), "p", "a", 1); !errors.Is(err, sluice.ErrUnknownPolicy) {
		t.Errorf("Check on an empty limiter: %v, want ErrUnknownPolicy", err)
	}
}

func TestLimiterPolicies(t *testing.T) {
	a := sluice.MustPolicy("a", sluice.Limit{Strategy: validFixed})
	b := sluice.MustPolicy("b", sluice.Limit{Strategy: validGCRA})
	lim := newLimiter(t, a, b)
	for _, want := range []*sluice.Policy{a, b} {
		if got, ok := lim.Policy(want.Name()); !ok || got != want {
			t.Errorf("Policy(%q) = %p, %v; want %p", want.Name(), got, ok, want)
		}
	}
	names := map[string]bool{}
	for _, p := range lim.Policies() {
		names[p.Name()] = true
	}
	if len(names) != 2 || !names["a"] || !names["b"] {
		t.Errorf("Policies() = %v, want a and b", names)
	}
}

func TestSetPolicies(t *testing.T) {
	ctx := at(t0)
	fixed := func(name string, limit float64) *sluice.Policy {
		return sluice.MustPolicy(name, sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 60_000}})
	}
	lim := newLimiter(t, fixed("same", 5), fixed("changed", 5), fixed("removed", 5))
	for _, name := range []string{"same", "changed", "removed"} {
		for i := 0; i < 7; i++ {
			mustCheck(t, lim, ctx, name, "k", 1) // 5 allowed, 2 denied
		}
		if st, _ := lim.Stats(name); st != (sluice.Stats{Allowed: 5, Denied: 2}) {
			t.Fatalf("Stats(%s) = %+v before SetPolicies, want {5 2}", name, st)
		}
	}

	// "same" is rebuilt, Equal but not the same pointer; "changed" gets a new limit.
	if err := lim.SetPolicies(fixed("same", 5), fixed("changed", 10), fixed("added", 5)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		stats     sluice.Stats
		remaining int64
	}{
		{"same", sluice.Stats{Allowed: 5, Denied: 2}, 0},
		{"changed", sluice.Stats{}, 5}, // the 5 spent under the old limit are kept
		{"added", sluice.Stats{}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ok := lim.Stats(tt.name)
			if !ok || st != tt.stats {
				t.Errorf("Stats = %+v, %v; want %+v", st, ok, tt.stats)
			}
			if d := mustPeek(t, lim, ctx, tt.name, "k"); d.Remaining != tt.remaining {
				t.Errorf("Peek remaining = %d, want %d", d.Remaining, tt.remaining)
			}
		})
	}
	if _, ok := lim.Stats("removed"); ok {
		t.Errorf("Stats of a removed policy reported ok")
	}
	if _, err := lim.Check(ctx, "removed", "k", 1); !errors.Is(err, sluice.ErrUnknownPolicy) {
		t.Errorf("Check on a removed policy: %v, want ErrUnknownPolicy", err)
	}

	// A failed SetPolicies leaves the set as it was.
	wantInvalid(t, lim.SetPolicies(fixed("x", 1), fixed("x", 2)), "policies")
	wantInvalid(t, lim.SetPolicies(fixed("x", 1), nil), "policies")
	if _, ok := lim.Policy("x"); ok {
		t.Errorf("a rejected SetPolicies installed policy x")
	}
	if st, ok := lim.Stats("same"); !ok || st != (sluice.Stats{Allowed: 5, Denied: 2}) {
		t.Errorf("Stats(same) after a rejected SetPolicies = %+v, %v", st, ok)
	}
	if d := mustCheck(t, lim, ctx, "changed", "k", 5); !d.Allowed {
		t.Errorf("changed policy no longer served after a rejected SetPolicies")
	}
}

func TestStats(t *testing.T) {
	ctx := at(t0)
	small := sluice.MustPolicy("small", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}})
	other := sluice.MustPolicy("other", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}})
	lim := newLimiter(t, small, other)

	for i := 0; i < 5; i++ {
		mustCheck(t, lim, ctx, "small", "a", 1)
	}
	// One decision per key of CheckMany: a, b allowed (fresh), a denied twice.
	if _, err := lim.CheckMany(ctx, "other", []string{"a", "b", "a", "a"}, 1); err != nil {
		t.Fatal(err)
	}
	// Nothing of these counts: bad input, Peek, Forecast, Refund, Reset.
	lim.Check(ctx, "small", "a", 0)
	lim.Check(ctx, "small", "", 1)
	mustPeek(t, lim, ctx, "small", "a")
	lim.Forecast(ctx, "small", "a", 1)
	lim.Refund(ctx, "other", "b", 1)
	lim.Reset(ctx, "other", "b")

	tests := []struct {
		policy string
		want   sluice.Stats
	}{
		{"small", sluice.Stats{Allowed: 3, Denied: 2}},
		{"other", sluice.Stats{Allowed: 3, Denied: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			if got, ok := lim.Stats(tt.policy); !ok || got != tt.want {
				t.Errorf("Stats = %+v, %v; want %+v", got, ok, tt.want)
			}
		})
	}
}

func TestStatsCheckManyAndCheckAll(t *testing.T) {
	ctx := at(t0)
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}})
	q := sluice.MustPolicy("q", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}})
	lim := newLimiter(t, p, q)
	ds, err := lim.CheckMany(ctx, "p", []string{"a", "a", "b"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || ds[1].Allowed || !ds[2].Allowed {
		t.Errorf("CheckMany allowed = %v %v %v, want true false true", ds[0].Allowed, ds[1].Allowed, ds[2].Allowed)
	}
	// Allowed together, then denied together: each item counts under its policy with the outcome
	// of the whole call.
	lim.CheckAll(ctx, sluice.Item{Policy: "q", Key: "x", Cost: 1}, sluice.Item{Policy: "p", Key: "c", Cost: 1})
	lim.CheckAll(ctx, sluice.Item{Policy: "q", Key: "y", Cost: 1}, sluice.Item{Policy: "p", Key: "c", Cost: 1})
	if got := mustPeek(t, lim, ctx, "q", "y"); got.Remaining != 1 {
		t.Errorf("q/y remaining %d after a denied CheckAll, want 1", got.Remaining)
	}
	for _, c := range []struct {
		policy string
		want   sluice.Stats
	}{{"p", sluice.Stats{Allowed: 3, Denied: 2}}, {"q", sluice.Stats{Allowed: 1, Denied: 1}}} {
		if got, _ := lim.Stats(c.policy); got != c.want {
			t.Errorf("Stats(%s) = %+v, want %+v", c.policy, got, c.want)
		}
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	strategies := []struct {
		name     string
		strategy sluice.Strategy
	}{
		{"gcra", sluice.GCRA{Limit: 3, PeriodMs: 60_000, Burst: 3}},
		{"tokenBucket", sluice.TokenBucket{Capacity: 3, RefillPerSec: 1}},
		{"fixedWindow", sluice.FixedWindow{Limit: 3, WindowMs: 60_000}},
		{"slidingWindow", sluice.SlidingWindow{Limit: 3, WindowMs: 60_000, Buckets: 60}},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 3, WindowMs: 60_000}},
	}
	for _, s := range strategies {
		t.Run(s.name, func(t *testing.T) {
			ctx := at(t0)
			store := newStore(t, t0)
			lim, err := sluice.New(store, sluice.MustPolicy("p", sluice.Limit{Strategy: s.strategy}))
			if err != nil {
				t.Fatal(err)
			}
			// A fresh key: full, and peeking does not even create it.
			if d := mustPeek(t, lim, ctx, "p", "k"); !d.Allowed || d.Remaining != 3 || d.Limit != 3 || d.RetryAfterMs != 0 || d.DeniedBy != -1 {
				t.Errorf("Peek of a fresh key = %+v, want allowed, limit 3, remaining 3", d)
			}
			if n := store.Len(); n != 0 {
				t.Errorf("Peek created state: store holds %d keys", n)
			}
			// Two left: a check of cost 3 fails, but Peek (cost 1) says allowed, again and again.
			mustCheck(t, lim, ctx, "p", "k", 1)
			if d := mustCheck(t, lim, ctx, "p", "k", 3); d.Allowed {
				t.Fatalf("cost 3 with 2 left was allowed")
			}
			for i := 0; i < 5; i++ {
				if d := mustPeek(t, lim, ctx, "p", "k"); !d.Allowed || d.Remaining != 2 {
					t.Fatalf("Peek %d = allowed %v remaining %d, want allowed 2", i, d.Allowed, d.Remaining)
				}
			}
			mustCheck(t, lim, ctx, "p", "k", 1)
			wantLastOne(t, lim, ctx, "p", "k")
			d := mustPeek(t, lim, ctx, "p", "k")
			if d.Allowed || d.Remaining != 0 || d.RetryAfterMs < 1 || d.DeniedBy != 0 {
				t.Errorf("Peek of an exhausted key = %+v, want denied, 0 remaining, retry ≥ 1, deniedBy 0", d)
			}
			if st, _ := lim.Stats("p"); st != (sluice.Stats{Allowed: 3, Denied: 2}) {
				t.Errorf("Stats = %+v: Peek must not count", st)
			}
		})
	}
}

func TestPeekComposite(t *testing.T) {
	ctx := at(t0)
	p := sluice.MustPolicy("p",
		sluice.Limit{Name: "requests", Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 60_000}, Unit: sluice.UnitRequest},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}},
	)
	lim := newLimiter(t, p)
	mustCheck(t, lim, ctx, "p", "k", 30)
	d := mustPeek(t, lim, ctx, "p", "k")
	if !d.Allowed || d.Remaining != 1 || d.Limit != 2 || len(d.Parts) != 2 {
		t.Fatalf("Peek = %+v, want allowed, bound by requests (limit 2, remaining 1), 2 parts", d)
	}
	if d.Parts[1].Remaining != 70 || d.Parts[1].Limit != 100 {
		t.Errorf("tokens part = %+v, want limit 100 remaining 70", d.Parts[1])
	}
	mustCheck(t, lim, ctx, "p", "k", 30)
	d = mustPeek(t, lim, ctx, "p", "k")
	if d.Allowed || d.DeniedBy != 0 || d.Parts[1].Remaining != 40 || !d.Parts[1].Allowed {
		t.Errorf("Peek = %+v, want denied by requests with the tokens part allowing 40", d)
	}
}

func TestForecastTokenBucket(t *testing.T) {
	// Capacity 100, 250 a second: 0.25 tokens per ms, exact in float64. At t0 a check of 70 leaves
	// 30 tokens. Tokens at t0+d are min(30 + d/4, 100), so the bucket is full at t0+280.
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 250}})
	tests := []struct {
		name string
		key  string
		now  int64
		cost int64
		want sluice.Forecast
	}{
		// Fresh: 100 tokens, full now.
		{"fresh key", "fresh", t0, 8, sluice.Forecast{SpendableNow: 12, NextReplenishAt: t0, FullAt: t0}},
		{"fresh key cost 100", "fresh", t0, 100, sluice.Forecast{SpendableNow: 1, NextReplenishAt: t0, FullAt: t0}},
		// 30 tokens: 3 checks of 8; the 31st token needs 1/0.25 = 4 ms; 70 tokens need 280 ms.
		{"spent, cost 8", "k", t0, 8, sluice.Forecast{SpendableNow: 3, NextReplenishAt: t0 + 4, FullAt: t0 + 280}},
		{"spent, cost 1", "k", t0, 1, sluice.Forecast{SpendableNow: 30, NextReplenishAt: t0 + 4, FullAt: t0 + 280}},
		{"spent, cost 31", "k", t0, 31, sluice.Forecast{SpendableNow: 0, NextReplenishAt: t0 + 4, FullAt: t0 + 280}},
		// At t0+10: 32.5 tokens; the 33rd needs 0.5/0.25 = 2 ms; full 67.5/0.25 = 270 ms later.
		{"10 ms later, cost 8", "k", t0 + 10, 8, sluice.Forecast{SpendableNow: 4, NextReplenishAt: t0 + 12, FullAt: t0 + 280}},
		{"10 ms later, cost 1", "k", t0 + 10, 1, sluice.Forecast{SpendableNow: 32, NextReplenishAt: t0 + 12, FullAt: t0 + 280}},
		// At t0+279: 99.75 tokens; the next whole token is the last one, at t0+280.
		{"1 ms before full", "k", t0 + 279, 33, sluice.Forecast{SpendableNow: 3, NextReplenishAt: t0 + 280, FullAt: t0 + 280}},
		// Full at t0+280 and after: both instants are now.
		{"full", "k", t0 + 280, 8, sluice.Forecast{SpendableNow: 12, NextReplenishAt: t0 + 280, FullAt: t0 + 280}},
		{"long after", "k", t0 + 60_000, 100, sluice.Forecast{SpendableNow: 1, NextReplenishAt: t0 + 60_000, FullAt: t0 + 60_000}},
	}
	lim := newLimiter(t, p)
	if d := mustCheck(t, lim, at(t0), "p", "k", 70); !d.Allowed || d.Remaining != 30 || d.ResetAt != t0+280 {
		t.Fatalf("setup check = %+v, want allowed, 30 remaining, resetAt t0+280", d)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lim.Forecast(at(tt.now), "p", tt.key, tt.cost)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Forecast = {spendable %d next t0%+d full t0%+d}, want {spendable %d next t0%+d full t0%+d}",
					got.SpendableNow, got.NextReplenishAt-t0, got.FullAt-t0,
					tt.want.SpendableNow, tt.want.NextReplenishAt-t0, tt.want.FullAt-t0)
			}
		})
	}
	// Forecasting consumed nothing, and the forecast of 3 checks of 8 at t0 holds.
	for i := 0; i < 3; i++ {
		if d := mustCheck(t, lim, at(t0), "p", "k", 8); !d.Allowed {
			t.Fatalf("check %d of 8 at t0 denied; forecast said 3 would pass", i)
		}
	}
	if d := mustCheck(t, lim, at(t0), "p", "k", 8); d.Allowed || d.Remaining != 6 {
		t.Errorf("4th check of 8 = %+v, want denied with 6 remaining", d)
	}
	if st, _ := lim.Stats("p"); st != (sluice.Stats{Allowed: 4, Denied: 1}) {
		t.Errorf("Stats = %+v: Forecast must not count", st)
	}
}

func TestForecastComposite(t *testing.T) {
	// Requests: 3 a minute, counted 1 per check. Tokens: capacity 100 at 250/s.
	p := sluice.MustPolicy("p",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}, Unit: sluice.UnitRequest},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 250}},
	)
	lim := newLimiter(t, p)
	mustCheck(t, lim, at(t0), "p", "k", 70) // requests 2 left, tokens 30 left
	tests := []struct {
		name string
		cost int64
		want int64
	}{
		{"tokens bind", 20, 1},         // tokens: 30/20 = 1, requests: 2
		{"requests bind", 1, 2},        // tokens: 30, requests: 2
		{"nothing fits", 31, 0},        // tokens: 0
		{"requests bind at 10", 10, 2}, // tokens: 3, requests: 2
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := lim.Forecast(at(t0), "p", "k", tt.cost)
			if err != nil {
				t.Fatal(err)
			}
			if f.SpendableNow != tt.want {
				t.Errorf("SpendableNow = %d, want %d", f.SpendableNow, tt.want)
			}
			// Latest FullAt: the fixed window's end is after the bucket's t0+280.
			if wantFull := (t0/60_000 + 1) * 60_000; f.FullAt != wantFull {
				t.Errorf("FullAt = %d, want %d (the end of the window)", f.FullAt, wantFull)
			}
		})
	}
}

// refundStrategies hold 10 units each and do not replenish noticeably within a test at t0.
var refundStrategies = []struct {
	name     string
	strategy sluice.Strategy
}{
	{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}},
	{"tokenBucket", sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}},
	{"fixedWindow", sluice.FixedWindow{Limit: 10, WindowMs: 60_000}},
	{"slidingWindow", sluice.SlidingWindow{Limit: 10, WindowMs: 60_000, Buckets: 60}},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 10, WindowMs: 60_000}},
}

func TestRefund(t *testing.T) {
	ctx := at(t0)
	for _, s := range refundStrategies {
		t.Run(s.name, func(t *testing.T) {
			lim := newLimiter(t, sluice.MustPolicy("p", sluice.Limit{Strategy: s.strategy}))
			remaining := func() int64 { t.Helper(); return mustPeek(t, lim, ctx, "p", "k").Remaining }

			if err := lim.Refund(ctx, "p", "k", 5); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != 10 {
				t.Errorf("after refunding a fresh key: remaining %d, want 10", got)
			}
			mustCheck(t, lim, ctx, "p", "k", 6)
			if err := lim.Refund(ctx, "p", "k", 2); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != 6 {
				t.Errorf("6 spent, 2 refunded: remaining %d, want 6", got)
			}
			if err := lim.Refund(ctx, "p", "k", 7); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != 10 {
				t.Errorf("refund past the ceiling: remaining %d, want 10", got)
			}
			// Refund is not capped by MaxCost (docs/semantics.md §5), and still stops at the ceiling.
			if err := lim.Refund(ctx, "p", "k", 1_000_000); err != nil {
				t.Errorf("Refund of a cost above MaxCost: %v", err)
			}
			if d := mustCheck(t, lim, ctx, "p", "k", 10); !d.Allowed {
				t.Errorf("a check of the full ceiling after refunds was denied: %+v", d)
			}
			if d := mustCheck(t, lim, ctx, "p", "k", 1); d.Allowed {
				t.Errorf("refunds let more than the ceiling through")
			}
		})
	}
}

func TestRefundComposite(t *testing.T) {
	ctx := at(t0)
	p := sluice.MustPolicy("p",
		sluice.Limit{Name: "requests", Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}, Unit: sluice.UnitRequest},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}},
	)
	lim := newLimiter(t, p)
	parts := func() (requests, tokens int64) {
		t.Helper()
		d := mustPeek(t, lim, ctx, "p", "k")
		if len(d.Parts) != 2 {
			t.Fatalf("Peek has %d parts, want 2", len(d.Parts))
		}
		return d.Parts[0].Remaining, d.Parts[1].Remaining
	}
	tests := []struct {
		name          string
		check, refund int64
		requests      int64
		tokens        int64
	}{
		{"reserve 40", 40, 0, 4, 60},
		{"settle: 30 unused", 0, 30, 4, 90},
		{"refund past the ceiling", 0, 50, 4, 100},
		{"reserve 100", 100, 0, 3, 0},
		{"refund 1", 0, 1, 3, 1},
	}
	for _, tt := range tests {
		if tt.check > 0 {
			if d := mustCheck(t, lim, ctx, "p", "k", tt.check); !d.Allowed {
				t.Fatalf("%s: check denied: %+v", tt.name, d)
			}
		}
		if tt.refund > 0 {
			if err := lim.Refund(ctx, "p", "k", tt.refund); err != nil {
				t.Fatal(err)
			}
		}
		if r, k := parts(); r != tt.requests || k != tt.tokens {
			t.Errorf("%s: requests %d tokens %d, want %d %d", tt.name, r, k, tt.requests, tt.tokens)
		}
	}
}

func TestReset(t *testing.T) {
	ctx := at(t0)
	composite := sluice.MustPolicy("p",
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 60_000}, Unit: sluice.UnitRequest},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}},
	)
	tests := append(refundStrategies[:len(refundStrategies):len(refundStrategies)], struct {
		name     string
		strategy sluice.Strategy
	}{"composite", nil})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := composite
			if tt.strategy != nil {
				p = sluice.MustPolicy("p", sluice.Limit{Strategy: tt.strategy})
			}
			store := newStore(t, t0)
			lim, err := sluice.New(store, p)
			if err != nil {
				t.Fatal(err)
			}
			for mustCheck(t, lim, ctx, "p", "k", 1).Allowed {
			}
			mustCheck(t, lim, ctx, "p", "other", 1)
			if d := mustPeek(t, lim, ctx, "p", "k"); d.Allowed {
				t.Fatalf("exhausted key peeks allowed")
			}
			if err := lim.Reset(ctx, "p", "k"); err != nil {
				t.Fatal(err)
			}
			if err := lim.Reset(ctx, "p", "never-seen"); err != nil {
				t.Errorf("Reset of an unknown key: %v", err)
			}
			fresh := mustPeek(t, lim, ctx, "p", "k")
			if !fresh.Allowed || fresh.Remaining != fresh.Limit {
				t.Errorf("after Reset: Peek = %+v, want a full budget", fresh)
			}
			if d := mustCheck(t, lim, ctx, "p", "k", p.MaxCost()); !d.Allowed {
				t.Errorf("after Reset a check of the full ceiling was denied: %+v", d)
			}
			// The other key kept its state.
			if d := mustPeek(t, lim, ctx, "p", "other"); d.Remaining == d.Limit {
				t.Errorf("Reset of k also reset other")
			}
		})
	}
}

func TestCheckManyDecidesAtOneInstant(t *testing.T) {
	// A clock that moves 1 s on every read: decisions at one instant share their ResetAt.
	var clock atomic.Int64
	clock.Store(t0)
	store := memory.New(memory.Config{Now: func() int64 { return clock.Add(1000) }, SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}})
	lim, err := sluice.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// One by one, each check sees a later instant.
	d1 := mustCheck(t, lim, ctx, "p", "x", 4)
	d2 := mustCheck(t, lim, ctx, "p", "y", 4)
	if d1.ResetAt == d2.ResetAt {
		t.Fatalf("the test clock does not move: ResetAt %d twice", d1.ResetAt)
	}

	ds, err := lim.CheckMany(ctx, "p", []string{"a", "b", "a", "c", "a", "b"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		allowed   bool
		remaining int64
	}{{true, 6}, {true, 6}, {true, 2}, {true, 6}, {false, 2}, {true, 2}}
	for i, d := range ds {
		if d.Allowed != want[i].allowed || d.Remaining != want[i].remaining {
			t.Errorf("decision %d: allowed %v remaining %d, want %v %d (no refill between keys)", i, d.Allowed, d.Remaining, want[i].allowed, want[i].remaining)
		}
	}
	// Fresh keys a, b, c spent 4 at one instant: one ResetAt for all three.
	if ds[0].ResetAt != ds[1].ResetAt || ds[0].ResetAt != ds[3].ResetAt {
		t.Errorf("ResetAt %d, %d, %d: the keys were not decided at one instant", ds[0].ResetAt, ds[1].ResetAt, ds[3].ResetAt)
	}
	if len(ds) != 6 {
		t.Errorf("%d decisions for 6 keys", len(ds))
	}
	empty, err := lim.CheckMany(ctx, "p", nil, 1)
	if err != nil || len(empty) != 0 {
		t.Errorf("CheckMany with no keys = %v, %v; want no decisions", empty, err)
	}
}

func TestWithNow(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		want int64
	}{
		{"set", sluice.WithNow(context.Background(), t0), t0},
		{"not set", context.Background(), 0},
		{"zero", sluice.WithNow(context.Background(), 0), 0},
		{"negative is ignored", sluice.WithNow(context.Background(), -5), 0},
		{"innermost wins", sluice.WithNow(sluice.WithNow(context.Background(), 1), 2), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sluice.NowFrom(tt.ctx); got != tt.want {
				t.Errorf("NowFrom = %d, want %d", got, tt.want)
			}
		})
	}

	// A negative instant falls back to the store's clock: the fixed window of t0, not of -5.
	lim := newLimiter(t, sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}}))
	d := mustCheck(t, lim, sluice.WithNow(context.Background(), -5), "p", "k", 1)
	if want := t0 - t0%1000 + 1000; d.ResetAt != want {
		t.Errorf("ResetAt = %d, want %d (decided at the store's clock)", d.ResetAt, want)
	}
	// WithNow overrides the store's clock: a later window admits again.
	if d := mustCheck(t, lim, at(t0+1000), "p", "k", 1); !d.Allowed {
		t.Errorf("check in the next window denied: %+v", d)
	}
}

// Every policy NewPolicy accepts must decide sanely: the ceiling is enforced, a denial carries a
// retry of at least 1 ms, and no instant lies before now. A parameter whose derived values cannot
// be computed must instead be rejected, naming the field.
func TestExtremeParametersDecideSanely(t *testing.T) {
	tests := []struct {
		name     string
		strategy sluice.Strategy
		field    string // the field a rejection names
	}{
		{"gcra smallest positive limit", sluice.GCRA{Limit: 5e-324, PeriodMs: 1000, Burst: 1}, "limits[0].limit"},
		{"gcra tiny limit", sluice.GCRA{Limit: 1e-300, PeriodMs: 1000, Burst: 2}, "limits[0].limit"},
		{"gcra largest everything", sluice.GCRA{Limit: 1 << 53, PeriodMs: 1 << 53, Burst: 1 << 53}, "limits[0].limit"},
		{"gcra fastest", sluice.GCRA{Limit: 1 << 53, PeriodMs: 1, Burst: 1 << 53}, "limits[0].limit"},
		{"tokenBucket huge capacity, tiny refill", sluice.TokenBucket{Capacity: 1 << 53, RefillPerSec: 1e-9}, "limits[0].refillPerSec"},
		{"tokenBucket tiny refill", sluice.TokenBucket{Capacity: 10, RefillPerSec: 1e-9}, "limits[0].refillPerSec"},
		{"fixedWindow largest", sluice.FixedWindow{Limit: 1 << 53, WindowMs: 1 << 53}, "limits[0].windowMs"},
		{"slidingWindow largest", sluice.SlidingWindow{Limit: 1 << 53, WindowMs: 1 << 53, Buckets: 4096}, "limits[0].windowMs"},
		{"slidingWindowLog largest", sluice.SlidingWindowLog{Limit: 1 << 53, WindowMs: 1 << 53}, "limits[0].windowMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPolicySafely(t, "p", sluice.Limit{Strategy: tt.strategy})
			if err != nil {
				wantInvalid(t, err, tt.field) // rejecting is fine, if it names the field
				return
			}
			lim := newLimiter(t, p)
			ctx := at(t0)
			first := mustCheck(t, lim, ctx, "p", "k", p.MaxCost())
			if !first.Allowed {
				t.Fatalf("a check of the full ceiling on a fresh key was denied: %+v", first)
			}
			if first.ResetAt < t0 {
				t.Errorf("allowed check: ResetAt %d is before now %d", first.ResetAt, t0)
			}
			second := mustCheck(t, lim, ctx, "p", "k", p.MaxCost())
			if second.Allowed {
				t.Errorf("a second check of the full ceiling at the same instant was allowed: the limit is not enforced (%+v)", second)
			}
			if !second.Allowed && second.RetryAfterMs < 1 {
				t.Errorf("denied check: RetryAfterMs %d, want at least 1", second.RetryAfterMs)
			}
			if second.ResetAt < t0 {
				t.Errorf("denied check: ResetAt %d is before now %d", second.ResetAt, t0)
			}
			f, err := lim.Forecast(ctx, "p", "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if f.NextReplenishAt < t0 || f.FullAt < t0 {
				t.Errorf("Forecast %+v has an instant before now %d", f, t0)
			}
		})
	}
}
