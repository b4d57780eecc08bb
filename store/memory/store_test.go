package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

// epoch0 is the fixed instant most tests decide at: 2023-11-14T22:13:20Z, a whole minute.
const epoch0 = int64(1_700_000_040_000)

var bg = context.Background()

// manualClock is a Config.Now that a test moves by hand.
type manualClock struct{ ms atomic.Int64 }

func newManualClock(ms int64) *manualClock {
	c := &manualClock{}
	c.ms.Store(ms)
	return c
}

func (c *manualClock) Now() int64   { return c.ms.Load() }
func (c *manualClock) Set(ms int64) { c.ms.Store(ms) }

func fixedNow(ms int64) func() int64 { return func() int64 { return ms } }

// openStore returns a store that is closed when the test ends. Its background sweep is off unless
// cfg sets SweepInterval, so that only the test's own Sweep calls drop keys.
func openStore(t *testing.T, cfg memory.Config) *memory.Store {
	t.Helper()
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	st := memory.New(cfg)
	t.Cleanup(func() { st.Close() })
	return st
}

func openLimiter(t *testing.T, st sluice.Store, ps ...*sluice.Policy) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(st, ps...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func single(name string, s sluice.Strategy) *sluice.Policy {
	return sluice.MustPolicy(name, sluice.Limit{Strategy: s})
}

func mustCheck(t *testing.T, lim *sluice.Limiter, ctx context.Context, policy, key string, cost int64) sluice.Decision {
	t.Helper()
	d, err := lim.Check(ctx, policy, key, cost)
	if err != nil {
		t.Fatalf("Check(%s, %s, %d): %v", policy, key, cost, err)
	}
	return d
}

func mustPeek(t *testing.T, lim *sluice.Limiter, ctx context.Context, policy, key string) sluice.Decision {
	t.Helper()
	d, err := lim.Peek(ctx, policy, key)
	if err != nil {
		t.Fatalf("Peek(%s, %s): %v", policy, key, err)
	}
	return d
}

func storeCheck(t *testing.T, st *memory.Store, now int64, p *sluice.Policy, key string, cost int64) sluice.Decision {
	t.Helper()
	d, err := st.Check(bg, now, p, key, cost)
	if err != nil {
		t.Fatalf("Check(%s, %s, %d) at %d: %v", p.Name(), key, cost, now, err)
	}
	return d
}

func storePeek(t *testing.T, st *memory.Store, now int64, p *sluice.Policy, key string) sluice.Decision {
	t.Helper()
	d, err := st.Peek(bg, now, p, key)
	if err != nil {
		t.Fatalf("Peek(%s, %s) at %d: %v", p.Name(), key, now, err)
	}
	return d
}

func wantLen(t *testing.T, st *memory.Store, want int, when string) {
	t.Helper()
	if got := st.Len(); got != want {
		t.Fatalf("%s: Len = %d, want %d", when, got, want)
	}
}

type namedStrategy struct {
	name string
	s    sluice.Strategy
}

// thousand holds every strategy set up so that one key admits exactly 1000 units at one instant.
var thousand = []namedStrategy{
	{"gcra", sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1000}},
	{"tokenBucket", sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1}},
	{"fixedWindow", sluice.FixedWindow{Limit: 1000, WindowMs: 60_000}},
	{"slidingWindow", sluice.SlidingWindow{Limit: 1000, WindowMs: 60_000, Buckets: 10}},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 1000, WindowMs: 60_000}},
}

// five holds every strategy set up so that one key admits exactly 5 units at one instant.
var five = []namedStrategy{
	{"gcra", sluice.GCRA{Limit: 5, PeriodMs: 60_000, Burst: 5}},
	{"tokenBucket", sluice.TokenBucket{Capacity: 5, RefillPerSec: 0.01}},
	{"fixedWindow", sluice.FixedWindow{Limit: 5, WindowMs: 60_000}},
	{"slidingWindow", sluice.SlidingWindow{Limit: 5, WindowMs: 60_000, Buckets: 6}},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 5, WindowMs: 60_000}},
}

// TestGrowthUnderConcurrencyIsExact grows one policy's tables through many rebuilds while other
// goroutines hammer hot keys of the same policy and of another, optionally with a sweep running
// all along: every hot key admits exactly its limit and every inserted key keeps its consumption.
func TestGrowthUnderConcurrencyIsExact(t *testing.T) {
	const (
		limit     = 1000
		hammerers = 8   // goroutines per hot key
		perHammer = 500 // checks per hammerer: 4000 tries for 1000 units
		inserters = 4
		perInsert = 1500 // distinct keys per inserter
	)
	hot := []struct{ policy, key string }{{"grow", "hot-a"}, {"grow", "hot-b"}, {"other", "hot-a"}}
	insertedKey := func(g, i int) string { return fmt.Sprintf("user:%d:%d", g, i) }
	for _, sc := range thousand {
		for _, sweeping := range []bool{false, true} {
			name := sc.name
			if sweeping {
				name += "/sweeping"
			}
			t.Run(name, func(t *testing.T) {
				st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
				lim := openLimiter(t, st, single("grow", sc.s), single("other", sc.s))

				started := make(chan struct{})
				stop := make(chan struct{})
				var sweeps atomic.Int64
				var sweeper sync.WaitGroup
				if sweeping {
					sweeper.Add(1)
					go func() {
						defer sweeper.Done()
						for {
							st.Sweep()
							if sweeps.Add(1) == 1 {
								close(started)
							}
							select {
							case <-stop:
								return
							default:
							}
						}
					}()
				} else {
					close(started)
				}

				var work sync.WaitGroup
				for g := range inserters {
					work.Go(func() {
						<-started
						for i := range perInsert {
							d, err := lim.Check(bg, "grow", insertedKey(g, i), 1)
							if err != nil || !d.Allowed || d.Remaining != limit-1 {
								t.Errorf("insert %s: %+v, %v; want allowed with remaining %d", insertedKey(g, i), d, err, limit-1)
								return
							}
						}
					})
				}
				admitted := make([]atomic.Int64, len(hot))
				for h, hk := range hot {
					for range hammerers {
						work.Go(func() {
							<-started
							for range perHammer {
								d, err := lim.Check(bg, hk.policy, hk.key, 1)
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									admitted[h].Add(1)
								}
							}
						})
					}
				}
				work.Wait()
				close(stop)
				sweeper.Wait()
				if sweeping && sweeps.Load() < 2 {
					t.Errorf("only %d sweeps ran during the test", sweeps.Load())
				}

				for h, hk := range hot {
					if got := admitted[h].Load(); got != limit {
						t.Errorf("%s/%s admitted %d, want exactly %d", hk.policy, hk.key, got, limit)
					}
					if d := mustPeek(t, lim, bg, hk.policy, hk.key); d.Remaining != 0 || d.Allowed {
						t.Errorf("%s/%s after the storm: Peek %+v, want remaining 0, not allowed", hk.policy, hk.key, d)
					}
				}
				missing := 0
				for g := range inserters {
					for i := range perInsert {
						if d := mustPeek(t, lim, bg, "grow", insertedKey(g, i)); d.Remaining != limit-1 {
							if missing++; missing <= 5 {
								t.Errorf("inserted key %s: Peek remaining %d, want %d (key lost or changed)", insertedKey(g, i), d.Remaining, limit-1)
							}
						}
					}
				}
				if missing > 0 {
					t.Errorf("%d inserted keys lost their consumption", missing)
				}
				wantLen(t, st, inserters*perInsert+len(hot), "after the storm")
			})
		}
	}
}

// TestShrinkUnderConcurrency: thousands of keys go idle and a sweep loop drops them, shrinking
// and rebuilding the tables, while hot keys are hammered and new keys inserted: the hot keys
// still admit exactly their limit and no busy key is lost.
func TestShrinkUnderConcurrency(t *testing.T) {
	const (
		limit     = 1000
		old       = 6000 // keys spent at epoch0, idle a few minutes later
		hammerers = 8
		perHammer = 500
		fresh     = 2000 // keys spent during the sweeps
	)
	for _, sc := range thousand {
		t.Run(sc.name, func(t *testing.T) {
			clk := newManualClock(epoch0)
			st := openStore(t, memory.Config{Now: clk.Now})
			lim := openLimiter(t, st, single("p", sc.s))
			for i := range old {
				mustCheck(t, lim, bg, "p", fmt.Sprint("old-", i), 1)
			}
			wantLen(t, st, old, "after the first round")
			clk.Set(epoch0 + 300_000) // every old key has replenished

			stop := make(chan struct{})
			var sweeper sync.WaitGroup
			sweeper.Go(func() {
				for {
					st.Sweep()
					select {
					case <-stop:
						return
					default:
					}
				}
			})
			var admitted atomic.Int64
			var work sync.WaitGroup
			for range hammerers {
				work.Go(func() {
					for range perHammer {
						if d, err := lim.Check(bg, "p", "hot", 1); err == nil && d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			work.Go(func() {
				for i := range fresh {
					if d, err := lim.Check(bg, "p", fmt.Sprint("new-", i), 1); err != nil || !d.Allowed || d.Remaining != limit-1 {
						t.Errorf("new-%d: %+v, %v", i, d, err)
						return
					}
				}
			})
			work.Wait()
			close(stop)
			sweeper.Wait()
			st.Sweep()

			if admitted.Load() != limit {
				t.Errorf("hot key admitted %d, want exactly %d", admitted.Load(), limit)
			}
			for i := range fresh {
				if d := mustPeek(t, lim, bg, "p", fmt.Sprint("new-", i)); d.Remaining != limit-1 {
					t.Fatalf("new-%d lost its consumption: %+v", i, d)
				}
			}
			wantLen(t, st, fresh+1, "after the sweeps")
		})
	}
}

// TestSweepDropsExactlyIdleKeys: a key whose limit has fully replenished is dropped and then
// decides like a fresh key; a key still replenishing is kept and decides as if nothing happened.
func TestSweepDropsExactlyIdleKeys(t *testing.T) {
	cases := []struct {
		name               string
		s                  sluice.Strategy
		idleAt, busyAt     int64 // when the keys "idle" and "busy" spend
		idleCost, busyCost int64
		sweepAt            int64 // idle's limit has fully replenished by then, busy's has not
	}{
		// 100 ms per cell: idle is back to full at +100, busy at +500.
		{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}, epoch0, epoch0, 1, 5, epoch0 + 200},
		{"gcra/at-exact-replenish", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}, epoch0, epoch0, 1, 2, epoch0 + 100},
		// One token per 100 ms.
		{"tokenBucket", sluice.TokenBucket{Capacity: 10, RefillPerSec: 10}, epoch0, epoch0, 1, 5, epoch0 + 200},
		{"tokenBucket/fractional", sluice.TokenBucket{Capacity: 3, RefillPerSec: 1.0 / 3}, epoch0, epoch0 + 2000, 1, 1, epoch0 + 3500},
		// Windows of one second: idle spent in the previous one.
		{"fixedWindow", sluice.FixedWindow{Limit: 10, WindowMs: 1000}, epoch0, epoch0 + 1000, 3, 3, epoch0 + 1500},
		{"fixedWindow/window-start", sluice.FixedWindow{Limit: 10, WindowMs: 1000}, epoch0 + 999, epoch0 + 1000, 3, 3, epoch0 + 1000},
		// Buckets of 100 ms: idle's bucket is out of even the weighted oldest one at +1100.
		{"slidingWindow", sluice.SlidingWindow{Limit: 10, WindowMs: 1000, Buckets: 10}, epoch0, epoch0 + 1000, 2, 2, epoch0 + 1150},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}, epoch0, epoch0 + 500, 2, 2, epoch0 + 1200},
		{"slidingWindowLog/at-exact-expiry", sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}, epoch0, epoch0 + 1, 2, 2, epoch0 + 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newManualClock(c.idleAt)
			p := single("p", c.s)
			swept := openStore(t, memory.Config{Now: clk.Now})
			kept := openStore(t, memory.Config{Now: clk.Now}) // the same history, never swept
			for _, st := range []*memory.Store{swept, kept} {
				clk.Set(c.idleAt)
				storeCheck(t, st, 0, p, "idle", c.idleCost)
				clk.Set(c.busyAt)
				storeCheck(t, st, 0, p, "busy", c.busyCost)
			}
			clk.Set(c.sweepAt)
			wantLen(t, swept, 2, "before Sweep")
			swept.Sweep()
			wantLen(t, swept, 1, "after Sweep")
			swept.Sweep()
			wantLen(t, swept, 1, "after a second Sweep")

			// Nothing observable changed: peeks, forecasts and checks decide as on the unswept store,
			// and the dropped key decides like a key never seen.
			fresh := storePeek(t, kept, 0, p, "never-seen")
			if got := storePeek(t, swept, 0, p, "idle"); !reflect.DeepEqual(got, fresh) {
				t.Errorf("Peek(idle) after Sweep = %+v, want a fresh key's %+v", got, fresh)
			}
			busy := storePeek(t, kept, 0, p, "busy")
			if busy.Remaining >= busy.Limit {
				t.Fatalf("busy key shows no consumption at the sweep instant: %+v", busy)
			}
			if got := storePeek(t, swept, 0, p, "busy"); !reflect.DeepEqual(got, busy) {
				t.Errorf("Peek(busy) after Sweep = %+v, want %+v", got, busy)
			}
			for _, key := range []string{"busy", "idle"} {
				want, _ := kept.Forecast(bg, 0, p, key, 1)
				if got, _ := swept.Forecast(bg, 0, p, key, 1); got != want {
					t.Errorf("Forecast(%s) after Sweep = %+v, want %+v", key, got, want)
				}
			}
			freshCheck := storeCheck(t, kept, 0, p, "never-seen", 1)
			for _, key := range []string{"idle", "busy"} {
				want := storeCheck(t, kept, 0, p, key, 1)
				got := storeCheck(t, swept, 0, p, key, 1)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Check(%s) after Sweep = %+v, want %+v", key, got, want)
				}
				if key == "idle" && !reflect.DeepEqual(got, freshCheck) {
					t.Errorf("Check(idle) after Sweep = %+v, want a fresh key's %+v", got, freshCheck)
				}
			}
		})
	}
}

// TestSweepNeverChangesDecisions replays one random history on two stores, one of them swept after
// every operation: every decision, peek and forecast must be the same on both.
func TestSweepNeverChangesDecisions(t *testing.T) {
	strategies := []namedStrategy{
		{"gcra", sluice.GCRA{Limit: 5, PeriodMs: 1000, Burst: 3}},
		{"tokenBucket", sluice.TokenBucket{Capacity: 4, RefillPerSec: 3}},
		{"fixedWindow", sluice.FixedWindow{Limit: 5, WindowMs: 1000}},
		{"slidingWindow", sluice.SlidingWindow{Limit: 5, WindowMs: 1000, Buckets: 4}},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 5, WindowMs: 1000}},
	}
	keys := []string{"a", "b", "c", "d"}
	for _, sc := range strategies {
		t.Run(sc.name, func(t *testing.T) {
			p := single("p", sc.s)
			clk := newManualClock(epoch0)
			swept := openStore(t, memory.Config{Now: clk.Now})
			kept := openStore(t, memory.Config{Now: clk.Now})
			rng := rand.New(rand.NewPCG(1, 2))
			maxCost := min(p.MaxCost(), 3)
			for step := range 1500 {
				clk.Set(clk.Now() + rng.Int64N(400))
				key := keys[rng.IntN(len(keys))]
				cost := 1 + rng.Int64N(maxCost)
				var got, want any
				switch op := rng.IntN(20); {
				case op < 13:
					got, want = storeCheck(t, swept, 0, p, key, cost), storeCheck(t, kept, 0, p, key, cost)
				case op < 16:
					got, want = storePeek(t, swept, 0, p, key), storePeek(t, kept, 0, p, key)
				case op < 18:
					f1, _ := swept.Forecast(bg, 0, p, key, cost)
					f2, _ := kept.Forecast(bg, 0, p, key, cost)
					got, want = f1, f2
				default:
					_ = swept.Refund(bg, 0, p, key, cost)
					_ = kept.Refund(bg, 0, p, key, cost)
					got, want = storePeek(t, swept, 0, p, key), storePeek(t, kept, 0, p, key)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d at %d, key %s cost %d: swept store answered %+v, unswept %+v", step, clk.Now(), key, cost, got, want)
				}
				swept.Sweep()
			}
			if swept.Len() > kept.Len() {
				t.Errorf("swept store holds %d keys, unswept %d", swept.Len(), kept.Len())
			}
		})
	}
}

// TestLenCountsKeysPerLimit: Len counts every key of every policy, one per limit of a composite
// policy, and a sweep of idle keys brings it back to zero.
func TestLenCountsKeysPerLimit(t *testing.T) {
	clk := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clk.Now})
	one := single("one", sluice.FixedWindow{Limit: 10, WindowMs: 1000})
	two := sluice.MustPolicy("two",
		sluice.Limit{Name: "requests", Strategy: sluice.SlidingWindow{Limit: 10, WindowMs: 1000, Buckets: 5}, Unit: sluice.UnitRequest},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 100}})
	three := sluice.MustPolicy("three",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 1000}},
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}})
	lim := openLimiter(t, st, one, two, three)

	steps := []struct {
		policy, key string
		want        int
	}{
		{"one", "k", 1},
		{"two", "k", 3},
		{"three", "k", 6},
		{"one", "k", 6}, // an existing key adds nothing
		{"two", "k2", 8},
		{"three", "k2", 11},
		{"one", "k2", 12},
	}
	for _, s := range steps {
		if d := mustCheck(t, lim, bg, s.policy, s.key, 1); !d.Allowed {
			t.Fatalf("Check(%s, %s) denied: %+v", s.policy, s.key, d)
		}
		wantLen(t, st, s.want, fmt.Sprintf("after Check(%s, %s)", s.policy, s.key))
	}
	st.Sweep()
	wantLen(t, st, 12, "after a Sweep at the same instant")
	clk.Set(epoch0 + 5000)
	st.Sweep()
	wantLen(t, st, 0, "after a Sweep once every limit has replenished")
}

// TestMaxKeys: the cap holds Len to MaxKeys; a new key past it is refused with ErrFull (counted)
// while every key held is still spending, and no key held ever loses its consumption; once keys go
// idle, new keys take their places (counted as evictions).
func TestMaxKeys(t *testing.T) {
	cases := []struct {
		name     string
		max      int
		policies int
		keys     int
	}{
		{"one-policy", 100, 1, 2000},
		{"cap-1", 1, 1, 500},
		{"two-policies", 150, 2, 1500},
		{"cap-above-keys", 5000, 1, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var clk atomic.Int64 // a refusal's background sweep reads it
			clk.Store(epoch0)
			st := openStore(t, memory.Config{Now: clk.Load, MaxKeys: c.max})
			var ps []*sluice.Policy
			for i := range c.policies {
				ps = append(ps, single(fmt.Sprintf("p%d", i), sluice.FixedWindow{Limit: 3, WindowMs: 3_600_000}))
			}
			lim := openLimiter(t, st, ps...)
			refused := 0
			for i := range c.keys {
				for _, p := range ps {
					d, err := lim.Check(bg, p.Name(), fmt.Sprint("key-", i), 1)
					switch {
					case errors.Is(err, memory.ErrFull):
						refused++
					case err != nil || !d.Allowed || d.Remaining != 2:
						t.Fatalf("first check of key-%d: %+v, %v, want allowed with remaining 2", i, d, err)
					}
				}
				if n := st.Len(); n > c.max {
					t.Fatalf("after %d keys: Len %d, above MaxKeys %d", i+1, n, c.max)
				}
			}
			inserted := c.keys * c.policies
			if got := st.Refusals(); got != uint64(refused) || refused != inserted-st.Len() || st.Evictions() != 0 {
				t.Errorf("Refusals = %d, Evictions %d, refused %d: want %d refused (inserted %d, Len %d), none evicted",
					got, st.Evictions(), refused, inserted-st.Len(), inserted, st.Len())
			}

			// Every key held shows its consumption; Peek creates none.
			lenBefore := st.Len()
			held := 0
			for i := range c.keys {
				switch d := mustPeek(t, lim, bg, ps[0].Name(), fmt.Sprint("key-", i)); d.Remaining {
				case 2:
					held++
				case 3:
				default:
					t.Fatalf("Peek(key-%d) = %+v, want remaining 2 (held) or 3 (refused)", i, d)
				}
			}
			wantLen(t, st, lenBefore, "after peeking every key")
			if c.policies == 1 && held != lenBefore {
				t.Errorf("%d keys show their consumption, Len is %d", held, lenBefore)
			}

			// A held key's budget holds across the refusals.
			for cost := 0; cost < 2; cost++ {
				mustCheck(t, lim, bg, ps[0].Name(), "key-0", 1)
			}
			if d := mustCheck(t, lim, bg, ps[0].Name(), "key-0", 1); d.Allowed {
				t.Fatalf("key-0 after its 3 units: %+v, want denied", d)
			}

			// A new window: every key is idle, and new keys take their places.
			clk.Add(3_600_000)
			st.Sweep()
			for i := range c.max {
				if _, err := lim.Check(bg, ps[0].Name(), fmt.Sprint("new-", i), 1); err != nil {
					t.Fatalf("new-%d once every key is idle: %v", i, err)
				}
			}
			if n := st.Len(); n > c.max {
				t.Fatalf("Len %d above MaxKeys %d", n, c.max)
			}
		})
	}
}

// TestMaxKeysConcurrent: goroutines inserting distinct keys under a cap; each insertion either
// stays or was refused, exactly.
func TestMaxKeysConcurrent(t *testing.T) {
	const (
		maxKeys    = 200
		goroutines = 4
		perG       = 1000
	)
	for _, sc := range five[:3] { // word and lock states
		t.Run(sc.name, func(t *testing.T) {
			st := openStore(t, memory.Config{Now: fixedNow(epoch0), MaxKeys: maxKeys})
			lim := openLimiter(t, st, single("p", sc.s))
			var wg sync.WaitGroup
			var refused atomic.Int64
			for g := range goroutines {
				wg.Go(func() {
					for i := range perG {
						d, err := lim.Check(bg, "p", fmt.Sprintf("g%d-%d", g, i), 1)
						if errors.Is(err, memory.ErrFull) {
							refused.Add(1)
							continue
						}
						if err != nil || !d.Allowed {
							t.Errorf("fresh key denied: %+v, %v", d, err)
							return
						}
					}
				})
			}
			wg.Wait()
			n := st.Len()
			if got := uint64(goroutines*perG - n); st.Refusals() != got || refused.Load() != int64(got) {
				t.Errorf("Refusals = %d, refused %d, want %d (inserted %d, Len %d)", st.Refusals(), refused.Load(), got, goroutines*perG, n)
			}
			// Concurrent inserts in different shards may pass the cap by one each.
			if bound := maxKeys + goroutines; n > bound || n < maxKeys {
				t.Errorf("Len = %d, want between %d and %d", n, maxKeys, bound)
			}
		})
	}
}

// TestClose: Close is idempotent, stops the store's goroutines, and every operation afterwards
// fails with ErrClosed without changing state.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	st := memory.New(memory.Config{SweepInterval: time.Millisecond}) // process clock: a check starts its ticker
	p := single("p", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10})
	lim := openLimiter(t, st, p)
	mustCheck(t, lim, bg, "p", "k", 1)
	if n := runtime.NumGoroutine(); n <= before {
		t.Errorf("NumGoroutine %d after New and a check, want more than %d", n, before)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines 2s after Close, %d before New:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}

	n := st.Len()
	out := make([]sluice.Decision, 1)
	ops := []struct {
		name string
		call func() error
	}{
		{"Store.Check", func() error { _, err := st.Check(bg, 0, p, "k", 1); return err }},
		{"Store.Check/now", func() error { _, err := st.Check(bg, epoch0, p, "new", 1); return err }},
		{"Store.CheckMany", func() error { return st.CheckMany(bg, 0, p, []string{"k"}, 1, out) }},
		{"Store.CheckAll", func() error {
			return storetest.CheckAll(bg, st, 0, []storetest.Op{{Policy: p, Key: "k", Cost: 1}}, out)
		}},
		{"Store.Peek", func() error { _, err := st.Peek(bg, 0, p, "k"); return err }},
		{"Store.Forecast", func() error { _, err := st.Forecast(bg, 0, p, "k", 1); return err }},
		{"Store.Refund", func() error { return st.Refund(bg, 0, p, "k", 1) }},
		{"Store.Reset", func() error { return st.Reset(bg, p, "k") }},
		{"Limiter.Check", func() error { _, err := lim.Check(bg, "p", "k", 1); return err }},
		{"Limiter.CheckMany", func() error { _, err := lim.CheckMany(bg, "p", []string{"a", "b"}, 1); return err }},
		{"Limiter.CheckAll", func() error { _, err := lim.CheckAll(bg, sluice.Item{Policy: "p", Key: "k", Cost: 1}); return err }},
		{"Limiter.Peek", func() error { _, err := lim.Peek(bg, "p", "k"); return err }},
		{"Limiter.Forecast", func() error { _, err := lim.Forecast(bg, "p", "k", 1); return err }},
		{"Limiter.Refund", func() error { return lim.Refund(bg, "p", "k", 1) }},
		{"Limiter.Reset", func() error { return lim.Reset(bg, "p", "k") }},
	}
	for _, op := range ops {
		if err := op.call(); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("%s after Close: err %v, want ErrClosed", op.name, err)
		}
	}
	wantLen(t, st, n, "after operations on a closed store")
	if runtime.NumGoroutine() > before {
		t.Errorf("operations after Close started goroutines: %d, was %d", runtime.NumGoroutine(), before)
	}
}

// TestCloseWithoutSweep: a store whose sweep is off and whose clock is given closes at once.
func TestCloseWithoutSweep(t *testing.T) {
	for _, cfg := range []memory.Config{{SweepInterval: -1}, {SweepInterval: -1, Now: fixedNow(epoch0)}, {Now: fixedNow(epoch0)}} {
		st := memory.New(cfg)
		done := make(chan struct{})
		go func() {
			st.Close()
			st.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("Close with %+v did not return", cfg)
		}
	}
}

// TestBackwardsClockIsHeld: a Config.Now that steps back is held at its latest instant, so a check
// then decides exactly as at that latest instant.
func TestBackwardsClockIsHeld(t *testing.T) {
	const latest = epoch0 + 10_000
	for _, sc := range five {
		t.Run(sc.name, func(t *testing.T) {
			p := single("p", sc.s)
			clk := newManualClock(latest)
			st := openStore(t, memory.Config{Now: clk.Now})
			ref := openStore(t, memory.Config{SweepInterval: -1}) // decides at explicit instants
			for i := range 4 {
				storeCheck(t, st, 0, p, "k", 1)
				storeCheck(t, ref, latest, p, "k", 1)
				_ = i
			}
			for _, back := range []int64{latest - 500, latest - 60_000, epoch0, 1} {
				clk.Set(back)
				got, want := storeCheck(t, st, 0, p, "k", 1), storeCheck(t, ref, latest, p, "k", 1)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("check with the clock stepped back to %d: %+v, want the decision at %d: %+v", back, got, latest, want)
				}
				got, want = storePeek(t, st, 0, p, "fresh"), storePeek(t, ref, latest, p, "fresh")
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("peek with the clock stepped back to %d: %+v, want %+v", back, got, want)
				}
			}
			// Forward again: decided at the new instant.
			clk.Set(latest + 3_600_000)
			got, want := storeCheck(t, st, 0, p, "k", 1), storeCheck(t, ref, latest+3_600_000, p, "k", 1)
			if !reflect.DeepEqual(got, want) || !got.Allowed {
				t.Fatalf("check with the clock forward again: %+v, want %+v", got, want)
			}
		})
	}
}

// TestDefaultClock: the process clock reads epoch milliseconds close to the wall clock and never
// decreases. The reading is observed as a fresh GCRA key's FullAt, which is the instant of the
// forecast.
func TestDefaultClock(t *testing.T) {
	st := openStore(t, memory.Config{})
	p := single("p", sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: 1000})
	var last int64
	var lags []int64
	for i := range 2000 {
		before := time.Now().UnixMilli()
		f, err := st.Forecast(bg, 0, p, "never-seen", 1)
		after := time.Now().UnixMilli()
		if err != nil {
			t.Fatal(err)
		}
		now := f.FullAt
		if now > after+1 {
			t.Fatalf("read %d: clock %d is ahead of the wall clock %d", i, now, after)
		}
		if now < last {
			t.Fatalf("read %d: clock went back from %d to %d", i, last, now)
		}
		last = now
		lags = append(lags, before-now)
		if i%200 == 0 {
			time.Sleep(time.Millisecond) // let the wall clock move between batches
		}
	}
	slices.Sort(lags)
	if median, worst := lags[len(lags)/2], lags[len(lags)-1]; median > 3 || worst > 100 {
		t.Errorf("clock lags the wall clock by %d ms (median), %d ms (worst); want a few ms", median, worst)
	}
	wantLen(t, st, 0, "after forecasts")
	// A check decides at the same clock.
	before := time.Now().UnixMilli()
	d := storeCheck(t, st, 0, p, "k", 1)
	if now := d.ResetAt - 1; now < before-100 || now > time.Now().UnixMilli()+1 || now < last {
		t.Errorf("check decided at %d; wall clock %d, previous reading %d", now, before, last)
	}
}

// TestCheckAllSameKeyTwice: the same (policy, key) twice in one CheckAll is decided in order, the
// second seeing the first's consumption, and both are put back when one is denied.
func TestCheckAllSameKeyTwice(t *testing.T) {
	for _, sc := range five {
		t.Run(sc.name, func(t *testing.T) {
			st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
			lim := openLimiter(t, st, single("p", sc.s), single("q", sc.s))
			d, err := lim.CheckAll(bg, sluice.Item{Policy: "p", Key: "k", Cost: 2}, sluice.Item{Policy: "p", Key: "k", Cost: 2})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || len(d.Parts) != 2 || d.Parts[0].Remaining != 3 || d.Parts[1].Remaining != 1 || d.Remaining != 1 {
				t.Fatalf("CheckAll(k 2, k 2) = %+v, want allowed with remaining 3 then 1", d)
			}
			// 1 + 1 fits the one unit left only once: denied, and both put back.
			d, err = lim.CheckAll(bg,
				sluice.Item{Policy: "q", Key: "k", Cost: 1},
				sluice.Item{Policy: "p", Key: "k", Cost: 1},
				sluice.Item{Policy: "p", Key: "k", Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			// Nothing was spent: the second reports the unit it would have taken as still there, q
			// all of its 5.
			if d.Allowed || d.DeniedBy != 2 || !d.Parts[0].Allowed || d.Parts[0].Remaining != 5 || !d.Parts[1].Allowed || d.Parts[1].Remaining != 1 || d.Parts[2].Allowed {
				t.Fatalf("CheckAll(q 1, p 1, p 1) = %+v, want the third denied after the second took the last unit, and the others as they stand", d)
			}
			if got := mustPeek(t, lim, bg, "p", "k"); got.Remaining != 1 {
				t.Errorf("p/k after the denied CheckAll: remaining %d, want 1 (restored)", got.Remaining)
			}
			if got := mustPeek(t, lim, bg, "q", "k"); got.Remaining != 5 {
				t.Errorf("q/k after the denied CheckAll: remaining %d, want 5 (restored)", got.Remaining)
			}
			if d := mustCheck(t, lim, bg, "p", "k", 1); !d.Allowed || d.Remaining != 0 {
				t.Errorf("the last unit: %+v, want allowed with remaining 0", d)
			}
			wantLen(t, st, 2, "at the end")
		})
	}
}

// TestCheckAllMixedStatesUnderConcurrency: CheckAll over a GCRA key (word state) and a token
// bucket key (lock state) races plain checks of the same keys; no update is lost and a denied
// CheckAll consumes nothing, whichever part denied it. On key "g-scarce" plain GCRA checks exhaust
// the GCRA part first (CheckAll denied by the word part, the bucket put back); on "tb-scarce" the
// bucket runs out first; on "both" everything races.
func TestCheckAllMixedStatesUnderConcurrency(t *testing.T) {
	const (
		capacity   = 300 // of both limits
		goroutines = 4
		iterations = 900
	)
	type kind int
	const (
		checkAll kind = iota
		checkG
		checkTB
	)
	keys := []struct {
		name  string
		kinds []kind
	}{
		{"g-scarce", []kind{checkAll, checkG}},
		{"tb-scarce", []kind{checkAll, checkTB}},
		{"both", []kind{checkAll, checkG, checkTB}},
	}
	st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
	lim := openLimiter(t, st,
		single("g", sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: capacity}),
		single("tb", sluice.TokenBucket{Capacity: capacity, RefillPerSec: 0.001}))
	admitted := make([][3]atomic.Int64, len(keys))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range iterations {
				k := i % len(keys)
				key := keys[k].name
				kd := keys[k].kinds[(i/len(keys)+g)%len(keys[k].kinds)]
				var d sluice.Decision
				var err error
				switch kd {
				case checkAll:
					d, err = lim.CheckAll(bg, sluice.Item{Policy: "g", Key: key, Cost: 1}, sluice.Item{Policy: "tb", Key: key, Cost: 1})
					if err == nil && d.Allowed != (d.Parts[0].Allowed && d.Parts[1].Allowed) {
						t.Errorf("CheckAll allowed %v with parts %+v", d.Allowed, d.Parts)
					}
				case checkG:
					d, err = lim.Check(bg, "g", key, 1)
				case checkTB:
					d, err = lim.Check(bg, "tb", key, 1)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k][kd].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for k, key := range keys {
		all, onlyG, onlyTB := admitted[k][checkAll].Load(), admitted[k][checkG].Load(), admitted[k][checkTB].Load()
		g, tb := mustPeek(t, lim, bg, "g", key.name), mustPeek(t, lim, bg, "tb", key.name)
		if spent := capacity - g.Remaining; spent != all+onlyG {
			t.Errorf("%s: GCRA spent %d, want %d CheckAll + %d checks", key.name, spent, all, onlyG)
		}
		if spent := capacity - tb.Remaining; spent != all+onlyTB {
			t.Errorf("%s: token bucket spent %d, want %d CheckAll + %d checks", key.name, spent, all, onlyTB)
		}
		if all == 0 {
			t.Errorf("%s: no CheckAll was admitted; the test did not race them", key.name)
		}
		t.Logf("%s: CheckAll admitted %d, GCRA checks %d, bucket checks %d; left %d and %d", key.name, all, onlyG, onlyTB, g.Remaining, tb.Remaining)
	}
	if g := mustPeek(t, lim, bg, "g", "g-scarce"); g.Remaining != 0 {
		t.Errorf("g-scarce: GCRA not exhausted: %+v", g)
	}
	if tb := mustPeek(t, lim, bg, "tb", "tb-scarce"); tb.Remaining != 0 {
		t.Errorf("tb-scarce: bucket not exhausted: %+v", tb)
	}
}

// TestCompositeNewKeysDuringGrowth: composite checks and CheckAlls on brand-new keys, whose
// insertion keeps rebuilding the tables, decide like fresh keys and consume from every limit.
func TestCompositeNewKeysDuringGrowth(t *testing.T) {
	for _, sweeping := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweeping=%v", sweeping), func(t *testing.T) { testCompositeNewKeysDuringGrowth(t, sweeping) })
	}
}

func testCompositeNewKeysDuringGrowth(t *testing.T, sweeping bool) {
	t.Helper()
	st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	if sweeping {
		sweeper.Go(func() {
			for {
				st.Sweep()
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	comp := sluice.MustPolicy("comp",
		sluice.Limit{Name: "g", Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}},
		sluice.Limit{Name: "tb", Strategy: sluice.TokenBucket{Capacity: 20, RefillPerSec: 1}},
		sluice.Limit{Name: "sw", Strategy: sluice.SlidingWindow{Limit: 30, WindowMs: 60_000, Buckets: 3}, Unit: sluice.UnitRequest})
	lim := openLimiter(t, st, comp, single("fw", sluice.FixedWindow{Limit: 4, WindowMs: 60_000}))
	const goroutines, perG = 4, 600
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				key := fmt.Sprintf("c%d-%d", g, i)
				var d sluice.Decision
				var err error
				if i%2 == 0 {
					d, err = lim.Check(bg, "comp", key, 3)
				} else {
					d, err = lim.CheckAll(bg, sluice.Item{Policy: "comp", Key: key, Cost: 3}, sluice.Item{Policy: "fw", Key: key, Cost: 1})
					if err == nil {
						d = d.Parts[0]
					}
				}
				if err != nil || !d.Allowed || len(d.Parts) != 3 || d.Parts[0].Remaining != 7 || d.Parts[1].Remaining != 17 || d.Parts[2].Remaining != 29 {
					t.Errorf("first check of %s: %+v, %v; want remaining 7, 17, 29", key, d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeper.Wait()
	for g := range goroutines {
		for i := range perG {
			key := fmt.Sprintf("c%d-%d", g, i)
			if d := mustPeek(t, lim, bg, "comp", key); d.Parts[0].Remaining != 7 || d.Parts[1].Remaining != 17 || d.Parts[2].Remaining != 29 {
				t.Fatalf("Peek(%s) = %+v, want remaining 7, 17, 29", key, d.Parts)
			}
		}
	}
	wantLen(t, st, goroutines*perG*3+goroutines*perG/2, "after the composite checks")
}

// TestAbsentKeyOperationsCreateNoKey: Peek, Forecast, Refund and Reset of a key never seen change
// nothing: no key appears and a later check decides like a fresh key.
func TestAbsentKeyOperationsCreateNoKey(t *testing.T) {
	composite := namedStrategy{"composite", nil}
	ops := []struct {
		name string
		do   func(st *memory.Store, p *sluice.Policy, key string) error
	}{
		{"Peek", func(st *memory.Store, p *sluice.Policy, key string) error {
			_, err := st.Peek(bg, 0, p, key)
			return err
		}},
		{"Forecast", func(st *memory.Store, p *sluice.Policy, key string) error {
			_, err := st.Forecast(bg, 0, p, key, 1)
			return err
		}},
		{"Refund", func(st *memory.Store, p *sluice.Policy, key string) error { return st.Refund(bg, 0, p, key, 1) }},
		{"Reset", func(st *memory.Store, p *sluice.Policy, key string) error { return st.Reset(bg, p, key) }},
	}
	for _, sc := range append(slices.Clone(five), composite) {
		for _, op := range ops {
			t.Run(sc.name+"/"+op.name, func(t *testing.T) {
				p := sluice.MustPolicy("p",
					sluice.Limit{Strategy: sluice.GCRA{Limit: 5, PeriodMs: 60_000, Burst: 5}},
					sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 5, WindowMs: 60_000}, Unit: sluice.UnitRequest})
				if sc.s != nil {
					p = single("p", sc.s)
				}
				st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
				storeCheck(t, st, 0, p, "present", 2)
				n := st.Len()
				for range 3 {
					if err := op.do(st, p, "absent"); err != nil {
						t.Fatal(err)
					}
				}
				wantLen(t, st, n, op.name+" of an absent key")
				if d := storeCheck(t, st, 0, p, "absent", 1); !d.Allowed || d.Remaining != 4 {
					t.Errorf("check after %s: %+v, want a fresh key's remaining 4", op.name, d)
				}
				if d := storePeek(t, st, 0, p, "present"); d.Remaining != 3 {
					t.Errorf("the other key after %s: remaining %d, want 3", op.name, d.Remaining)
				}
			})
		}
	}
}

// TestReload: a policy Equal to the one held (a new pointer, as from reloaded config) shares its
// keys; a changed policy of the same name and strategy keeps each key's state and reads it under its
// own numbers, as do checks still holding the old policy; the state goes once its keys are idle.
func TestReload(t *testing.T) {
	clk := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clk.Now})
	v1 := single("api", sluice.FixedWindow{Limit: 5, WindowMs: 1000})
	v1again := single("api", sluice.FixedWindow{Limit: 5, WindowMs: 1000})
	v2 := single("api", sluice.FixedWindow{Limit: 8, WindowMs: 1000})
	if v1 == v1again || !v1.Equal(v1again) || v1.Equal(v2) {
		t.Fatal("test policies are not what they should be")
	}
	lim := openLimiter(t, st, v1)
	mustCheck(t, lim, bg, "api", "k", 3)

	// Reloaded unchanged: state and counts carry over, at the store and at the limiter.
	if d := storeCheck(t, st, 0, v1again, "k", 1); d.Remaining != 1 {
		t.Fatalf("store check with an Equal policy: remaining %d, want 1 (shared state)", d.Remaining)
	}
	if err := lim.SetPolicies(v1again); err != nil {
		t.Fatal(err)
	}
	if d := mustCheck(t, lim, bg, "api", "k", 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("limiter check after an unchanged reload: %+v, want remaining 0", d)
	}
	if s, _ := lim.Stats("api"); s.Allowed != 2 {
		t.Errorf("stats after an unchanged reload: %+v, want 2 allowed", s)
	}
	wantLen(t, st, 1, "after an unchanged reload")

	// Changed: the key's window carries over, read under the new limit; the old pointer reads the
	// same state under the old limit.
	if err := lim.SetPolicies(v2); err != nil {
		t.Fatal(err)
	}
	if d := mustCheck(t, lim, bg, "api", "k", 1); !d.Allowed || d.Remaining != 2 || d.Limit != 8 {
		t.Fatalf("check after a changed reload: %+v, want 6 of 8 spent, remaining 2", d)
	}
	if d := storeCheck(t, st, 0, v1, "k", 1); d.Allowed || d.Remaining != 0 || d.Limit != 5 {
		t.Fatalf("check holding the old policy: %+v, want 6 spent of its 5: denied", d)
	}
	if d := storeCheck(t, st, 0, v1again, "k", 1); d.Allowed {
		t.Fatalf("check holding the old (reloaded) policy: %+v, want denied", d)
	}
	wantLen(t, st, 1, "one key, whichever definition checks it")
	st.Sweep()
	wantLen(t, st, 1, "after a Sweep while the key is busy")

	// Idle: the sweep drops it.
	clk.Set(epoch0 + 1000)
	st.Sweep()
	wantLen(t, st, 0, "after a Sweep once the key is idle")
	if d := mustCheck(t, lim, bg, "api", "k", 1); d.Remaining != 7 {
		t.Errorf("new policy after the sweep: %+v, want remaining 7", d)
	}
	if d := storeCheck(t, st, 0, v1, "k", 1); !d.Allowed || d.Remaining != 3 {
		t.Errorf("old policy after the sweep: %+v, want 2 of 5 spent", d)
	}
	wantLen(t, st, 1, "at the end")
}

// TestCheckDoesNotAllocate: a Limiter.Check of an existing key allocates nothing.
func TestCheckDoesNotAllocate(t *testing.T) {
	for _, sc := range []namedStrategy{
		{"gcra", sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}},
		{"tokenBucket", sluice.TokenBucket{Capacity: 1e9, RefillPerSec: 1e6}},
		{"fixedWindow", sluice.FixedWindow{Limit: 1e12, WindowMs: 1000}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			for _, cfg := range []memory.Config{{Now: fixedNow(epoch0)}, {}} {
				st := openStore(t, cfg)
				lim := openLimiter(t, st, single("p", sc.s))
				mustCheck(t, lim, bg, "p", "existing", 1)
				if n := testing.AllocsPerRun(200, func() { _, _ = lim.Check(bg, "p", "existing", 1) }); n != 0 {
					t.Errorf("Check with Now set %v allocates %v times per run", cfg.Now != nil, n)
				}
			}
		})
	}
}

// TestResetDoesNotStallSweep: Reset passes no instant, so it must not pin the instant the sweep
// judges idleness at. (Reset calls begin(1), which records 1 as "the latest instant passed" on a
// store that was never given one; Sweep then judges every key at epoch ms 1 and keeps them all.)
func TestResetDoesNotStallSweep(t *testing.T) {
	clk := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clk.Now})
	p := single("p", sluice.FixedWindow{Limit: 3, WindowMs: 1000})
	lim := openLimiter(t, st, p)
	mustCheck(t, lim, bg, "p", "a", 1)
	if err := lim.Reset(bg, "p", "someone-else"); err != nil {
		t.Fatal(err)
	}
	clk.Set(epoch0 + 60_000)
	st.Sweep()
	wantLen(t, st, 0, "Sweep a minute after the only check, once a Reset happened")
}

// TestCheckManyDoesNotStallSweep: CheckMany on the store's own clock must not pin the sweep to
// the instant of that call. (CheckMany resolves now = 0 to the clock, then calls Check with that
// instant, which records it as an instant given by the caller; Sweep then judges idleness at
// min(clock, that instant) forever after.)
func TestCheckManyDoesNotStallSweep(t *testing.T) {
	clk := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clk.Now})
	lim := openLimiter(t, st, single("p", sluice.FixedWindow{Limit: 3, WindowMs: 1000}))
	if _, err := lim.CheckMany(bg, "p", []string{"x", "y"}, 1); err != nil {
		t.Fatal(err)
	}
	clk.Set(epoch0 + 10_000)
	mustCheck(t, lim, bg, "p", "a", 1)
	clk.Set(epoch0 + 20_000)
	st.Sweep()
	wantLen(t, st, 0, "Sweep 10 s after the last check, once a CheckMany happened")
}

// TestPeekDuringChecksReadsAStableState: Peek and Forecast of a key read its state while checks of the
// same key change it; they must read a consistent state (run under -race). A peek at one fixed
// instant while only checks run must see remaining never grow.
func TestPeekDuringChecksReadsAStableState(t *testing.T) {
	for _, sc := range []namedStrategy{
		{"slidingWindow", sluice.SlidingWindow{Limit: 4000, WindowMs: 60_000, Buckets: 10}},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 4000, WindowMs: 60_000}},
		{"fixedWindow", sluice.FixedWindow{Limit: 4000, WindowMs: 60_000}},
		{"gcra", sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 4000}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
			lim := openLimiter(t, st, single("p", sc.s))
			mustCheck(t, lim, bg, "p", "k", 1)
			start := make(chan struct{})
			var checked atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				defer checked.Store(true)
				<-start
				for range 2000 {
					if _, err := lim.Check(bg, "p", "k", 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				<-start
				last := int64(4000)
				for !checked.Load() {
					d, err := lim.Peek(bg, "p", "k")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Remaining > last || d.Remaining < 0 {
						t.Errorf("Peek remaining went from %d to %d", last, d.Remaining)
						return
					}
					last = d.Remaining
					if _, err := lim.Forecast(bg, "p", "k", 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
			close(start)
			wg.Wait()
			if d := mustPeek(t, lim, bg, "p", "k"); d.Remaining != 4000-2001 {
				t.Errorf("remaining %d after 2001 checks, want %d", d.Remaining, 4000-2001)
			}
		})
	}
}

// onlyStore hides every method of a Store but those of sluice.Store, so that a Limiter over it
// takes the path of stores that do not decide in Verdicts.
type onlyStore struct{ sluice.Store }

// TestVerdictPathDecidesAsCheck: a Limiter over the memory store decides a policy of one limit
// through CheckVerdict; twin stores, one seen only as a sluice.Store, decide every step of a run
// (admitted, denied, a new window, a refill) alike, and count alike. CheckVerdict of a composite
// policy reports its binding limit's verdict.
func TestVerdictPathDecidesAsCheck(t *testing.T) {
	steps := []struct {
		at   int64
		cost int64
	}{{0, 1}, {0, 3}, {0, 1}, {0, 1}, {0, 2}, {1, 1}, {999, 1}, {12_000, 1}, {30_000, 5}, {60_000, 1}, {61_000, 3}}
	for _, sc := range five {
		t.Run(sc.name, func(t *testing.T) {
			clk := newManualClock(epoch0)
			fast := openLimiter(t, openStore(t, memory.Config{Now: clk.Now}), single("p", sc.s))
			slow := openLimiter(t, onlyStore{openStore(t, memory.Config{Now: clk.Now})}, single("p", sc.s))
			for i, st := range steps {
				clk.Set(epoch0 + st.at)
				got, want := mustCheck(t, fast, bg, "p", "k", st.cost), mustCheck(t, slow, bg, "p", "k", st.cost)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d (+%d ms, cost %d): %+v, want %+v", i, st.at, st.cost, got, want)
				}
			}
			got, _ := fast.Stats("p")
			if want, _ := slow.Stats("p"); got != want || got.Denied == 0 {
				t.Errorf("stats %+v, want %+v with denials", got, want)
			}
		})
	}
	t.Run("composite", func(t *testing.T) {
		p := sluice.MustPolicy("c",
			sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}},
			sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}})
		st, twin := openStore(t, memory.Config{}), openStore(t, memory.Config{})
		for i := range 5 {
			v, err := st.CheckVerdict(bg, epoch0, p, "k", 2)
			if err != nil {
				t.Fatal(err)
			}
			d := storeCheck(t, twin, epoch0, p, "k", 2)
			if v != (sluice.Verdict{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfterMs}) {
				t.Fatalf("check %d: verdict %+v, decision %+v", i, v, d)
			}
		}
	})
}

// TestRequestUnitSingleLimit: a policy whose one limit counts requests spends 1 a check whatever
// the cost, through every way of checking it.
func TestRequestUnitSingleLimit(t *testing.T) {
	p := sluice.MustPolicy("rpm", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 60_000}, Unit: sluice.UnitRequest})
	st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
	lim := openLimiter(t, st, p)
	if d := mustCheck(t, lim, bg, "rpm", "k", 5); d.Remaining != 9 {
		t.Errorf("Limiter.Check of cost 5: remaining %d, want 9", d.Remaining)
	}
	if d := storeCheck(t, st, 0, p, "k", 500); d.Remaining != 8 {
		t.Errorf("Store.Check of cost 500: remaining %d, want 8", d.Remaining)
	}
	ds, err := lim.CheckMany(bg, "rpm", []string{"k", "other"}, 7)
	if err != nil || ds[0].Remaining != 7 || ds[1].Remaining != 9 {
		t.Errorf("CheckMany of cost 7: %+v, %v; want 7 and 9 remaining", ds, err)
	}
}

// TestLongKeysInsertedConcurrently: checks of long keys (kept out of line) while others insert
// new ones; under -race this caught lookups reading the long-key slice while an insert grew it.
func TestLongKeysInsertedConcurrently(t *testing.T) {
	st := memory.New(memory.Config{})
	defer st.Close()
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1_000_000, WindowMs: 3_600_000}})
	const workers, keys = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range keys {
				// Each worker inserts its own keys and looks up the others' as they appear.
				for _, k := range []string{fmt.Sprintf("a-long-key-of-more-than-sixteen-bytes:%d:%d", w, i), fmt.Sprintf("a-long-key-of-more-than-sixteen-bytes:%d:%d", (w+1)%workers, i)} {
					if d, err := st.Check(context.Background(), 0, p, k, 1); err != nil || !d.Allowed {
						t.Errorf("%s: %+v, %v", k, d, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
