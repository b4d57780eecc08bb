package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

var strategies = []sluice.Strategy{
	sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e9},
	sluice.TokenBucket{Capacity: 1e9, RefillPerSec: 1e9},
	sluice.FixedWindow{Limit: 1e15, WindowMs: 1000},
	sluice.SlidingWindow{Limit: 1e15, WindowMs: 1000, Buckets: 10},
	sluice.SlidingWindowLog{Limit: 1e9, WindowMs: 10},
}

func benchLimiter(b *testing.B, s sluice.Strategy) *sluice.Limiter {
	b.Helper()
	st := memory.New(memory.Config{})
	b.Cleanup(func() { st.Close() })
	lim, err := sluice.New(st, sluice.MustPolicy("p", sluice.Limit{Strategy: s}))
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

func BenchmarkCheckHotKey(b *testing.B) {
	for _, s := range strategies {
		b.Run(s.Kind(), func(b *testing.B) {
			lim := benchLimiter(b, s)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lim.Check(ctx, "p", "hot-key", 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func BenchmarkCheckManyKeys(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	lim := benchLimiter(b, strategies[0])
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i = (i + 7919) & (len(keys) - 1)
			if _, err := lim.Check(ctx, "p", keys[i], 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkConcurrencyAdmitRelease is one Admit and one Release of a hot key per operation, each
// goroutine a holder of its own, under a limit none of them reaches: the cost of taking and
// giving back a slot.
func BenchmarkConcurrencyAdmitRelease(b *testing.B) {
	st := memory.New(memory.Config{})
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		holder := "worker-" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			a, err := st.Admit(ctx, 0, "jobs", "hot-key", holder, 1<<20, 30_000)
			if err != nil || !a.Allowed {
				b.Fatal(a, err)
			}
			if err := st.Release(ctx, "jobs", "hot-key", holder); err != nil {
				b.Fatal(err)
			}
		}
	})
}
