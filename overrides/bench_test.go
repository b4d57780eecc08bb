package overrides_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridestest"
	"github.com/sluicehq/sluice/store/memory"
)

// benchTable is an in-memory Table holding n overrides of policy (keys "o-0" to "o-<n-1>",
// alternately plan pro and limits of their own).
func benchTable(b *testing.B, policy string, n int) *overrides.Table {
	b.Helper()
	tb, err := overrides.New(overrides.Config{Resolve: overridestest.Plans.Resolve})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tb.Close)
	ctx := context.Background()
	own := []overrides.Limit{{Strategy: "gcra", Limit: 20, PeriodMs: 1000, Burst: 20}}
	for i := range n {
		o := overrides.Override{Policy: policy, Key: fmt.Sprintf("o-%d", i), Plan: "pro"}
		if i%2 == 1 || policy != "api" {
			o.Plan, o.Limits = "", own
		}
		if err := tb.Set(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	return tb
}

// keys are the keys a benchmark goroutine checks in turn: keys without an override, or those
// with one.
func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// BenchmarkPolicy is the hot path's lookup, on a policy with no overrides (in a table holding 100k
// of another policy) and on one with 100k: keys without an override (most checks), and keys with
// one.
func BenchmarkPolicy(b *testing.B) {
	now := time.Now().UnixMilli()
	other, full := benchTable(b, "other", 100_000), benchTable(b, "api", 100_000)
	for _, bc := range []struct {
		name string
		tb   *overrides.Table
		n    int
		keys []string
	}{
		{"overrides=0", other, 0, keys("user", 4096)},
		{"overrides=100k/miss", full, 100_000, keys("user", 4096)},
		{"overrides=100k/hit", full, 100_000, keys("o", 4096)},
	} {
		tb := bc.tb
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var found atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i, n := 0, int64(0)
				for pb.Next() {
					if p, _ := tb.Policy("api", bc.keys[i&4095], now); p != nil {
						n++
					}
					i++
				}
				found.Add(n)
			})
			if want := bc.n > 0 && bc.keys[0] == "o-0"; (found.Load() > 0) != want {
				b.Fatalf("found %d overrides", found.Load())
			}
		})
	}
}

// BenchmarkCheck is a Check of the memory store through a sluice.Limiter, without a resolver and
// with a Table as its resolver (SetResolver), as sluice serve runs it: on a policy with no
// overrides (in a table holding 100k of another policy), on one with 100k (keys without one), and
// keys with one (decided under the override's policy). The first three are the lookup's share of
// a check.
func BenchmarkCheck(b *testing.B) {
	big := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	empty, full := benchTable(b, "other", 100_000), benchTable(b, "api", 100_000)
	for _, bc := range []struct {
		name  string
		table *overrides.Table // nil: no resolver
		keys  []string
	}{
		{"limiter", nil, keys("user", 4096)},
		{"resolver/overrides=0", empty, keys("user", 4096)},
		{"resolver/overrides=100k", full, keys("user", 4096)},
		{"resolver/overrides=100k/hit", full, keys("o", 4096)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := memory.New(memory.Config{})
			defer store.Close()
			lim, err := sluice.New(store, big)
			if err != nil {
				b.Fatal(err)
			}
			if bc.table != nil {
				lim.SetResolver(bc.table)
			}
			ctx := context.Background()
			var goroutines atomic.Int64
			// The tables' garbage is collected now, not during the first cases.
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine starts at keys of its own: in step, they would contend for each
				// key's state, and measure that.
				i := int(goroutines.Add(1)) * 1031
				for pb.Next() {
					if _, err := lim.Check(ctx, "api", bc.keys[i&4095], 1); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkSet is a Set of a table in memory holding 100k overrides of the policy: the copy of
// the shard it changes.
func BenchmarkSet(b *testing.B) {
	tb := benchTable(b, "api", 100_000)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: fmt.Sprintf("o-%d", i%100_000), Plan: "free"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReload is a reload of a table in memory holding 100k overrides of a policy, half of
// them custom limits: the copy made again, every plan resolved again (a backend adds its Load).
func BenchmarkReload(b *testing.B) {
	tb := benchTable(b, "api", 100_000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := tb.Reload(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
