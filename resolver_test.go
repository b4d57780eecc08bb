package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// keyPolicies is a Resolver of fixed per-key policies: (policy, key) → the policy that applies. It
// records the instants it was asked at.
type keyPolicies struct {
	byKey map[[2]string]*sluice.Policy
	asked []int64
}

func (r *keyPolicies) Resolve(policy, key string, now int64) *sluice.Policy {
	r.asked = append(r.asked, now)
	return r.byKey[[2]string{policy, key}]
}

// callCounter is a Store that counts the store calls it passes on, by method.
type callCounter struct {
	sluice.Store
	checkMany []int // the number of keys of each CheckMany
}

func (c *callCounter) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	c.checkMany = append(c.checkMany, len(keys))
	return c.Store.CheckMany(ctx, now, p, keys, cost, out)
}

// plans returns the policy "api" as its plans free (fixed window of 10, the default) and pro (of
// 100), and limits of a key's own: a fixed window of 3 beside a token bucket of 1000.
func plans(t *testing.T) (free, pro, own *sluice.Policy) {
	t.Helper()
	window := func(n float64) sluice.Limit {
		return sluice.Limit{Strategy: sluice.FixedWindow{Limit: n, WindowMs: 60_000}}
	}
	free = sluice.MustPolicy("api", window(10)).WithPlan("free")
	pro = sluice.MustPolicy("api", window(100)).WithPlan("pro")
	own = sluice.MustPolicy("api", window(3), sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1}})
	return free, pro, own
}

func TestResolverCheck(t *testing.T) {
	free, pro, own := plans(t)
	r := &keyPolicies{byKey: map[[2]string]*sluice.Policy{{"api", "acme"}: pro, {"api", "scraper"}: own}}
	tests := []struct {
		name      string
		key       string
		cost      int64
		wantLimit int64
		wantPlan  string
		wantOver  bool
		wantParts int
		wantField string // an *InvalidError naming this field
	}{
		{name: "no override: the default plan", key: "other", cost: 1, wantLimit: 10, wantPlan: "free"},
		{name: "a plan override", key: "acme", cost: 1, wantLimit: 100, wantPlan: "pro", wantOver: true},
		{name: "a cost above the policy's, within the override's", key: "acme", cost: 50, wantLimit: 100, wantPlan: "pro", wantOver: true},
		{name: "limits of its own, composite", key: "scraper", cost: 1, wantLimit: 3, wantOver: true, wantParts: 2},
		{name: "a cost above the override's", key: "scraper", cost: 4, wantField: "cost"},
		{name: "a cost above the policy's", key: "other", cost: 11, wantField: "cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, free)
			lim.SetResolver(r)
			d, err := lim.Check(at(t0), "api", tt.key, tt.cost)
			if tt.wantField != "" {
				var ie *sluice.InvalidError
				if !errors.As(err, &ie) || ie.Field != tt.wantField {
					t.Fatalf("Check = %v, want an InvalidError naming %q", err, tt.wantField)
				}
				if p, _ := lim.Peek(at(t0), "api", tt.key); p.Remaining != p.Limit {
					t.Errorf("after the refused check, Peek = %+v: something was consumed", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Limit != tt.wantLimit || d.Plan != tt.wantPlan || d.Override != tt.wantOver || len(d.Parts) != tt.wantParts {
				t.Errorf("Check = %+v, want allowed, limit %d, plan %q, override %v, %d parts", d, tt.wantLimit, tt.wantPlan, tt.wantOver, tt.wantParts)
			}
			if r.asked[len(r.asked)-1] != t0 {
				t.Errorf("the resolver was asked at %d, want the call's instant %d", r.asked[len(r.asked)-1], t0)
			}
			v, err := lim.CheckVerdict(at(t0), "api", tt.key, tt.cost)
			if err != nil || v.Remaining != d.Remaining-tt.cost {
				t.Errorf("CheckVerdict after Check = %+v, %v; want remaining %d, decided under the same policy", v, err, d.Remaining-tt.cost)
			}
		})
	}
}

// TestResolverStateCarriesOver moves a key between plans: the key's count is kept, read under the
// limit that applies (docs/semantics.md, section 9).
func TestResolverStateCarriesOver(t *testing.T) {
	free, pro, _ := plans(t)
	r := &keyPolicies{byKey: map[[2]string]*sluice.Policy{}}
	lim := newLimiter(t, free)
	lim.SetResolver(r)
	for range 10 {
		mustCheck(t, lim, at(t0), "api", "acme", 1)
	}
	if d, _ := lim.Check(at(t0), "api", "acme", 1); d.Allowed {
		t.Fatalf("the 11th check on free = %+v, want denied", d)
	}
	r.byKey[[2]string{"api", "acme"}] = pro
	d := mustCheck(t, lim, at(t0), "api", "acme", 1)
	if !d.Allowed || d.Remaining != 89 || d.Plan != "pro" {
		t.Errorf("the first check on pro = %+v, want allowed with 89 left of 100 (10 spent on free)", d)
	}
	lim.SetResolver(nil)
	if d := mustCheckDenied(t, lim, "api", "acme"); d.Plan != "free" || d.Override {
		t.Errorf("after SetResolver(nil) = %+v, want the default plan free", d)
	}
}

func mustCheckDenied(t *testing.T, lim *sluice.Limiter, policy, key string) sluice.Decision {
	t.Helper()
	d, err := lim.Check(at(t0), policy, key, 1)
	if err != nil || d.Allowed {
		t.Fatalf("Check = %+v, %v; want a denial", d, err)
	}
	return d
}

func TestResolverCheckMany(t *testing.T) {
	free, pro, own := plans(t)
	r := &keyPolicies{byKey: map[[2]string]*sluice.Policy{{"api", "b"}: pro, {"api", "d"}: pro, {"api", "e"}: own}}
	tests := []struct {
		name      string
		keys      []string
		cost      int64
		wantCalls []int // keys per store call
		wantLimit []int64
		wantField string
	}{
		{name: "no key overridden: one call", keys: []string{"a", "c"}, cost: 1, wantCalls: []int{2}, wantLimit: []int64{10, 10}},
		{name: "mixed: one call per policy", keys: []string{"a", "b", "c", "d", "e"}, cost: 1, wantCalls: []int{2, 2, 1}, wantLimit: []int64{10, 100, 10, 100, 3}},
		{name: "the first key overridden", keys: []string{"b", "a"}, cost: 1, wantCalls: []int{1, 1}, wantLimit: []int64{100, 10}},
		{name: "a cost only the override admits", keys: []string{"b", "a"}, cost: 50, wantField: "cost"},
		{name: "a bad key after an overridden one", keys: []string{"b", ""}, cost: 1, wantField: "keys[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &callCounter{Store: newStore(t, t0)}
			lim, err := sluice.New(st, free)
			if err != nil {
				t.Fatal(err)
			}
			lim.SetResolver(r)
			ds, err := lim.CheckMany(at(t0), "api", tt.keys, tt.cost)
			if tt.wantField != "" {
				var ie *sluice.InvalidError
				if !errors.As(err, &ie) || ie.Field != tt.wantField || len(st.checkMany) != 0 {
					t.Fatalf("CheckMany = %v after %d store calls, want an InvalidError naming %q and none", err, len(st.checkMany), tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(st.checkMany) != fmt.Sprint(tt.wantCalls) {
				t.Errorf("store calls of %v keys, want %v", st.checkMany, tt.wantCalls)
			}
			for i, d := range ds {
				over := r.byKey[[2]string{"api", tt.keys[i]}] != nil
				if !d.Allowed || d.Limit != tt.wantLimit[i] || d.Override != over {
					t.Errorf("decision %d (key %q) = %+v, want allowed, limit %d, override %v", i, tt.keys[i], d, tt.wantLimit[i], over)
				}
			}
		})
	}
}

func TestResolverCheckAllAndReads(t *testing.T) {
	free, pro, _ := plans(t)
	r := &keyPolicies{byKey: map[[2]string]*sluice.Policy{{"api", "acme"}: pro}}
	lim := newLimiter(t, free)
	lim.SetResolver(r)
	d, err := lim.CheckAll(at(t0), sluice.Item{Policy: "api", Key: "acme", Cost: 20}, sluice.Item{Policy: "api", Key: "other", Cost: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Parts[0].Plan != "pro" || !d.Parts[0].Override || d.Parts[0].Remaining != 80 || d.Parts[1].Plan != "free" || d.Parts[1].Override || d.Plan != "free" {
		t.Errorf("CheckAll = %+v, want parts pro (80 left, override) and free, the whole the binding part's (free)", d)
	}
	p, err := lim.Peek(at(t0), "api", "acme")
	if err != nil || p.Limit != 100 || p.Remaining != 80 || p.Plan != "pro" || !p.Override {
		t.Errorf("Peek = %+v, %v; want 80 of 100 under pro, override", p, err)
	}
	if f, err := lim.Forecast(at(t0), "api", "acme", 10); err != nil || f.SpendableNow != 8 {
		t.Errorf("Forecast = %+v, %v; want 8 checks of 10 under pro", f, err)
	}
	if err := lim.Refund(at(t0), "api", "acme", 20); err != nil {
		t.Fatal(err)
	}
	if err := lim.Debit(at(t0), "api", "acme", 30); err != nil {
		t.Fatal(err)
	}
	if p, _ := lim.Peek(at(t0), "api", "acme"); p.Remaining != 70 {
		t.Errorf("after Refund 20 and Debit 30, Peek = %+v, want 70 left of pro's 100", p)
	}
	if err := lim.Reset(at(t0), "api", "acme"); err != nil {
		t.Fatal(err)
	}
	if p, _ := lim.Peek(at(t0), "api", "acme"); p.Remaining != 100 {
		t.Errorf("after Reset, Peek = %+v, want 100", p)
	}
	pol, over, err := lim.Applied("api", "acme", t0)
	if err != nil || pol != pro || !over {
		t.Errorf("Applied = %v, %v, %v; want pro by override", pol, over, err)
	}
	if _, _, err := lim.Applied("nope", "acme", t0); !errors.Is(err, sluice.ErrUnknownPolicy) {
		t.Errorf("Applied of an unknown policy = %v, want ErrUnknownPolicy", err)
	}
}

func TestWithPlan(t *testing.T) {
	free, pro, _ := plans(t)
	base := sluice.MustPolicy("api", free.Limits()...)
	if base.Plan() != "" || free.Plan() != "free" || !strings.EqualFold(pro.Plan(), "pro") {
		t.Errorf("plans = %q, %q, %q; want \"\", free, pro", base.Plan(), free.Plan(), pro.Plan())
	}
	if base.Equal(free) || !free.Equal(base.WithPlan("free")) {
		t.Error("Equal must tell plans apart by their names, and only by them")
	}
	if free.Name() != "api" || free.MaxCost() != base.MaxCost() {
		t.Errorf("WithPlan changed the policy: %q, %d", free.Name(), free.MaxCost())
	}
}

// tenants is a Resolver of a fixed map: key → plan of the policy "api".
type tenants map[string]*sluice.Policy

func (t tenants) Resolve(policy, key string, now int64) *sluice.Policy {
	if policy != "api" {
		return nil
	}
	return t[key]
}

func ExampleLimiter_SetResolver() {
	perMinute := func(n float64) sluice.Limit {
		return sluice.Limit{Strategy: sluice.FixedWindow{Limit: n, WindowMs: 60_000}}
	}
	free := sluice.MustPolicy("api", perMinute(100)).WithPlan("free")
	pro := sluice.MustPolicy("api", perMinute(1000)).WithPlan("pro")
	lim, _ := sluice.New(memory.New(memory.Config{}), free)
	lim.SetResolver(tenants{"acme": pro})

	for _, key := range []string{"acme", "initech"} {
		d, _ := lim.Check(context.Background(), "api", key, 1)
		fmt.Printf("%s: plan %s, limit %d, override %v\n", key, d.Plan, d.Limit, d.Override)
	}
	// Output:
	// acme: plan pro, limit 1000, override true
	// initech: plan free, limit 100, override false
}
