package lease_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
)

// BenchmarkLeasedHotKey measures a check of one hot key answered from its lease, over the memory
// store and over Redis (skipped when there is none), with one goroutine and with RunParallel. The
// policy never runs dry, so every lease is granted at full size. Through a counting wrapper,
// storeCalls/op counts every call that reached the store (lease checks, from the checks or taken
// ahead by the Leaser's goroutine, and refunds). cpu-ns/op is the process's CPU time per check,
// which other work on the machine does not inflate the way it inflates ns/op.
//
//	go test -run '^$' -bench LeasedHotKey -benchtime 1s -count 3 -cpu 1,2 ./lease/
func BenchmarkLeasedHotKey(b *testing.B) {
	p := sluice.MustPolicy("hot", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e15, RefillPerSec: 1e12}})
	stores := []struct {
		name string
		open func(b *testing.B) sluice.Store
	}{
		{"memory", func(b *testing.B) sluice.Store { return newMemory(b, nil) }},
		{"redis", func(b *testing.B) sluice.Store { return newRedis(b) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store := &counting{Store: st.open(b)}
			lim, err := sluice.New(store, p)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			run := func(b *testing.B, loop func(l *lease.Leaser)) {
				l := lease.New(lim, lease.Config{})
				// Warm up: the key's rate grows its leases to MaxLease.
				for range 1_000_000 {
					if _, err := l.Check(ctx, "hot", "tenant-42", 1); err != nil {
						b.Fatal(err)
					}
				}
				before, cpu := store.calls(), cpuTime()
				b.ReportAllocs()
				b.ResetTimer()
				loop(l)
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(store.calls()-before)/float64(b.N), "storeCalls/op")
				if err := l.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("serial", func(b *testing.B) {
				run(b, func(l *lease.Leaser) {
					for range b.N {
						if d, err := l.Check(ctx, "hot", "tenant-42", 1); err != nil || !d.Allowed {
							b.Fatalf("Check = %+v, %v", d, err)
						}
					}
				})
			})
			b.Run("parallel", func(b *testing.B) {
				run(b, func(l *lease.Leaser) {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if d, err := l.Check(ctx, "hot", "tenant-42", 1); err != nil || !d.Allowed {
								b.Errorf("Check = %+v, %v", d, err)
								return
							}
						}
					})
				})
			})
		})
	}
}

// cpuTime is the CPU time this process has used, in ns: on a machine shared with other work, the
// wall time of ns/op includes the time the benchmark waited for a core, and this does not.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
