package nearcache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/nearcache"
)

// t0 is a whole second, so fixed windows of a second start at it.
const t0 = 1_700_000_000_000

var ctx = context.Background()

// counting is the inner store of the tests: a memory store that counts the calls reaching it.
type counting struct {
	sluice.Store
	checks, manyKeys, alls atomic.Int64 // Check calls, keys sent to CheckMany, CheckAll calls
}

func (c *counting) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, now, p, key, cost)
}

func (c *counting) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	c.manyKeys.Add(int64(len(keys)))
	return c.Store.CheckMany(ctx, now, p, keys, cost, out)
}

func (c *counting) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	c.alls.Add(1)
	return c.Store.CheckAll(ctx, now, ps, items, out)
}

func newMemory(t testing.TB, cfg memory.Config) *memory.Store {
	t.Helper()
	cfg.SweepInterval = -1
	m := memory.New(cfg)
	t.Cleanup(func() { m.Close() })
	return m
}

// newStores returns a near cache over a counting memory store.
func newStores(t testing.TB, cfg nearcache.Config) (*nearcache.Store, *counting) {
	t.Helper()
	inner := &counting{Store: newMemory(t, memory.Config{})}
	return nearcache.New(inner, cfg), inner
}

func fixed(limit, windowMs float64) *sluice.Policy {
	return sluice.MustPolicy("fixed", sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: windowMs}})
}

// check checks at an explicit instant, failing the test on an error.
func check(t *testing.T, s sluice.Store, at int64, p *sluice.Policy, key string, cost int64) sluice.Decision {
	t.Helper()
	d, err := s.Check(ctx, at, p, key, cost)
	if err != nil {
		t.Fatalf("Check(%d, %s, %q, %d): %v", at, p.Name(), key, cost, err)
	}
	return d
}

// deny checks key at t0 until the store denies it, and returns the denial.
func deny(t *testing.T, s sluice.Store, p *sluice.Policy, key string, cost int64) sluice.Decision {
	t.Helper()
	for range 100 {
		if d := check(t, s, t0, p, key, cost); !d.Allowed {
			return d
		}
	}
	t.Fatalf("%s never denied %q", p.Name(), key)
	return sluice.Decision{}
}

// TestDenialAnsweredUntilItEnds: a denial with retryAfterMs T at t0 is answered locally at every
// instant up to t0+T-2, with the retry counting down, and the store is asked again from t0+T-1 (the
// entry ends 1 ms early for the rounding of the store's retry).
func TestDenialAnsweredUntilItEnds(t *testing.T) {
	tests := []struct {
		name  string
		limit []sluice.Limit
	}{
		{"gcra", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 2}}}},
		{"tokenBucket", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 2}}}},
		{"fixedWindow", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}}}},
		{"slidingWindowLog", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: 2, WindowMs: 800}}}},
		{"composite", []sluice.Limit{
			{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}},
			{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 4, RefillPerSec: 1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near, inner := newStores(t, nearcache.Config{})
			p := sluice.MustPolicy(tt.name, tt.limit...)
			first := deny(t, near, p, "k", 1)
			until := t0 + first.RetryAfterMs
			asked := inner.checks.Load()
			for _, at := range []int64{t0, t0 + 1, (t0 + until) / 2, until - 2} {
				d := check(t, near, at, p, "k", 1)
				want := first
				want.RetryAfterMs = until - at
				want.Parts = nil
				got := d
				got.Parts = nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("at t0+%d: %+v, want the remembered denial %+v", at-t0, got, want)
				}
				if len(d.Parts) != len(first.Parts) {
					t.Errorf("at t0+%d: %d parts, want %d", at-t0, len(d.Parts), len(first.Parts))
				}
				if d.Parts != nil && d.Parts[d.DeniedBy].RetryAfterMs != d.RetryAfterMs {
					t.Errorf("at t0+%d: the denying part waits %d, the decision %d", at-t0, d.Parts[d.DeniedBy].RetryAfterMs, d.RetryAfterMs)
				}
				if n := inner.checks.Load(); n != asked {
					t.Fatalf("at t0+%d the store was asked", at-t0)
				}
			}
			if got := near.Answered(); got != 4 {
				t.Errorf("Answered = %d, want 4", got)
			}
			d := check(t, near, until-1, p, "k", 1)
			if inner.checks.Load() != asked+1 {
				t.Errorf("at until-1: %+v, the store not asked", d)
			}
			if !d.Allowed { // a denial here is remembered for 1 ms at most
				if d := check(t, near, until, p, "k", 1); inner.checks.Load() != asked+2 || !d.Allowed {
					t.Errorf("at until: %+v, store asked %d times; want the store to allow", d, inner.checks.Load()-asked)
				}
			}
		})
	}
}

// TestCosts: a denial for a cost answers checks of that cost or more; a smaller cost might pass,
// so it asks the store, and the store allowing it drops the entry.
func TestCosts(t *testing.T) {
	near, inner := newStores(t, nearcache.Config{})
	p := sluice.MustPolicy("bucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}})
	check(t, near, t0, p, "k", 8) // 2 tokens left
	steps := []struct {
		at, cost  int64
		allowed   bool
		fromStore bool
	}{
		{t0, 5, false, true},      // remembered for cost 5
		{t0 + 1, 5, false, false}, // the same cost
		{t0 + 2, 10, false, false},
		{t0 + 3, 4, false, true}, // smaller: asked, denied, now remembered for cost 4
		{t0 + 4, 4, false, false},
		{t0 + 5, 2, true, true}, // smaller still, and allowed: the entry is gone
		{t0 + 6, 10, false, true},
	}
	for i, st := range steps {
		before := inner.checks.Load()
		d := check(t, near, st.at, p, "k", st.cost)
		if d.Allowed != st.allowed || (inner.checks.Load() > before) != st.fromStore {
			t.Errorf("step %d (cost %d at t0+%d): allowed %v, store asked %v; want %v, %v",
				i, st.cost, st.at-t0, d.Allowed, inner.checks.Load() > before, st.allowed, st.fromStore)
		}
	}
}

// TestInvalidation: a Refund or a Reset drops the key's entry, under the same policy or one Equal
// to it; other keys keep theirs.
func TestInvalidation(t *testing.T) {
	tests := []struct {
		name string
		do   func(s sluice.Store, p *sluice.Policy) error
	}{
		{"refund", func(s sluice.Store, p *sluice.Policy) error { return s.Refund(ctx, t0+2, p, "k", 1) }},
		{"reset", func(s sluice.Store, p *sluice.Policy) error { return s.Reset(ctx, p, "k") }},
		{"refund through an Equal policy", func(s sluice.Store, _ *sluice.Policy) error {
			return s.Refund(ctx, t0+2, fixed(1, 1000), "k", 1)
		}},
		{"reset through an Equal policy", func(s sluice.Store, _ *sluice.Policy) error {
			return s.Reset(ctx, fixed(1, 1000), "k")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near, inner := newStores(t, nearcache.Config{})
			p := fixed(1, 1000)
			deny(t, near, p, "k", 1)
			deny(t, near, p, "other", 1)
			if d := check(t, near, t0+1, p, "k", 1); d.Allowed || near.Answered() != 1 {
				t.Fatalf("before: %+v, answered %d; want a local denial", d, near.Answered())
			}
			if err := tt.do(near, p); err != nil {
				t.Fatal(err)
			}
			asked := inner.checks.Load()
			if d := check(t, near, t0+3, p, "k", 1); !d.Allowed || inner.checks.Load() != asked+1 {
				t.Errorf("after: %+v, store asked %d; want the store to allow", d, inner.checks.Load()-asked)
			}
			if d := check(t, near, t0+3, p, "other", 1); d.Allowed || near.Answered() != 2 {
				t.Errorf("another key: %+v, answered %d; want its local denial", d, near.Answered())
			}
		})
	}
}

// TestRedefinedPolicy: a policy redefined under the same name does not reuse the old policy's
// denials; a distinct policy Equal to it does.
func TestRedefinedPolicy(t *testing.T) {
	tests := []struct {
		name      string
		policy    *sluice.Policy
		fromStore bool
		allowed   bool
	}{
		{"the same policy", nil, false, false},
		{"an Equal policy", fixed(1, 1000), false, false},
		{"a higher limit", fixed(5, 1000), true, true},
		// The store keeps the spent unit: the 2 s window starts where the 1 s one did.
		{"another window", fixed(1, 2000), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near, inner := newStores(t, nearcache.Config{})
			p := fixed(1, 1000)
			deny(t, near, p, "k", 1)
			q := tt.policy
			if q == nil {
				q = p
			}
			asked := inner.checks.Load()
			d := check(t, near, t0+1, q, "k", 1)
			if (inner.checks.Load() > asked) != tt.fromStore || d.Allowed != tt.allowed {
				t.Errorf("%+v, store asked %v; want allowed %v, asked %v", d, inner.checks.Load() > asked, tt.allowed, tt.fromStore)
			}
		})
	}
}

// TestPolicies: only the selected policies are cached, and the selection is asked on every call.
func TestPolicies(t *testing.T) {
	var on atomic.Bool
	near, inner := newStores(t, nearcache.Config{Policies: func(name string) bool { return name == "fixed" && on.Load() }})
	p := fixed(1, 1000)
	other := sluice.MustPolicy("other", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})
	for _, q := range []*sluice.Policy{p, other} {
		deny(t, near, q, "k", 1)
		for at := int64(t0 + 1); at < t0+10; at++ {
			check(t, near, at, q, "k", 1)
		}
		many := make([]sluice.Decision, 2)
		if err := near.CheckMany(ctx, t0+10, q, []string{"k", "k"}, 1, many); err != nil {
			t.Fatal(err)
		}
	}
	if near.Len() != 0 || near.Answered() != 0 || inner.checks.Load() != 2*11 || inner.manyKeys.Load() != 4 {
		t.Errorf("not selected: %d entries, %d answered, %d checks, %d keys of CheckMany; want nothing cached",
			near.Len(), near.Answered(), inner.checks.Load(), inner.manyKeys.Load())
	}
	on.Store(true)
	deny(t, near, p, "k", 1)
	check(t, near, t0+11, p, "k", 1)
	check(t, near, t0+11, other, "k", 1)
	if near.Answered() != 1 || near.Len() != 1 {
		t.Errorf("selected: %d answered, %d entries; want the one selected policy cached", near.Answered(), near.Len())
	}
}

// TestCheckMany: the keys with a remembered denial are answered locally and only the others go to
// the store, in one call; out keeps the keys' order.
func TestCheckMany(t *testing.T) {
	near, inner := newStores(t, nearcache.Config{})
	p := fixed(1, 1000)
	for _, k := range []string{"a", "b"} {
		deny(t, near, p, k, 1)
	}
	keys := []string{"a", "x", "b", "y", "x"}
	out := make([]sluice.Decision, len(keys))
	if err := near.CheckMany(ctx, t0+1, p, keys, 1, out); err != nil {
		t.Fatal(err)
	}
	want := []bool{false, true, false, true, false} // the second x is the store's: x spent its 1
	for i, d := range out {
		if d.Allowed != want[i] {
			t.Errorf("out[%d] (%s) allowed %v, want %v", i, keys[i], d.Allowed, want[i])
		}
	}
	if inner.manyKeys.Load() != 3 || near.Answered() != 2 {
		t.Errorf("the store got %d keys and %d were answered locally; want 3 and 2", inner.manyKeys.Load(), near.Answered())
	}
	// x's denial was remembered: all five are local now.
	if err := near.CheckMany(ctx, t0+2, p, []string{"x", "a", "b"}, 1, out[:3]); err != nil {
		t.Fatal(err)
	}
	if inner.manyKeys.Load() != 3 || near.Answered() != 5 {
		t.Errorf("the store got %d keys, %d answered locally; want 3 and 5", inner.manyKeys.Load(), near.Answered())
	}
}

// TestCheckAll: an op with a remembered denial denies the whole CheckAll without the store; other
// CheckAlls go to the store, and teach the cache the denials that are the key's alone.
func TestCheckAll(t *testing.T) {
	near, inner := newStores(t, nearcache.Config{})
	p := fixed(1, 1000)
	q := sluice.MustPolicy("other", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 1000}})
	deny(t, near, p, "a", 1)

	out := make([]sluice.Decision, 2)
	ops := []storetest.Op{{Policy: q, Key: "z", Cost: 1}, {Policy: p, Key: "a", Cost: 1}}
	if err := storetest.CheckAll(ctx, near, t0+1, ops, out); err != nil {
		t.Fatal(err)
	}
	if d := sluice.Combine(out); d.Allowed || d.DeniedBy != 1 || d.RetryAfterMs != 999 || inner.alls.Load() != 0 {
		t.Errorf("CheckAll with a remembered denial: %+v, %d calls to the store; want denied by op 1 locally", d, inner.alls.Load())
	}
	if want := (sluice.Decision{Allowed: true, DeniedBy: -1}); !reflect.DeepEqual(out[0], want) {
		t.Errorf("the unknown op: %+v, want %+v", out[0], want)
	}
	if d, _ := near.Peek(ctx, t0+1, q, "z"); d.Remaining != 3 {
		t.Errorf("z has %d left; want 3, nothing consumed", d.Remaining)
	}

	// b spent its 1 by the first op: the second op's denial is not b's alone, so it is not kept.
	ops = []storetest.Op{{Policy: p, Key: "b", Cost: 1}, {Policy: p, Key: "b", Cost: 1}}
	if err := storetest.CheckAll(ctx, near, t0+1, ops, out); err != nil {
		t.Fatal(err)
	}
	if d := check(t, near, t0+2, p, "b", 1); !d.Allowed || inner.alls.Load() != 1 {
		t.Errorf("b after a CheckAll denied by its own repeat: %+v; want the store to allow", d)
	}
	// c is denied alone: remembered.
	deny(t, near, p, "c", 1)
	near.Reset(ctx, p, "c")
	ops = []storetest.Op{{Policy: q, Key: "c", Cost: 1}, {Policy: p, Key: "c", Cost: 1}}
	check(t, near, t0+2, p, "c", 1)
	if err := storetest.CheckAll(ctx, near, t0+3, ops, out); err != nil {
		t.Fatal(err)
	}
	answered := near.Answered()
	if d := check(t, near, t0+4, p, "c", 1); d.Allowed || near.Answered() != answered+1 {
		t.Errorf("c after a CheckAll it denied: %+v; want a local denial", d)
	}
}

// TestParts: a composite policy's local answer carries its own copy of the parts, each denied
// part's retry counting down.
func TestParts(t *testing.T) {
	near, _ := newStores(t, nearcache.Config{})
	p := sluice.MustPolicy("both",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 500}})
	first := deny(t, near, p, "k", 1)
	if len(first.Parts) != 2 || first.Parts[0].Allowed || first.Parts[1].Allowed {
		t.Fatalf("denial %+v; want both parts denied", first)
	}
	first.Parts[0].Remaining = 99 // the caller's copy
	d := check(t, near, t0+100, p, "k", 1)
	if d.Parts[0].Remaining != 0 || d.Parts[0].RetryAfterMs != 900 || d.Parts[1].RetryAfterMs != 400 || d.RetryAfterMs != 900 {
		t.Errorf("local answer %+v; want retries 900 and 400, untouched by the caller", d)
	}
	d.Parts[1].Remaining = 77
	if d := check(t, near, t0+450, p, "k", 1); d.Parts[1].Remaining != 0 || d.Parts[1].RetryAfterMs != 50 {
		t.Errorf("second local answer %+v; want its own parts", d)
	}
	if d := check(t, near, t0+700, p, "k", 1); d.Parts[1].RetryAfterMs != 1 || d.RetryAfterMs != 300 {
		t.Errorf("past the shorter part's retry: %+v; want it at 1 ms, the decision at 300", d)
	}
}

// TestOwnClock: with now = 0 the entry runs on Config.Now; an offset between that clock and the
// store's cancels out.
func TestOwnClock(t *testing.T) {
	var local atomic.Int64
	local.Store(t0 + 250)
	const offset = 5_000 // the store's clock is ahead
	inner := &counting{Store: newMemory(t, memory.Config{Now: func() int64 { return local.Load() + offset }})}
	near := nearcache.New(inner, nearcache.Config{Now: local.Load})
	p := fixed(1, 1000)
	check(t, near, 0, p, "k", 1)
	first := check(t, near, 0, p, "k", 1) // denied by the store at t0+5250: retry 750
	if first.Allowed || first.RetryAfterMs != 750 {
		t.Fatalf("denial %+v; want retry 750", first)
	}
	local.Store(t0 + 998)
	if d := check(t, near, 0, p, "k", 1); d.Allowed || d.RetryAfterMs != 2 || inner.checks.Load() != 2 {
		t.Errorf("at the entry's last instant: %+v; want a local denial with retry 2", d)
	}
	local.Store(t0 + 999)
	if d := check(t, near, 0, p, "k", 1); d.Allowed || d.RetryAfterMs != 1 || inner.checks.Load() != 3 {
		t.Errorf("at its end: %+v; want the store's denial with retry 1", d)
	}
	local.Store(t0 + 1000)
	if d := check(t, near, 0, p, "k", 1); !d.Allowed || inner.checks.Load() != 4 {
		t.Errorf("then: %+v; want the store to allow (its window ended too)", d)
	}
}

// TestMaxKeys: the entries never pass MaxKeys; ended entries make room before live ones.
func TestMaxKeys(t *testing.T) {
	tests := []struct{ maxKeys, keys int }{{1, 10}, {20, 500}, {100, 1000}, {5000, 20000}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxKeys), func(t *testing.T) {
			near, _ := newStores(t, nearcache.Config{MaxKeys: tt.maxKeys})
			p := fixed(1, 60_000)
			for i := range tt.keys {
				deny(t, near, p, fmt.Sprint("k", i), 1)
				if n := near.Len(); n > tt.maxKeys {
					t.Fatalf("%d entries after %d denials; MaxKeys is %d", n, i+1, tt.maxKeys)
				}
			}
			if near.Len() < tt.maxKeys/2 {
				t.Errorf("%d entries of %d", near.Len(), tt.maxKeys)
			}
		})
	}
	t.Run("ended first", func(t *testing.T) {
		near, inner := newStores(t, nearcache.Config{MaxKeys: 20}) // one shard of 20
		short, long := fixed(1, 1000), sluice.MustPolicy("long", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}})
		for i := range 10 {
			deny(t, near, short, fmt.Sprint("s", i), 1) // ends at t0+1000
			deny(t, near, long, fmt.Sprint("l", i), 1)  // ends at t0+60000
		}
		check(t, near, t0+2000, long, "new", 1)
		if d := check(t, near, t0+2000, long, "new", 1); d.Allowed {
			t.Fatal("new key not denied")
		}
		if near.Len() != 11 {
			t.Errorf("%d entries; want the 10 ended ones dropped for the new one", near.Len())
		}
		asked := inner.checks.Load()
		for i := range 10 {
			check(t, near, t0+2001, long, fmt.Sprint("l", i), 1)
		}
		if inner.checks.Load() != asked {
			t.Error("a live entry was dropped while ended ones were there")
		}
	})
}

// TestNeverAdmitsWhatTheStoreDenies drives a near cache over one memory store and, with the same
// calls at the same instants, a second memory store alone. The near cache may only answer denials
// the store alone also gives: every decision's Allowed matches, so both stores keep the same state.
func TestNeverAdmitsWhatTheStoreDenies(t *testing.T) {
	policies := []*sluice.Policy{
		sluice.MustPolicy("gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 3}}),
		sluice.MustPolicy("gcra-frac", sluice.Limit{Strategy: sluice.GCRA{Limit: 0.7, PeriodMs: 333.3, Burst: 2.5}}),
		sluice.MustPolicy("bucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 2.5}}),
		sluice.MustPolicy("bucket-frac", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3.7, RefillPerSec: 7.3}}),
		sluice.MustPolicy("fixed", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 4, WindowMs: 700}}),
		sluice.MustPolicy("fixed-frac", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2.5, WindowMs: 123.4}}),
		sluice.MustPolicy("sliding", sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 4, WindowMs: 1000, Buckets: 4}}),
		sluice.MustPolicy("log", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 900}}),
		sluice.MustPolicy("composite",
			sluice.Limit{Unit: sluice.UnitRequest, Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 1000}},
			sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 6, RefillPerSec: 3}}),
	}
	keys := []string{"a", "b", "c"}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			near := nearcache.New(newMemory(t, memory.Config{}), nearcache.Config{MaxKeys: 8 + int(seed)})
			alone := newMemory(t, memory.Config{})
			at := int64(t0)
			var last storetest.Op // half the picks hammer the last key, as an abusive client does
			pick := func() (*sluice.Policy, string, int64) {
				if last.Policy != nil && rng.IntN(2) == 0 {
					return last.Policy, last.Key, last.Cost + rng.Int64N(last.Policy.MaxCost()-last.Cost+1)
				}
				p := policies[rng.IntN(len(policies))]
				last = storetest.Op{Policy: p, Key: keys[rng.IntN(len(keys))], Cost: 1 + rng.Int64N(p.MaxCost())}
				return last.Policy, last.Key, last.Cost
			}
			for step := range 4000 {
				if rng.IntN(4) == 0 {
					at += rng.Int64N(400)
				} else {
					at += rng.Int64N(3)
				}
				where := fmt.Sprintf("step %d at t0+%d", step, at-t0)
				switch op := rng.IntN(20); {
				case op < 12:
					p, k, cost := pick()
					answered := near.Answered()
					got, err1 := near.Check(ctx, at, p, k, cost)
					want, err2 := alone.Check(ctx, at, p, k, cost)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					local := near.Answered() > answered
					switch {
					case got.Allowed != want.Allowed:
						t.Fatalf("%s: Check(%s, %s, %d) allowed %v (local %v), the store alone %v: %+v",
							where, p.Name(), k, cost, got.Allowed, local, want.Allowed, want)
					case local && (got.RetryAfterMs < 2 || got.RetryAfterMs > want.RetryAfterMs+1):
						t.Fatalf("%s: Check(%s, %s, %d): local retry %d, the store's %d", where, p.Name(), k, cost, got.RetryAfterMs, want.RetryAfterMs)
					case !local && !reflect.DeepEqual(got, want):
						t.Fatalf("%s: the store behind the cache decided %+v, the store alone %+v", where, got, want)
					}
				case op < 14:
					p, _, cost := pick()
					ks := []string{keys[rng.IntN(3)], keys[rng.IntN(3)], keys[rng.IntN(3)]}
					got, want := make([]sluice.Decision, 3), make([]sluice.Decision, 3)
					if err := near.CheckMany(ctx, at, p, ks, cost, got); err != nil {
						t.Fatal(err)
					}
					if err := alone.CheckMany(ctx, at, p, ks, cost, want); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if got[i].Allowed != want[i].Allowed {
							t.Fatalf("%s: CheckMany(%s, %q, %d)[%d] allowed %v, the store alone %v", where, p.Name(), ks, cost, i, got[i].Allowed, want[i].Allowed)
						}
					}
				case op < 16:
					ops := make([]storetest.Op, 1+rng.IntN(3))
					for i := range ops {
						p, k, cost := pick()
						ops[i] = storetest.Op{Policy: p, Key: k, Cost: cost}
					}
					got, want := make([]sluice.Decision, len(ops)), make([]sluice.Decision, len(ops))
					if err := storetest.CheckAll(ctx, near, at, ops, got); err != nil {
						t.Fatal(err)
					}
					if err := storetest.CheckAll(ctx, alone, at, ops, want); err != nil {
						t.Fatal(err)
					}
					if sluice.Combine(got).Allowed != sluice.Combine(want).Allowed {
						t.Fatalf("%s: CheckAll(%+v) allowed %v, the store alone %v", where, ops, sluice.Combine(got).Allowed, sluice.Combine(want).Allowed)
					}
					for i := range got {
						if !got[i].Allowed && want[i].Allowed {
							t.Fatalf("%s: CheckAll op %d denied, the store alone allowed it", where, i)
						}
					}
				case op < 18:
					p, k, _ := pick()
					got, _ := near.Peek(ctx, at, p, k)
					want, _ := alone.Peek(ctx, at, p, k)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: Peek(%s, %s) %+v, the store alone %+v", where, p.Name(), k, got, want)
					}
				case op < 19:
					p, k, cost := pick()
					near.Refund(ctx, at, p, k, cost)
					alone.Refund(ctx, at, p, k, cost)
				default:
					p, k, _ := pick()
					near.Reset(ctx, p, k)
					alone.Reset(ctx, p, k)
				}
			}
			if near.Answered() == 0 {
				t.Error("the cache answered nothing: the test proves nothing")
			}
			t.Logf("%d answered locally", near.Answered())
		})
	}
}

// TestConcurrent runs checks, refunds and resets of a few keys from many goroutines, for the race
// detector, and checks that the count of local answers adds up.
func TestConcurrent(t *testing.T) {
	var local atomic.Uint64
	near, inner := newStores(t, nearcache.Config{MaxKeys: 16, OnLocal: func(string) { local.Add(1) }})
	p := fixed(2, 50)
	var wg sync.WaitGroup
	var denied atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			out := make([]sluice.Decision, 2)
			for i := range 2000 {
				at := int64(t0 + i/4)
				k := fmt.Sprint(rng.IntN(20))
				switch rng.IntN(10) {
				case 0:
					near.Refund(ctx, at, p, k, 1)
				case 1:
					near.Reset(ctx, p, k)
				case 2:
					near.CheckMany(ctx, at, p, []string{k, "hot"}, 1, out)
				case 3:
					storetest.CheckAll(ctx, near, at, []storetest.Op{{Policy: p, Key: k, Cost: 1}, {Policy: p, Key: "hot", Cost: 1}}, out)
				default:
					if d, _ := near.Check(ctx, at, p, "hot", 1); !d.Allowed {
						denied.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if near.Answered() != local.Load() || near.Answered() == 0 || near.Len() > 16 {
		t.Errorf("Answered %d, OnLocal %d, %d entries; want equal counts above 0, at most 16 entries",
			near.Answered(), local.Load(), near.Len())
	}
	t.Logf("%d denials of the hot key, %d answered locally, %d checks reached the store", denied.Load(), near.Answered(), inner.checks.Load())
}

// BenchmarkLocalHit measures a check answered from the cache, from every core.
func BenchmarkLocalHit(b *testing.B) {
	for _, n := range []int{1, 1024} {
		b.Run(fmt.Sprint(n, " keys"), func(b *testing.B) {
			near := nearcache.New(newMemory(b, memory.Config{}), nearcache.Config{})
			p := fixed(1, 60_000)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprint("key-", i)
				near.Check(ctx, t0, p, keys[i], 1)
				if d, _ := near.Check(ctx, t0, p, keys[i], 1); d.Allowed {
					b.Fatal("not denied")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(n)
				for pb.Next() {
					if d, _ := near.Check(ctx, t0+1, p, keys[i%n], 1); d.Allowed {
						b.Fatal("allowed")
					}
					i++
				}
			})
			b.StopTimer()
			if near.Answered() < uint64(b.N) {
				b.Fatalf("%d answered of %d", near.Answered(), b.N)
			}
		})
	}
}
