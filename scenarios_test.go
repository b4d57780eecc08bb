package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// a partner API allowed 100 requests a minute, as a token bucket that bursts to 100.
func TestScenarioPartnerAPIBurst(t *testing.T) {
	partner := sluice.MustPolicy("partner-api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}})
	lim := newLimiter(t, partner)

	for i := 1; i <= 100; i++ {
		d := mustCheck(t, lim, at(t0), "partner-api", "key42", 1)
		if !d.Allowed || d.Remaining != int64(100-i) || d.Limit != 100 {
			t.Fatalf("check %d at t0 = %+v, want allowed with %d remaining", i, d, 100-i)
		}
	}
	d := mustCheck(t, lim, at(t0), "partner-api", "key42", 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfterMs != 600 || d.DeniedBy != 0 {
		t.Fatalf("101st check = %+v, want denied, 0 remaining, retry 600 ms, deniedBy 0", d)
	}
	// One token refills in 60000/100 = 600 ms: the retry is exact.
	if d := mustCheck(t, lim, at(t0+599), "partner-api", "key42", 1); d.Allowed {
		t.Errorf("check at t0+599 allowed, before the retry-after")
	}
	if d := mustCheck(t, lim, at(t0+d.RetryAfterMs), "partner-api", "key42", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("check at t0+600 = %+v, want allowed with 0 remaining", d)
	}
	if st, _ := lim.Stats("partner-api"); st != (sluice.Stats{Allowed: 101, Denied: 2}) {
		t.Errorf("Stats = %+v, want {101 2}", st)
	}
}

// with 95 of 100 used, 20 concurrent checks must admit exactly 5, never the 20 that
// a read-then-write limiter lets through. Run for every strategy, on fresh keys, many rounds.
func TestScenarioReadThenWriteRace(t *testing.T) {
	const (
		rounds     = 200
		concurrent = 20
	)
	strategies := []struct {
		name     string
		strategy sluice.Strategy
	}{
		{"fixedWindow", sluice.FixedWindow{Limit: 100, WindowMs: 60_000}},
		{"tokenBucket", sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}},
		{"gcra", sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 100}},
		{"slidingWindow", sluice.SlidingWindow{Limit: 100, WindowMs: 60_000, Buckets: 60}},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 100, WindowMs: 60_000}},
	}
	for _, s := range strategies {
		t.Run(s.name, func(t *testing.T) {
			lim := newLimiter(t, sluice.MustPolicy("c", sluice.Limit{Strategy: s.strategy}))
			ctx := at(t0)
			for r := 0; r < rounds; r++ {
				key := fmt.Sprintf("round-%d", r)
				if d := mustCheck(t, lim, ctx, "c", key, 95); !d.Allowed || d.Remaining != 5 {
					t.Fatalf("round %d: using 95 = %+v", r, d)
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := 0; g < concurrent; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						d, err := lim.Check(ctx, "c", key, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}()
				}
				close(start)
				wg.Wait()
				if n := admitted.Load(); n != 5 {
					t.Fatalf("round %d: %d of %d concurrent checks admitted, want exactly 5", r, n, concurrent)
				}
				if d := mustPeek(t, lim, ctx, "c", key); d.Remaining != 0 || d.Allowed {
					t.Fatalf("round %d: Peek after the race = %+v, want exhausted", r, d)
				}
			}
		})
	}
}

// loginPolicies are the login pair's two rules: 50 attempts per IP and 5 per account over 15
// minutes, as token buckets refilling over 900 s.
func loginPolicies() []*sluice.Policy {
	return []*sluice.Policy{
		sluice.MustPolicy("login-ip", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 50, RefillPerSec: 50.0 / 900}}),
		sluice.MustPolicy("login-account", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 5.0 / 900}}),
	}
}

// once an account has spent its 5 logins, attempts checked together against the IP
// and the account rule spend nothing of the IP's budget; checked one by one they spend 10 of 50.
func TestScenarioLoginPair(t *testing.T) {
	const ip, account = "1.2.3.4", "asha"
	spendAccount := func(t *testing.T, lim *sluice.Limiter) {
		t.Helper()
		for i := 0; i < 5; i++ {
			if d := mustCheck(t, lim, at(t0), "login-account", account, 1); !d.Allowed {
				t.Fatalf("account login %d denied", i)
			}
		}
	}
	later := at(t0 + 1000)

	t.Run("CheckAll", func(t *testing.T) {
		lim := newLimiter(t, loginPolicies()...)
		spendAccount(t, lim)
		for i := 0; i < 10; i++ {
			d, err := lim.CheckAll(later,
				sluice.Item{Policy: "login-ip", Key: ip, Cost: 1},
				sluice.Item{Policy: "login-account", Key: account, Cost: 1},
			)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.DeniedBy != 1 {
				t.Fatalf("attempt %d: allowed %v deniedBy %d, want denied by item 1 (the account)", i, d.Allowed, d.DeniedBy)
			}
			if len(d.Parts) != 2 || !d.Parts[0].Allowed || d.Parts[1].Allowed {
				t.Fatalf("attempt %d: parts %+v, want the IP part allowing and the account part denying", i, d.Parts)
			}
			if d.Limit != 5 || d.Remaining != 0 || d.RetryAfterMs < 1 || d.RetryAfterMs > 180_000 {
				t.Errorf("attempt %d: limit %d remaining %d retry %d, want the account's 5, 0 and a retry within 180 s",
					i, d.Limit, d.Remaining, d.RetryAfterMs)
			}
		}
		if d := mustPeek(t, lim, later, "login-ip", ip); d.Remaining != 50 || !d.Allowed {
			t.Errorf("IP budget after 10 denied attempts: %+v, want exactly 50 remaining", d)
		}
		if st, _ := lim.Stats("login-ip"); st != (sluice.Stats{Denied: 10}) {
			t.Errorf("Stats(login-ip) = %+v, want {0 10}", st)
		}
	})

	t.Run("one by one", func(t *testing.T) {
		lim := newLimiter(t, loginPolicies()...)
		spendAccount(t, lim)
		for i := 0; i < 10; i++ {
			if d := mustCheck(t, lim, later, "login-ip", ip, 1); !d.Allowed {
				t.Fatalf("attempt %d: the IP rule denied", i)
			}
			if d := mustCheck(t, lim, later, "login-account", account, 1); d.Allowed {
				t.Fatalf("attempt %d: the spent account rule allowed", i)
			}
		}
		if d := mustPeek(t, lim, later, "login-ip", ip); d.Remaining != 40 {
			t.Errorf("IP budget after 10 naive attempts: %d remaining, want 40 (10 spent on denied logins)", d.Remaining)
		}
	})
}

// gpt4o is a per-model registry entry as one composite policy: 2 requests a minute and
// 1000 tokens a minute with a burst multiplier of 1.0.
func gpt4o() *sluice.Policy {
	const rpm, tpm, burstMultiplier = 2, 1000, 1.0
	return sluice.MustPolicy("gpt-4o",
		sluice.Limit{Name: "requests", Strategy: sluice.SlidingWindow{Limit: rpm, WindowMs: 60_000, Buckets: 60}, Unit: sluice.UnitRequest},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: tpm * burstMultiplier, RefillPerSec: tpm / 60.0}},
	)
}

func TestScenarioPerModelRegistry(t *testing.T) {
	ctx := at(t0)
	p := gpt4o()
	if p.MaxCost() != 1000 {
		t.Errorf("MaxCost = %d, want 1000: the request limit must not bound the cost", p.MaxCost())
	}

	t.Run("third request denied by the request limit", func(t *testing.T) {
		lim := newLimiter(t, p)
		for i := 0; i < 2; i++ {
			if d := mustCheck(t, lim, ctx, "gpt-4o", "tenant", 1); !d.Allowed || d.DeniedBy != -1 || len(d.Parts) != 2 {
				t.Fatalf("request %d = %+v, want allowed with 2 parts", i, d)
			}
		}
		d := mustCheck(t, lim, ctx, "gpt-4o", "tenant", 1)
		if d.Allowed || d.DeniedBy != 0 {
			t.Fatalf("third request: allowed %v deniedBy %d, want denied by limit 0 (requests)", d.Allowed, d.DeniedBy)
		}
		if d.Parts[0].Allowed || !d.Parts[1].Allowed || d.Limit != 2 || d.Remaining != 0 || d.RetryAfterMs < 1 {
			t.Errorf("third request = %+v, want the request part denying (limit 2, 0 remaining, retry ≥ 1) and the token part allowing", d)
		}
		if pk := mustPeek(t, lim, ctx, "gpt-4o", "tenant"); pk.Parts[1].Remaining != 998 {
			t.Errorf("tokens remaining %d, want 998: the denied request consumed tokens", pk.Parts[1].Remaining)
		}
	})

	t.Run("tokens deny without spending a request", func(t *testing.T) {
		lim := newLimiter(t, p)
		if d := mustCheck(t, lim, ctx, "gpt-4o", "tenant", 600); !d.Allowed {
			t.Fatalf("600 tokens denied: %+v", d)
		}
		d := mustCheck(t, lim, ctx, "gpt-4o", "tenant", 500)
		if d.Allowed || d.DeniedBy != 1 || d.Limit != 1000 || d.Remaining != 400 {
			t.Fatalf("500 tokens with 400 left = %+v, want denied by limit 1 (tokens) with 400 remaining", d)
		}
		// 100 tokens refill at 1000/60 per s: 6000 ms.
		if d.RetryAfterMs != 6000 {
			t.Errorf("RetryAfterMs = %d, want 6000", d.RetryAfterMs)
		}
		pk := mustPeek(t, lim, ctx, "gpt-4o", "tenant")
		if pk.Parts[0].Remaining != 1 || pk.Parts[1].Remaining != 400 {
			t.Errorf("after the denial: requests %d tokens %d remaining, want 1 and 400", pk.Parts[0].Remaining, pk.Parts[1].Remaining)
		}
		if d := mustCheck(t, lim, ctx, "gpt-4o", "tenant", 400); !d.Allowed || d.Remaining != 0 {
			t.Errorf("the second request (400 tokens) = %+v, want allowed", d)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		lim := newLimiter(t, p)
		_, err := lim.Check(ctx, "gpt-5", "tenant", 1)
		if !errors.Is(err, sluice.ErrUnknownPolicy) {
			t.Errorf("unknown model: %v, want ErrUnknownPolicy", err)
		}
	})

	t.Run("cost above the token ceiling", func(t *testing.T) {
		lim := newLimiter(t, p)
		_, err := lim.Check(ctx, "gpt-4o", "tenant", 1001)
		wantInvalid(t, err, "cost")
	})

	t.Run("throttled count", func(t *testing.T) {
		lim := newLimiter(t, p)
		for _, cost := range []int64{1, 1, 1, 1} { // 2 allowed, 2 throttled by requests
			mustCheck(t, lim, ctx, "gpt-4o", "a", cost)
		}
		for _, cost := range []int64{900, 200, 100} { // allowed, throttled by tokens, allowed
			mustCheck(t, lim, ctx, "gpt-4o", "b", cost)
		}
		lim.Check(ctx, "gpt-5", "a", 1) // an unknown model counts nowhere
		if st, ok := lim.Stats("gpt-4o"); !ok || st != (sluice.Stats{Allowed: 4, Denied: 3}) {
			t.Errorf("Stats = %+v, %v; want 4 allowed and 3 throttled", st, ok)
		}
	})
}

// Issue 2 item 4: a composite checks and consumes all of its limits in one step. Goroutines
// hammering one key at one instant admit no more than either limit holds, and the denied checks
// leak nothing: each limit has spent exactly what the admitted checks cost it.
func TestScenarioCompositeExactUnderConcurrency(t *testing.T) {
	const (
		goroutines = 32
		perG       = 64
		maxReq     = 500
		maxTokens  = 1000
	)
	pairs := []struct {
		name             string
		requests, tokens sluice.Strategy
	}{
		{"fixedWindow+tokenBucket", sluice.FixedWindow{Limit: maxReq, WindowMs: 60_000}, sluice.TokenBucket{Capacity: maxTokens, RefillPerSec: maxTokens / 60.0}},
		{"slidingWindow+gcra", sluice.SlidingWindow{Limit: maxReq, WindowMs: 60_000, Buckets: 60}, sluice.GCRA{Limit: maxTokens, PeriodMs: 60_000, Burst: maxTokens}},
		{"slidingWindowLog+fixedWindow", sluice.SlidingWindowLog{Limit: maxReq, WindowMs: 60_000}, sluice.FixedWindow{Limit: maxTokens, WindowMs: 60_000}},
		{"gcra+slidingWindowLog", sluice.GCRA{Limit: maxReq, PeriodMs: 60_000, Burst: maxReq}, sluice.SlidingWindowLog{Limit: maxTokens, WindowMs: 60_000}},
		{"tokenBucket+slidingWindow", sluice.TokenBucket{Capacity: maxReq, RefillPerSec: 1}, sluice.SlidingWindow{Limit: maxTokens, WindowMs: 60_000, Buckets: 10}},
	}
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			p := sluice.MustPolicy("model",
				sluice.Limit{Name: "requests", Strategy: pair.requests, Unit: sluice.UnitRequest},
				sluice.Limit{Name: "tokens", Strategy: pair.tokens},
			)
			lim := newLimiter(t, p)
			ctx := at(t0)
			var admitted, spent, denied atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 2))
					<-start
					for i := 0; i < perG; i++ {
						cost := rng.Int64N(5) + 1
						d, err := lim.Check(ctx, "model", "hot", cost)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
							spent.Add(cost)
						} else {
							denied.Add(1)
							if d.DeniedBy != 0 && d.DeniedBy != 1 {
								t.Errorf("denied with DeniedBy %d", d.DeniedBy)
							}
						}
					}
				}(uint64(g))
			}
			close(start)
			wg.Wait()

			n, sum := admitted.Load(), spent.Load()
			if n > maxReq || sum > maxTokens {
				t.Fatalf("admitted %d requests for %d tokens, over the limits %d and %d", n, sum, maxReq, maxTokens)
			}
			if n == 0 || denied.Load() == 0 {
				t.Fatalf("admitted %d, denied %d: the test did not reach a limit", n, denied.Load())
			}
			d := mustPeek(t, lim, ctx, "model", "hot")
			if len(d.Parts) != 2 {
				t.Fatalf("Peek has %d parts, want 2", len(d.Parts))
			}
			if got, want := d.Parts[0].Remaining, maxReq-n; got != want {
				t.Errorf("requests remaining %d, want %d (%d admitted)", got, want, n)
			}
			if got, want := d.Parts[1].Remaining, maxTokens-sum; got != want {
				t.Errorf("tokens remaining %d, want %d (%d spent by admitted checks)", got, want, sum)
			}
			if st, _ := lim.Stats("model"); st.Allowed != uint64(n) || st.Denied != uint64(denied.Load()) {
				t.Errorf("Stats = %+v, want {%d %d}", st, n, denied.Load())
			}
		})
	}
}

// CheckAll under concurrency: goroutines check items of two policies over a few shared keys, all
// or nothing. Afterwards every key has spent exactly what the allowed calls' items cost it.
func TestScenarioCheckAllUnderConcurrency(t *testing.T) {
	const (
		goroutines = 16
		perG       = 100
	)
	user := sluice.MustPolicy("per-user", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 200, WindowMs: 60_000}})
	ip := sluice.MustPolicy("per-ip", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 150, RefillPerSec: 1}})
	limits := map[string]int64{"per-user": 200, "per-ip": 150}
	users := []string{"u0", "u1", "u2"}
	ips := []string{"i0", "i1"}
	lim := newLimiter(t, user, ip)
	ctx := at(t0)

	type pk struct{ policy, key string }
	var mu sync.Mutex
	consumed := map[pk]int64{}
	var allowedCalls, deniedCalls atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			<-start
			for i := 0; i < perG; i++ {
				u := users[rng.IntN(len(users))]
				items := []sluice.Item{
					{Policy: "per-user", Key: u, Cost: rng.Int64N(3) + 1},
					{Policy: "per-ip", Key: ips[rng.IntN(len(ips))], Cost: rng.Int64N(4) + 1},
				}
				if rng.IntN(4) == 0 { // sometimes the same user key twice in one call
					items = append(items, sluice.Item{Policy: "per-user", Key: u, Cost: 1})
				}
				d, err := lim.CheckAll(ctx, items...)
				if err != nil {
					t.Error(err)
					return
				}
				if len(d.Parts) != len(items) {
					t.Errorf("%d parts for %d items", len(d.Parts), len(items))
					return
				}
				if !d.Allowed {
					deniedCalls.Add(1)
					if d.DeniedBy < 0 || d.DeniedBy >= len(items) || d.Parts[d.DeniedBy].Allowed {
						t.Errorf("denied call has DeniedBy %d pointing at an allowing part", d.DeniedBy)
					}
					continue
				}
				allowedCalls.Add(1)
				mu.Lock()
				for _, it := range items {
					consumed[pk{it.Policy, it.Key}] += it.Cost
				}
				mu.Unlock()
			}
		}(uint64(g))
	}
	close(start)
	wg.Wait()

	if allowedCalls.Load() == 0 || deniedCalls.Load() == 0 {
		t.Fatalf("allowed %d, denied %d calls: the test did not reach a limit", allowedCalls.Load(), deniedCalls.Load())
	}
	for _, k := range []pk{{"per-user", "u0"}, {"per-user", "u1"}, {"per-user", "u2"}, {"per-ip", "i0"}, {"per-ip", "i1"}} {
		d := mustPeek(t, lim, ctx, k.policy, k.key)
		if spent := limits[k.policy] - d.Remaining; spent != consumed[k] {
			t.Errorf("%s/%s: the store spent %d, the allowed calls' items cost %d", k.policy, k.key, spent, consumed[k])
		}
		if consumed[k] > limits[k.policy] {
			t.Errorf("%s/%s: allowed %d over a limit of %d", k.policy, k.key, consumed[k], limits[k.policy])
		}
	}
}

type keyRemaining struct {
	policy, key string
	remaining   int64
}

// CheckAll item i is decided as if items 0..i-1 had been consumed, and a denied call spends
// nothing even from an item that passed.
func TestScenarioCheckAllSeesEarlierItems(t *testing.T) {
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}})
	q := sluice.MustPolicy("q", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}})
	ctx := at(t0)
	tests := []struct {
		name      string
		items     []sluice.Item
		allowed   bool
		deniedBy  int
		remaining []int64 // per item, in its decision
		after     []keyRemaining
	}{
		{
			name:      "same key twice fits",
			items:     []sluice.Item{{Policy: "p", Key: "k", Cost: 2}, {Policy: "p", Key: "k", Cost: 3}},
			allowed:   true,
			deniedBy:  -1,
			remaining: []int64{3, 0},
			after:     []keyRemaining{{"p", "k", 0}},
		},
		{
			name:      "same key twice overflows",
			items:     []sluice.Item{{Policy: "p", Key: "k", Cost: 3}, {Policy: "q", Key: "k", Cost: 1}, {Policy: "p", Key: "k", Cost: 3}},
			allowed:   false,
			deniedBy:  2,
			remaining: []int64{5, 5, 2}, // nothing spent: the third reads what the first would leave
			after:     []keyRemaining{{"p", "k", 5}, {"q", "k", 5}},
		},
		{
			name:      "same key, other policy: separate budgets",
			items:     []sluice.Item{{Policy: "p", Key: "k", Cost: 5}, {Policy: "q", Key: "k", Cost: 5}},
			allowed:   true,
			deniedBy:  -1,
			remaining: []int64{0, 0},
			after:     []keyRemaining{{"p", "k", 0}, {"q", "k", 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, p, q)
			d, err := lim.CheckAll(ctx, tt.items...)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tt.allowed || d.DeniedBy != tt.deniedBy {
				t.Errorf("allowed %v deniedBy %d, want %v %d", d.Allowed, d.DeniedBy, tt.allowed, tt.deniedBy)
			}
			for i, r := range tt.remaining {
				if d.Parts[i].Remaining != r {
					t.Errorf("part %d remaining %d, want %d", i, d.Parts[i].Remaining, r)
				}
			}
			for _, k := range tt.after {
				if got := mustPeek(t, lim, ctx, k.policy, k.key).Remaining; got != k.remaining {
					t.Errorf("%s/%s remaining %d after the call, want %d", k.policy, k.key, got, k.remaining)
				}
			}
		})
	}
}

// The memory store keeps a key's state across reloads, Equal or changed, as Limiter.SetPolicies
// promises: a changed limit decides on what was spent under the old one.
func TestScenarioReloadedPolicyKeepsState(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, t0)
	build := func(limit float64) *sluice.Policy {
		return sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: limit, WindowMs: 60_000}})
	}
	lim, err := sluice.New(store, build(3))
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, lim, ctx, "api", "k", 2)
	steps := []struct {
		name      string
		policy    *sluice.Policy
		remaining int64
	}{
		{"reloaded unchanged", build(3), 1},
		{"reloaded unchanged again", build(3), 1},
		{"changed", build(4), 2},
	}
	for _, s := range steps {
		if err := lim.SetPolicies(s.policy); err != nil {
			t.Fatal(err)
		}
		if got := mustPeek(t, lim, ctx, "api", "k").Remaining; got != s.remaining {
			t.Errorf("%s: remaining %d, want %d", s.name, got, s.remaining)
		}
	}
}

// Replacing a policy while checks that still hold the old one are under way (Limiter.SetPolicies:
// "checks already under way finish with the old set"), or while a second Limiter on the same store
// still holds it. The memory store is driven directly here to make the interleaving deterministic.
func TestScenarioReloadWithStaleChecks(t *testing.T) {
	ctx := context.Background()
	build := func(limit float64) *sluice.Policy {
		return sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 60_000}})
	}

	t.Run("a stale check does not wipe the new policy's state", func(t *testing.T) {
		store := newStore(t, t0)
		old := build(10)
		lim, err := sluice.New(store, old)
		if err != nil {
			t.Fatal(err)
		}
		mustCheck(t, lim, ctx, "api", "k", 3)
		if err := lim.SetPolicies(build(20)); err != nil {
			t.Fatal(err)
		}
		if d := mustCheck(t, lim, ctx, "api", "k", 17); !d.Allowed { // the new limit's budget for k is spent
			t.Fatalf("k under the new policy: %+v, want 17 of its 20 allowed after 3 spent", d)
		}
		// A check that looked the policy up before SetPolicies reaches the store now.
		if _, err := store.Check(ctx, 0, old, "other", 1); err != nil {
			t.Fatal(err)
		}
		if d := mustPeek(t, lim, ctx, "api", "k"); d.Remaining != 0 {
			t.Errorf("k under the new policy: %d remaining after a stale check on another key, want 0 (its spent budget was forgotten)", d.Remaining)
		}
	})

	t.Run("key count after replacing a policy shared by Equal copies", func(t *testing.T) {
		now := int64(t0)
		store := memory.New(memory.Config{Now: func() int64 { return now }, SweepInterval: -1})
		t.Cleanup(func() { store.Close() })
		a, b := build(10), build(10) // Equal: e.g. the same config loaded by two Limiters
		if _, err := store.Check(ctx, 0, a, "x", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Check(ctx, 0, b, "y", 1); err != nil {
			t.Fatal(err)
		}
		if n := store.Len(); n != 2 {
			t.Fatalf("Len = %d, want 2", n)
		}
		if _, err := store.Check(ctx, 0, build(20), "x", 1); err != nil {
			t.Fatal(err)
		}
		if n := store.Len(); n != 2 {
			t.Errorf("Len = %d after the changed policy, want 2: it shares x with the old definition", n)
		}
		now += 60_000 // the old window has ended: x and y are idle, and so is the new x
		store.Sweep()
		if n := store.Len(); n != 0 {
			t.Errorf("Len = %d after sweeping idle keys, want 0", n)
		}
	})
}
