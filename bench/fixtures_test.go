package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

var ctx = context.Background()

// numKeys is the key count of the many-keys and state-per-key benchmarks.
const numKeys = 1 << 20

// keyLen is the length of every key of the many-keys and state-per-key benchmarks: "user:" and an
// 11-digit number. 16 bytes is a size class of its own, so a copy of a key costs exactly 16 bytes
// of heap (no rounding, and too big for the tiny allocator, which packs objects under 16 bytes).
const keyLen = 16

var (
	keysOnce sync.Once
	keys     []string
)

// manyKeys returns numKeys distinct keys of keyLen bytes, "user:00000000000" on, built once per
// process: the keys each store is filled with before the timer starts.
func manyKeys() []string {
	keysOnce.Do(func() {
		keys = make([]string, numKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:%011d", i)
			if len(keys[i]) != keyLen {
				panic("bad key length")
			}
		}
	})
	return keys
}

// strategyCase names one sluice strategy under test.
type strategyCase struct {
	name     string
	strategy sluice.Strategy
}

// hotStrategies are the policies of the hot-key benchmarks: generous enough that a single key
// checked tens of millions of times a second is admitted throughout a run, so every peer takes its
// "allowed" path (allowed/op reports it). GCRA's emission interval may not be under 0.001 ms (a
// million a second), so its headroom is a burst of 1e9 cells instead: at 10M checks a second the
// TAT gains 9 s a second, and a run lasts about a second before a fresh limiter is made.
var hotStrategies = []strategyCase{
	{"gcra", sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e9}},
	{"tokenbucket", sluice.TokenBucket{Capacity: 1e15, RefillPerSec: 1e9}},
	{"fixedwindow", sluice.FixedWindow{Limit: 1e15, WindowMs: 3_600_000}},
}

// sluiceCalls name the two ways the hot-key benchmarks check with a sluice Limiter, as suffixes of
// the sub-benchmark's name: "" is Check, which returns the whole Decision; "-verdict" is
// CheckVerdict, which returns what go-limiter's Take returns (whether admitted, what remains, when
// it resets) and, at four words, travels in registers where the Decision goes through memory.
var sluiceCalls = []string{"", "-verdict"}

// hotChecks checks the hot key b.N times with the call named by call, and returns how many were
// admitted.
func hotChecks(b *testing.B, lim *sluice.Limiter, call string) (allowed int64) {
	if call == "-verdict" {
		for range b.N {
			v, err := lim.CheckVerdict(ctx, "p", "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if v.Allowed {
				allowed++
			}
		}
		return allowed
	}
	for range b.N {
		d, err := lim.Check(ctx, "p", "hot", 1)
		if err != nil {
			b.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

// hotChecksParallel is hotChecks for one goroutine of RunParallel.
func hotChecksParallel(b *testing.B, lim *sluice.Limiter, call string, pb *testing.PB) (allowed int64) {
	if call == "-verdict" {
		for pb.Next() {
			v, err := lim.CheckVerdict(ctx, "p", "hot", 1)
			if err != nil {
				b.Error(err)
				return allowed
			}
			if v.Allowed {
				allowed++
			}
		}
		return allowed
	}
	for pb.Next() {
		d, err := lim.Check(ctx, "p", "hot", 1)
		if err != nil {
			b.Error(err)
			return allowed
		}
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

// keyStrategies are the policies of the many-keys and state-per-key benchmarks: an ordinary
// per-user limit of 1000 a second. With 1M keys each key is checked a few dozen times a second at
// most, so nearly every check is admitted.
var keyStrategies = []strategyCase{
	{"gcra", sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: 1000}},
	{"tokenbucket", sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000}},
	{"fixedwindow", sluice.FixedWindow{Limit: 60_000, WindowMs: 60_000}},
}

// newSluice returns a limiter holding one policy "p" of strategy s over a fresh memory store.
func newSluice(tb testing.TB, s sluice.Strategy, cfg memory.Config) (*sluice.Limiter, *memory.Store) {
	tb.Helper()
	st := memory.New(cfg)
	lim, err := sluice.New(st, sluice.MustPolicy("p", sluice.Limit{Strategy: s}))
	if err != nil {
		tb.Fatal(err)
	}
	return lim, st
}

// newHotRate is x/time/rate's limiter for the hot key: 1e9 events a second, burst 1e9.
func newHotRate() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e9), 1e9) }

// newKeyRate is x/time/rate's limiter for one of many keys: 1000 a second, burst 1000.
func newKeyRate() *rate.Limiter { return rate.NewLimiter(rate.Limit(1000), 1000) }

// newGoLimiter returns go-limiter's memorystore with so many tokens per interval, and an interval
// so long, that no check in a benchmark run is denied. (memorystore refills at interval boundaries
// only, to interval/tokens tokens per elapsed tick, so a short interval with many tokens would deny
// nearly everything after the first tick; its default sweep, every 6 hours, never runs here.)
func newGoLimiter(tb testing.TB) limiter.Store {
	tb.Helper()
	st, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: 24 * time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// rateMap is how x/time/rate is used for many keys: a map of limiters guarded by one mutex, each
// created on first use.
type rateMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newRateMap() *rateMap { return &rateMap{m: make(map[string]*rate.Limiter)} }

func (r *rateMap) allow(key string) bool {
	r.mu.Lock()
	l, ok := r.m[key]
	if !ok {
		l = newKeyRate()
		r.m[key] = l
	}
	r.mu.Unlock()
	return l.Allow()
}

// reportAllowed reports the share of checks that were admitted: a benchmark whose fixture denies
// is measuring a different path.
func reportAllowed(b *testing.B, allowed int64) {
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}
