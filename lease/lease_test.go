package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/store/memory"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// counting wraps a store and counts the calls that reach it.
type counting struct {
	sluice.Store
	checks, refunds, others atomic.Int64
}

func (c *counting) calls() int64 { return c.checks.Load() + c.refunds.Load() + c.others.Load() }

func (c *counting) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, now, p, key, cost)
}

func (c *counting) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, now, p, key, cost)
}

func (c *counting) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	c.others.Add(1)
	return c.Store.CheckMany(ctx, now, p, keys, cost, out)
}

func (c *counting) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	c.others.Add(1)
	return c.Store.CheckAll(ctx, now, ps, items, out)
}

func (c *counting) Peek(ctx context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	c.others.Add(1)
	return c.Store.Peek(ctx, now, p, key)
}

func (c *counting) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	c.others.Add(1)
	return c.Store.Forecast(ctx, now, p, key, cost)
}

func (c *counting) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	c.others.Add(1)
	return c.Store.Reset(ctx, p, key)
}

// newMemory returns a memory store reading now (the process clock if nil), closed with the test.
func newMemory(tb testing.TB, now func() int64) *memory.Store {
	tb.Helper()
	s := memory.New(memory.Config{Now: now, SweepInterval: -1})
	tb.Cleanup(func() { s.Close() })
	return s
}

// newRedis returns a Redis store under a prefix of its own (SLUICE_REDIS_URL, else
// 127.0.0.1:6379), whose keys are deleted when the test ends. Without Redis the test is skipped,
// or fails under CI=true.
func newRedis(tb testing.TB) *redisstore.Store {
	tb.Helper()
	url := os.Getenv("SLUICE_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		tb.Fatalf("SLUICE_REDIS_URL: %v", err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		msg := fmt.Sprintf("no Redis at %s (set SLUICE_REDIS_URL or start redis-server): %v", url, err)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	prefix := fmt.Sprintf("sluice-lease-test:%d", time.Now().UnixNano())
	s := redisstore.New(c, redisstore.Config{Prefix: prefix})
	tb.Cleanup(func() {
		s.Close()
		ctx := context.Background()
		keys, _ := c.Do(ctx, c.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
		for _, k := range keys {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
		c.Close()
	})
	return s
}

// t0 is a whole minute (epoch ms), so windows of a second or a minute start at it.
const t0 int64 = 1_700_000_040_000

// fakeClock is a clock the tests move by hand, shared by the memory store, the Leasers and the
// contexts of the checks.
type fakeClock struct{ ms atomic.Int64 }

func newClock(ms int64) *fakeClock {
	c := &fakeClock{}
	c.ms.Store(ms)
	return c
}

func (c *fakeClock) now() int64           { return c.ms.Load() }
func (c *fakeClock) Now() time.Time       { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) add(ms int64)         { c.ms.Add(ms) }
func (c *fakeClock) ctx() context.Context { return sluice.WithNow(context.Background(), c.now()) }

// backends are the shared stores the tests run over: one memory store shared by every Leaser (as
// if the processes shared it), and Redis.
var backends = []struct {
	name string
	open func(t testing.TB, c *fakeClock) sluice.Store
}{
	{"memory", func(t testing.TB, c *fakeClock) sluice.Store { return newMemory(t, c.now) }},
	{"redis", func(t testing.TB, c *fakeClock) sluice.Store { return newRedis(t) }},
}

// newLeaser returns a Leaser over its own Limiter (as in a process of its own) over store, on
// clock c, closed when the test ends.
func newLeaser(t testing.TB, store sluice.Store, c *fakeClock, cfg lease.Config, policies ...*sluice.Policy) (*lease.Leaser, *sluice.Limiter) {
	t.Helper()
	lim, err := sluice.New(store, policies...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Now = c.Now
	l := lease.New(lim, cfg)
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, lim
}

func mustCheck(t testing.TB, l *lease.Leaser, ctx context.Context, policy, key string, cost int64) sluice.Decision {
	t.Helper()
	d, err := l.Check(ctx, policy, key, cost)
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

// eventually waits up to 5 s for cond, which the Leaser's goroutine makes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("after 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// strategies each admit limit units at one instant and replenish nothing within the tests.
func strategies(limit float64) []struct {
	name     string
	strategy sluice.Strategy
} {
	return []struct {
		name     string
		strategy sluice.Strategy
	}{
		{"tokenBucket", sluice.TokenBucket{Capacity: limit, RefillPerSec: 1e-6}},
		{"gcra", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: limit}},
		{"fixedWindow", sluice.FixedWindow{Limit: limit, WindowMs: 3_600_000}},
		{"slidingWindow", sluice.SlidingWindow{Limit: limit, WindowMs: 3_600_000, Buckets: 60}},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: limit, WindowMs: 3_600_000}},
	}
}

func TestSeveralLeasersNeverOverAdmit(t *testing.T) {
	const (
		limit    = 1000
		leasers  = 4
		workers  = 4 // goroutines per Leaser
		maxLease = 64
	)
	variants := []struct {
		name  string
		cost  func(i int) int64
		ahead float64
		// held is how many leases a process may hold back: the documented bound.
		held int64
		// exact: a denial means the process holds no unit and the store has none, so every unit is
		// admitted (cost 1 always fits what a lease has left, and no lease is taken ahead late).
		exact bool
	}{
		{"cost 1", func(int) int64 { return 1 }, 0, 1, true},
		{"costs 1 to 3", func(i int) int64 { return int64(1 + i%3) }, 0, 1, false},
		{"cost 1, leases ahead", func(int) int64 { return 1 }, 0.25, 2, false},
		{"costs 1 to 3, leases ahead", func(i int) int64 { return int64(1 + i%3) }, 0.25, 2, false},
	}
	for _, b := range backends {
		for _, st := range strategies(limit) {
			for _, c := range variants {
				t.Run(b.name+"/"+st.name+"/"+c.name, func(t *testing.T) {
					clock := newClock(t0)
					store := &counting{Store: b.open(t, clock)}
					p := sluice.MustPolicy("hot", sluice.Limit{Strategy: st.strategy})
					var admitted, denied atomic.Int64
					var wg sync.WaitGroup
					ls := make([]*lease.Leaser, leasers)
					for i := range ls {
						ls[i], _ = newLeaser(t, store, clock, lease.Config{MaxLease: maxLease, Ahead: c.ahead}, p)
						for w := range workers {
							wg.Add(1)
							go func() {
								defer wg.Done()
								// Check until the first denial: the Leaser then held less than the cost.
								for n := w; ; n += workers {
									cost := c.cost(n)
									d, err := ls[i].Check(clock.ctx(), "hot", "k", cost)
									if err != nil {
										t.Error(err)
										return
									}
									if !d.Allowed {
										denied.Add(1)
										return
									}
									admitted.Add(cost)
								}
							}()
						}
					}
					wg.Wait()
					got := admitted.Load()
					// The documented bound: each process may hold back one lease (two with Ahead).
					if lo := limit - leasers*maxLease*c.held; got > limit || got < lo {
						t.Fatalf("admitted %d units, want from %d to %d", got, lo, limit)
					}
					if c.exact && got != limit {
						t.Errorf("admitted %d units, want all %d: a denial came while units were leased", got, limit)
					}
					// Every unit granted was admitted, given back or dropped, and the store knows it.
					var leases, dropped uint64
					for _, l := range ls {
						if err := l.Close(clock.ctx()); err != nil {
							t.Fatal(err)
						}
						leases += l.Stats().Leases
						dropped += l.Stats().Dropped
					}
					lim, _ := sluice.New(store, p)
					if rest := mustPeek(t, lim, clock.ctx(), "hot", "k").Remaining; rest != limit-got-int64(dropped) {
						t.Errorf("the store has %d left after Close, want %d: %d admitted, %d dropped", rest, limit-got-int64(dropped), got, dropped)
					}
					// One store check per lease, and up to 3 for a check whose lease the store cut short.
					if checks := store.checks.Load(); checks > 3*(int64(leases)+denied.Load()) {
						t.Errorf("the store saw %d checks for %d leases and %d denials", checks, leases, denied.Load())
					}
					if leases > limit/10 {
						t.Errorf("%d leases for %d units: leases did not grow", leases, limit)
					}
					t.Logf("admitted %d, dropped %d, %d leases, %d store checks", got, dropped, leases, store.checks.Load())
				})
			}
		}
	}
}

func TestFixedWindowLeasesEndWithTheWindow(t *testing.T) {
	const (
		limit    = 200
		windowMs = 1000
		leasers  = 3
		maxLease = 30
	)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clock := newClock(t0)
			store := b.open(t, clock)
			p := sluice.MustPolicy("win", sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: windowMs}})
			ls := make([]*lease.Leaser, leasers)
			for i := range ls {
				ls[i], _ = newLeaser(t, store, clock, lease.Config{MaxLease: maxLease}, p)
			}
			perWindow := map[int64]int64{}
			// 5 windows in steps of 10 ms; each process checks 5 times a step, more than the limit.
			for at := t0; at < t0+5*windowMs; at += 10 {
				clock.ms.Store(at)
				for _, l := range ls {
					for range 5 {
						if d := mustCheck(t, l, clock.ctx(), "win", "k", 1); d.Allowed {
							perWindow[(at-t0)/windowMs]++
						}
					}
				}
			}
			for w := range int64(5) {
				got := perWindow[w]
				if lo := int64(limit - leasers*maxLease); got > limit || got < lo {
					t.Errorf("window %d admitted %d, want from %d to %d", w, got, lo, limit)
				}
			}
			t.Logf("admitted per window: %v", perWindow)
		})
	}
}

func TestUnspentUnitsComeBack(t *testing.T) {
	const capacity = 1000
	tests := []struct {
		name     string
		strategy sluice.Strategy
		// refunded: unspent units go back to the store; else they are dropped.
		refunded bool
		end      func(t *testing.T, l *lease.Leaser, clock *fakeClock, held int64)
	}{
		{"tokenBucket on Close", sluice.TokenBucket{Capacity: capacity, RefillPerSec: 1e-6}, true, closeLeaser},
		{"gcra on Close", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: capacity}, true, closeLeaser},
		{"tokenBucket on expiry", sluice.TokenBucket{Capacity: capacity, RefillPerSec: 1e-6}, true, expire},
		{"gcra on expiry", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: capacity}, true, expire},
		{"fixedWindow on Close", sluice.FixedWindow{Limit: capacity, WindowMs: 3_600_000}, false, closeLeaser},
		{"slidingWindowLog on Close", sluice.SlidingWindowLog{Limit: capacity, WindowMs: 3_600_000}, false, closeLeaser},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				clock := newClock(t0)
				store := &counting{Store: b.open(t, clock)}
				p := sluice.MustPolicy("p", sluice.Limit{Strategy: tt.strategy})
				l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 100, LeaseTTL: time.Second}, p)
				// Hot: the leases grow to 100 units, and the next is taken ahead.
				const spent = 250
				for range spent {
					mustCheck(t, l, clock.ctx(), "p", "k", 1)
				}
				lease.Settle(l)
				held := capacity - spent - mustPeek(t, lim, clock.ctx(), "p", "k").Remaining
				if held <= 0 || held > 200 {
					t.Fatalf("the leases hold %d units, want from 1 to 200", held)
				}
				tt.end(t, l, clock, held)
				want, st := int64(capacity-spent-held), l.Stats()
				if tt.refunded {
					want = capacity - spent
					if st.Returned != uint64(held) || st.Dropped != 0 {
						t.Errorf("Stats = %+v, want %d returned and none dropped", st, held)
					}
				} else if st.Dropped != uint64(held) || st.Returned != 0 {
					t.Errorf("Stats = %+v, want %d dropped and none returned", st, held)
				}
				if d := mustPeek(t, lim, clock.ctx(), "p", "k"); d.Remaining != want {
					t.Errorf("store remaining %d after the lease ended, want %d", d.Remaining, want)
				}
			})
		}
	}
}

// closeLeaser closes l, twice: the second Close does nothing.
func closeLeaser(t *testing.T, l *lease.Leaser, clock *fakeClock, _ int64) {
	t.Helper()
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	before := l.Stats()
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if after := l.Stats(); after != before {
		t.Errorf("the second Close changed Stats from %+v to %+v", before, after)
	}
	if _, err := l.Check(clock.ctx(), "p", "k", 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Check after Close: %v, want sluice.ErrClosed", err)
	}
}

// expire moves the clock past the leases' TTL and waits for the background goroutine to return
// the held units.
func expire(t *testing.T, l *lease.Leaser, clock *fakeClock, held int64) {
	t.Helper()
	clock.add(1000)
	eventually(t, "the expired leases were not returned", func() bool {
		st := l.Stats()
		return st.Returned+st.Dropped >= uint64(held)
	})
}

func TestExpiredLeaseIsNotSpent(t *testing.T) {
	clock := newClock(t0)
	store := &counting{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}})
	// A TTL of an hour: the goroutine sweeps every second, so the check below finds the leases
	// expired before it does (either way, the units go back before a new lease is taken).
	l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 100, LeaseTTL: time.Hour, Ahead: 0.25}, p)
	// Check until a second lease was taken ahead: it waits, unspent, behind the current one.
	spent := int64(0)
	for l.Stats().Ahead < 2 {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
		lease.Settle(l)
		if spent++; spent > 500 {
			t.Fatalf("Stats = %+v after %d checks, want leases taken ahead", l.Stats(), spent)
		}
	}
	held := 1000 - spent - mustPeek(t, lim, clock.ctx(), "p", "k").Remaining
	checks := store.checks.Load()
	clock.add(time.Hour.Milliseconds())
	d := mustCheck(t, l, clock.ctx(), "p", "k", 1)
	if store.checks.Load() == checks {
		t.Fatalf("a check after the leases' TTL was answered from an expired lease: %+v", d)
	}
	if st := l.Stats(); st.Returned != uint64(held) {
		t.Errorf("Stats = %+v: want the %d units of the expired leases returned", st, held)
	}
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatal(err)
	}
	if got := mustPeek(t, lim, clock.ctx(), "p", "k").Remaining; got != 1000-spent-1 {
		t.Errorf("store remaining %d after Close, want %d (the last decision: %+v)", got, 1000-spent-1, d)
	}
}

// recording is a store that records the cost of every check that reaches it.
type recording struct {
	sluice.Store
	mu    sync.Mutex
	costs []int64
}

func (r *recording) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	r.mu.Lock()
	r.costs = append(r.costs, cost)
	r.mu.Unlock()
	return r.Store.Check(ctx, now, p, key, cost)
}

func (r *recording) take() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.costs
	r.costs = nil
	return out
}

func TestColdKeysTakeLeasesOfTheirCost(t *testing.T) {
	tests := []struct {
		name    string
		gapMs   int64 // between checks
		cost    int64
		checks  int
		wantAll int64 // every store check asks this
	}{
		{"first check", 0, 1, 1, 1},
		{"first check of cost 7", 0, 7, 1, 7},
		{"one check a second", 1000, 1, 20, 1},
		{"one check of cost 3 every 2 s", 2000, 3, 20, 3},
		{"one check every 10 minutes", 600_000, 5, 10, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			store := &recording{Store: newMemory(t, clock.now)}
			p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 100}})
			l, _ := newLeaser(t, store, clock, lease.Config{}, p)
			for range tt.checks {
				mustCheck(t, l, clock.ctx(), "p", "cold", tt.cost)
				clock.add(tt.gapMs)
			}
			costs := store.take()
			if len(costs) != tt.checks {
				t.Errorf("%d store checks for %d checks, want one each", len(costs), tt.checks)
			}
			for i, c := range costs {
				if c != tt.wantAll {
					t.Errorf("store check %d asked %d, want the cost %d: %v", i, c, tt.wantAll, costs)
					break
				}
			}
		})
	}
}

func TestHotKeyLeasesGrow(t *testing.T) {
	tests := []struct {
		name     string
		cfg      lease.Config
		ceiling  float64
		min, max int64 // the sizes leases settle at
	}{
		{"MaxLease", lease.Config{MaxLease: 500}, 1e9, 500, 500},
		{"the policy's ceiling", lease.Config{MaxLease: 500}, 200, 200, 200},
		{"rate × the default Target", lease.Config{}, 1e9, 4500, 5500},
		{"rate × Target", lease.Config{Target: 10 * time.Millisecond}, 1e9, 450, 550},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			store := &recording{Store: newMemory(t, clock.now)}
			p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: tt.ceiling, RefillPerSec: 1e9}})
			l, _ := newLeaser(t, store, clock, tt.cfg, p)
			// 50 000 checks a second, 50 per ms, for a second.
			for range 1000 {
				for range 50 {
					mustCheck(t, l, clock.ctx(), "p", "hot", 1)
				}
				clock.add(1)
			}
			costs := store.take()
			if len(costs) < 10 || costs[0] != 1 {
				t.Fatalf("store checks asked %v", costs)
			}
			for _, c := range costs[len(costs)-5:] {
				if c < tt.min || c > tt.max {
					t.Errorf("the last leases were %v, want from %d to %d", costs[len(costs)-5:], tt.min, tt.max)
					break
				}
			}
			if most := 50_000/tt.min + 10; int64(len(costs)) > most {
				t.Errorf("%d store checks for 50 000 checks, want at most %d", len(costs), most)
			}
		})
	}
}

func TestLeaseSizeFollowsRate(t *testing.T) {
	// At 1000 units a second and the default Target of 100 ms, leases settle at about 100 units:
	// rate × Target. Then the key cools to one check every 2 s, and leases fall to the cost.
	clock := newClock(t0)
	store := &recording{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1e6}})
	l, _ := newLeaser(t, store, clock, lease.Config{}, p)
	for range 5000 {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
		clock.add(1)
	}
	costs := store.take()
	for _, c := range costs[len(costs)-5:] {
		if c < 80 || c > 120 {
			t.Errorf("leases at 1000/s were %v, want about 100", costs[len(costs)-5:])
			break
		}
	}
	for range 5 {
		clock.add(2000)
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	costs = store.take()
	if last := costs[len(costs)-1]; last != 1 {
		t.Errorf("a key checked every 2 s asked %v, want the last lease of its cost 1", costs)
	}
}

func TestDenialFallsBackToSmallerLeases(t *testing.T) {
	tests := []struct {
		name      string
		used      int64 // units others took first, of 100
		cost      int64
		wantAsked []int64 // store checks of the check after the lease ran out
		allowed   bool
	}{
		{"what is left", 90, 1, []int64{50, 10}, true},
		{"the cost alone", 98, 3, []int64{50, 3}, false},
		{"nothing left", 100, 1, []int64{50, 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			store := &recording{Store: newMemory(t, clock.now)}
			p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1e-6}})
			l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 50}, p)
			// Grow the key's leases to 50, spend them, and let another process take the rest.
			for {
				mustCheck(t, l, clock.ctx(), "p", "k", 1)
				if costs := store.costs; lease.Held(l, "p", "k") == 0 && len(costs) > 0 && costs[len(costs)-1] == 50 {
					break
				}
			}
			st := mustPeek(t, lim, clock.ctx(), "p", "k")
			if others := st.Remaining - (100 - tt.used); others > 0 {
				if d, err := lim.Check(clock.ctx(), "p", "k", others); err != nil || !d.Allowed {
					t.Fatalf("another process's check of %d: %+v, %v", others, d, err)
				}
			}
			store.take()
			d := mustCheck(t, l, clock.ctx(), "p", "k", tt.cost)
			if got := store.take(); !slices.Equal(got, tt.wantAsked) {
				t.Errorf("store checks asked %v, want %v", got, tt.wantAsked)
			}
			if d.Allowed != tt.allowed {
				t.Errorf("allowed %v, want %v: %+v", d.Allowed, tt.allowed, d)
			}
			if !d.Allowed && (d.RetryAfterMs < 1 || d.DeniedBy != 0) {
				t.Errorf("the denial is not the store's: %+v", d)
			}
			// Denied: the next check asks for its cost alone, until the retry time.
			if !d.Allowed {
				mustCheck(t, l, clock.ctx(), "p", "k", 1)
				if got := store.take(); !slices.Equal(got, []int64{1}) {
					t.Errorf("after a denial, store checks asked %v, want [1]", got)
				}
			}
		})
	}
}

func TestLocalDecisions(t *testing.T) {
	clock := newClock(t0)
	store := &counting{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 10}})
	// No lease ahead (the default): a check is local exactly when the store saw no call.
	l, _ := newLeaser(t, store, clock, lease.Config{MaxLease: 100}, p)
	var prev sluice.Decision
	for i := range 300 {
		checks := store.checks.Load()
		d := mustCheck(t, l, clock.ctx(), "p", "k", 2)
		local := store.checks.Load() == checks
		switch {
		case !d.Allowed || d.Limit != 1000 || d.RetryAfterMs != 0 || d.DeniedBy != -1 || d.Parts != nil:
			t.Fatalf("check %d: %+v", i, d)
		case d.Remaining != 1000-2*int64(i+1):
			t.Fatalf("check %d: remaining %d, want %d: what the store had at the last lease, and the lease's units left", i, d.Remaining, 1000-2*(i+1))
		case local && d.ResetAt != prev.ResetAt:
			t.Fatalf("check %d, local: resetAt %d, want the lease's %d", i, d.ResetAt, prev.ResetAt)
		case d.ResetAt <= t0:
			t.Fatalf("check %d: resetAt %d, not after now", i, d.ResetAt)
		}
		prev = d
	}
}

func TestBadInputTakesNoLease(t *testing.T) {
	clock := newClock(t0)
	store := &counting{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}})
	l, _ := newLeaser(t, store, clock, lease.Config{}, p)
	// A hot key with a live lease: bad input must not be answered from it either.
	for range 50 {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	lease.Settle(l)
	before, stats := store.calls(), l.Stats()
	tests := []struct {
		name   string
		policy string
		key    string
		cost   int64
		want   error
		field  string
	}{
		{"empty key", "p", "", 1, sluice.ErrInvalid, "key"},
		{"long key", "p", strings.Repeat("k", sluice.MaxKeyLen+1), 1, sluice.ErrInvalid, "key"},
		{"zero cost", "p", "k", 0, sluice.ErrInvalid, "cost"},
		{"negative cost", "p", "k", -5, sluice.ErrInvalid, "cost"},
		{"cost above the ceiling", "p", "k", 101, sluice.ErrInvalid, "cost"},
		{"unknown policy", "nope", "k", 1, sluice.ErrUnknownPolicy, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := l.Check(clock.ctx(), tt.policy, tt.key, tt.cost)
			if !errors.Is(err, tt.want) || !reflect.DeepEqual(d, sluice.Decision{}) {
				t.Fatalf("Check = %+v, %v; want %v", d, err, tt.want)
			}
			var ie *sluice.InvalidError
			if tt.field != "" && (!errors.As(err, &ie) || ie.Field != tt.field) {
				t.Errorf("error %v, want an *InvalidError for %q", err, tt.field)
			}
		})
	}
	if after := store.calls(); after != before {
		t.Errorf("bad input made %d store calls", after-before)
	}
	if after := l.Stats(); after != stats {
		t.Errorf("bad input changed Stats from %+v to %+v", stats, after)
	}
}

// failing is a store whose checks and refunds fail while down is set.
type failing struct {
	sluice.Store
	down atomic.Bool
}

var errDown = fmt.Errorf("%w: test store down", sluice.ErrUnavailable)

func (f *failing) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if f.down.Load() {
		return sluice.Decision{}, errDown
	}
	return f.Store.Check(ctx, now, p, key, cost)
}

func (f *failing) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Refund(ctx, now, p, key, cost)
}

func TestStoreErrorFailsTheCheck(t *testing.T) {
	tests := []struct {
		name string
		warm int // checks before the store goes down
	}{
		{"new key", 0},
		{"cold key", 1},
		{"hot key whose lease ran out", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			store := &failing{Store: newMemory(t, clock.now)}
			p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1}})
			l, _ := newLeaser(t, store, clock, lease.Config{MaxLease: 40}, p)
			for range tt.warm {
				mustCheck(t, l, clock.ctx(), "p", "k", 1)
			}
			lease.Settle(l)
			store.down.Store(true)
			// Spend what the lease holds; the check after must fail, not be admitted.
			for i := 0; ; i++ {
				d, err := l.Check(clock.ctx(), "p", "k", 1)
				if err != nil {
					if !errors.Is(err, sluice.ErrUnavailable) || !reflect.DeepEqual(d, sluice.Decision{}) {
						t.Fatalf("Check = %+v, %v; want the store's error", d, err)
					}
					break
				}
				if i > 40 {
					t.Fatalf("%d checks admitted with the store down: more than a lease", i)
				}
			}
			store.down.Store(false)
			if d := mustCheck(t, l, clock.ctx(), "p", "k", 1); !d.Allowed {
				t.Errorf("the store is back, and the check was denied: %+v", d)
			}
		})
	}
}

func TestFailedRefunds(t *testing.T) {
	clock := newClock(t0)
	store := &failing{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}})
	l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 100}, p)
	for range 150 {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	lease.Settle(l)
	held := 1000 - 150 - mustPeek(t, lim, clock.ctx(), "p", "k").Remaining
	store.down.Store(true)
	if err := l.Close(clock.ctx()); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Close = %v, want the refund's error", err)
	}
	if st := l.Stats(); st.ReturnErrors < 1 || st.Dropped != uint64(held) || st.Returned != 0 {
		t.Errorf("Stats = %+v, want return errors and %d dropped", st, held)
	}
}

func TestRequestCountingPoliciesPassThrough(t *testing.T) {
	clock := newClock(t0)
	store := &recording{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("model",
		sluice.Limit{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.FixedWindow{Limit: 100, WindowMs: 60_000}},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1e3}},
	)
	l, _ := newLeaser(t, store, clock, lease.Config{}, p)
	allowed := 0
	for range 150 {
		if mustCheck(t, l, clock.ctx(), "model", "tenant", 10).Allowed {
			allowed++
		}
	}
	if got := store.take(); len(got) != 150 || got[0] != 10 || got[149] != 10 {
		t.Errorf("store checks asked %d costs (%v…), want one of 10 per check", len(got), got[:min(len(got), 5)])
	}
	if allowed != 100 {
		t.Errorf("%d allowed, want the 100 requests of the window", allowed)
	}
}

func TestCompositeLeases(t *testing.T) {
	// A token bucket with a fixed window: leases end with the window and are not refunded.
	clock := newClock(t0)
	store := &counting{Store: newMemory(t, clock.now)}
	p := sluice.MustPolicy("both",
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1e6}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 500, WindowMs: 1000}},
	)
	l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 50}, p)
	admitted := 0
	for range 100 { // 100 ms, 10 checks each
		for range 10 {
			if mustCheck(t, l, clock.ctx(), "both", "k", 1).Allowed {
				admitted++
			}
		}
		clock.add(10)
	}
	// 1000 checks in one window of 500: at most 500 pass, at least one lease (50) fewer.
	if admitted > 500 || admitted < 500-50 {
		t.Fatalf("admitted %d in one window of 500, want from 450 to 500", admitted)
	}
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Returned != 0 {
		t.Errorf("Stats = %+v: a lease of a policy with a window was refunded", st)
	}
	// The next window: the window's part is fresh, and the bucket was never short.
	clock.ms.Store(t0 + 1000)
	if d := mustPeek(t, lim, clock.ctx(), "both", "k"); !d.Allowed || d.Remaining != 500 {
		t.Errorf("Peek in the next window: %+v, want 500 remaining", d)
	}
}

func TestOneGoroutineForgetsIdleKeys(t *testing.T) {
	clock := newClock(t0)
	store := newMemory(t, clock.now)
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-3}})
	before := runtime.NumGoroutine()
	// A TTL of 4 ms: the goroutine sweeps every millisecond of real time.
	l, _ := newLeaser(t, store, clock, lease.Config{LeaseTTL: 4 * time.Millisecond, Target: 10 * time.Millisecond, MaxLease: 20}, p)
	started := runtime.NumGoroutine()
	if started > before+1 { // goroutines of earlier tests may still be ending
		t.Errorf("New started %d goroutines, want 1", started-before)
	}
	const keys = 500
	for k := range keys {
		for range 30 { // hot enough for leases of more than the cost
			mustCheck(t, l, clock.ctx(), "p", fmt.Sprint("k", k), 1)
		}
	}
	if n := runtime.NumGoroutine(); n > started {
		t.Errorf("%d goroutines after checking %d keys, want %d: none per key", n, keys, started)
	}
	if n := lease.KeysHeld(l, "p"); n != keys {
		t.Fatalf("%d keys held, want %d", n, keys)
	}
	// Past the TTL the leases are returned; past 4 × Target with no lease, the keys are forgotten.
	clock.add(100)
	eventually(t, "idle keys were not forgotten", func() bool { return lease.KeysHeld(l, "p") == 0 })
	if st := l.Stats(); st.Dropped != 0 || st.Returned == 0 {
		t.Errorf("Stats = %+v, want the unspent units returned", st)
	}
	// A forgotten key starts over: a lease of its cost.
	checks := l.Stats().StoreChecks
	if d := mustCheck(t, l, clock.ctx(), "p", "k7", 1); !d.Allowed || l.Stats().StoreChecks != checks+1 {
		t.Errorf("a forgotten key's check: %+v, %d store checks", d, l.Stats().StoreChecks-checks)
	}
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Close did not stop the goroutine", func() bool { return runtime.NumGoroutine() <= before })
}

func TestReplacedPolicy(t *testing.T) {
	clock := newClock(t0)
	store := newMemory(t, clock.now)
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}})
	l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 100}, p)
	for range 150 {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	held := lease.Held(l, "p", "k")
	// The same definition under a new *Policy: leases carry on and are refunded.
	if err := lim.SetPolicies(sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}})); err != nil {
		t.Fatal(err)
	}
	for range held {
		mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	mustCheck(t, l, clock.ctx(), "p", "k", 1) // a new lease
	held = lease.Held(l, "p", "k")
	// A new definition: new leases follow it, the one held is not refunded into it.
	if err := lim.SetPolicies(sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 500, RefillPerSec: 1e-6}})); err != nil {
		t.Fatal(err)
	}
	var d sluice.Decision
	for range held + 1 {
		d = mustCheck(t, l, clock.ctx(), "p", "k", 1)
	}
	if d.Limit != 500 {
		t.Errorf("a lease taken after the policy changed: limit %d, want 500", d.Limit)
	}
	held = lease.Held(l, "p", "k")
	if err := lim.SetPolicies(sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 400, RefillPerSec: 1e-6}})); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	if err := l.Close(clock.ctx()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Returned != before.Returned || st.Dropped != before.Dropped+uint64(held) {
		t.Errorf("Stats %+v after Close, from %+v: want the %d units of the old definition dropped", st, before, held)
	}
}

func TestProcessClock(t *testing.T) {
	// No Now anywhere: the store and the Leaser read their process clocks.
	store := newMemory(t, nil)
	lim, err := sluice.New(store, sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1e-3}}))
	if err != nil {
		t.Fatal(err)
	}
	l := lease.New(lim, lease.Config{LeaseTTL: 20 * time.Millisecond, MaxLease: 100})
	defer l.Close(context.Background())
	ctx := context.Background()
	hot := func() {
		t.Helper()
		for range 300 {
			if d := mustCheck(t, l, ctx, "p", "k", 1); !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
		}
	}
	hot()
	if st := l.Stats(); st.StoreChecks > 10 {
		t.Errorf("Stats = %+v: 300 checks in a burst should take a few leases", st)
	}
	// The lease expires after 20 ms of the process clock, and the goroutine returns it.
	eventually(t, "the expired lease was not returned", func() bool { return l.Stats().Returned > 0 })
	// After a second with no check the cached clock stops; the next check reads the OS clock and
	// starts it again.
	time.Sleep(1200 * time.Millisecond)
	hot()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if got := mustPeek(t, lim, ctx, "p", "k").Remaining; got != 1e6-600 {
		t.Errorf("store remaining %d after Close, want %d (Stats %+v)", got, int64(1e6-600), st)
	}
}

func TestNextLeaseTakenAhead(t *testing.T) {
	tests := []struct {
		name     string
		strategy sluice.Strategy
	}{
		{"tokenBucket", sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 1e-3}},
		{"fixedWindow", sluice.FixedWindow{Limit: 1e6, WindowMs: 3_600_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			store := newMemory(t, clock.now)
			p := sluice.MustPolicy("p", sluice.Limit{Strategy: tt.strategy})
			l, lim := newLeaser(t, store, clock, lease.Config{MaxLease: 100, Ahead: 0.25}, p)
			// waits is how many checks so far took a lease themselves (waiting for the store).
			waits := func() uint64 {
				lease.Settle(l)
				st := l.Stats()
				return st.StoreChecks - st.Ahead
			}
			const checks = 2000
			var warm uint64
			for i := range checks {
				d := mustCheck(t, l, clock.ctx(), "p", "k", 1)
				// One process and nothing refilled: what the store had at the last lease plus what
				// the leases hold is what is left.
				if !d.Allowed || d.Remaining != 1e6-int64(i+1) {
					t.Fatalf("check %d: %+v, want remaining %d", i, d, int64(1e6)-int64(i+1))
				}
				if i == 200 {
					warm = waits()
				} else if i > 200 && i%50 == 0 && waits() != warm {
					t.Fatalf("check %d waited for the store: %d checks took a lease, %d after the warm-up", i, waits(), warm)
				}
			}
			if st := l.Stats(); st.Ahead < checks/100-2 || warm > 5 {
				t.Errorf("Stats = %+v, %d checks took a lease: want most leases taken ahead", st, warm)
			}
			t.Logf("Stats %+v, %d checks took a lease", l.Stats(), warm)
			// Close gives back the current lease and the one taken ahead.
			if err := l.Close(clock.ctx()); err != nil {
				t.Fatal(err)
			}
			st := l.Stats()
			if got, want := mustPeek(t, lim, clock.ctx(), "p", "k").Remaining, int64(1e6-checks)-int64(st.Dropped); got != want {
				t.Errorf("store remaining %d after Close, want %d (Stats %+v)", got, want, st)
			}
		})
	}
}

func TestBooksBalance(t *testing.T) {
	// Random costs and instants, several processes with leases expiring, taken ahead and carried:
	// in the end every unit the store granted was admitted, given back or dropped.
	const (
		leasers = 3
		workers = 2
		checks  = 1500 // per worker, of cost 10.5 on average: about 95 000 units in all
	)
	for _, b := range backends {
		for _, limit := range []int64{5_000, 200_000} { // demand above the limit, and below
			for _, st := range strategies(float64(limit)) {
				ahead := 0.0
				if limit > 10_000 {
					ahead = 0.25 // and leases taken ahead
				}
				t.Run(fmt.Sprintf("%s/%s/limit %d", b.name, st.name, limit), func(t *testing.T) {
					clock := newClock(t0)
					store := b.open(t, clock)
					p := sluice.MustPolicy("p", sluice.Limit{Strategy: st.strategy})
					cfg := lease.Config{MaxLease: 16, LeaseTTL: 200 * time.Millisecond, Target: 20 * time.Millisecond, Ahead: ahead}
					var admitted atomic.Int64
					var wg sync.WaitGroup
					ls := make([]*lease.Leaser, leasers)
					for i := range ls {
						ls[i], _ = newLeaser(t, store, clock, cfg, p)
						for w := range workers {
							wg.Add(1)
							go func() {
								defer wg.Done()
								rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
								for range checks {
									if rng.IntN(20) == 0 {
										clock.add(rng.Int64N(50))
									}
									cost := 1 + rng.Int64N(20)
									d, err := ls[i].Check(clock.ctx(), "p", "k", cost)
									if err != nil {
										t.Error(err)
										return
									}
									if d.Allowed {
										admitted.Add(cost)
									}
								}
							}()
						}
					}
					wg.Wait()
					var dropped uint64
					for _, l := range ls {
						if err := l.Close(clock.ctx()); err != nil {
							t.Fatal(err)
						}
						dropped += l.Stats().Dropped
					}
					lim, _ := sluice.New(store, p)
					got, rest := admitted.Load(), mustPeek(t, lim, clock.ctx(), "p", "k").Remaining
					if got > limit || got+int64(dropped)+rest != limit {
						t.Errorf("admitted %d + dropped %d + left in the store %d = %d, want %d", got, dropped, rest, got+int64(dropped)+rest, limit)
					}
					t.Logf("admitted %d, dropped %d, left %d", got, dropped, rest)
				})
			}
		}
	}
}
