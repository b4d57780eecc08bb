package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// BenchmarkWaitReplicas measures what wait_replicas=1 costs: GCRA checks on 10k keys against a
// local master and its replica, without WAIT and with it, side by side in one run, each check
// with a 100 ms deadline (the Redis store's default storeTimeout). 64 callers is
// SetParallelism(32) on -cpu 2. On a shared machine, alternate rounds and compare within each:
//
//	go test -c -o /tmp/redis.test ./store/redis/ && for i in 1 2 3; do
//	  /tmp/redis.test -test.run '^$' -test.bench WaitReplicas -test.benchtime 2s -test.cpu 2; done
func BenchmarkWaitReplicas(b *testing.B) {
	m := redistest.StartServer(b)
	redistest.StartReplica(b, m)
	p := sluice.MustPolicy("bench-wait", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	for _, callers := range []int{1, 64} {
		for _, mode := range []struct{ name, query string }{
			{"async", ""},
			{"wait1", "?wait_replicas=1&wait_timeout=10ms"},
		} {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, mode.name), func(b *testing.B) {
				s, err := redisstore.Open(m.URL() + mode.query)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var next, failed atomic.Int64
				check := func() {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					defer cancel()
					k := keys[next.Add(1)%int64(len(keys))]
					if d, err := s.Check(ctx, 0, p, k, 1); err != nil || !d.Allowed {
						failed.Add(1)
					}
				}
				// Load the scripts and open the connections before the clock starts.
				var warm sync.WaitGroup
				for range callers {
					warm.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						if _, err := s.Check(ctx, 0, p, "warm", 1); err != nil {
							b.Error(err)
						}
					})
				}
				warm.Wait()
				b.ResetTimer()
				if callers == 1 {
					for b.Loop() {
						check()
					}
				} else {
					b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							check()
						}
					})
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
				b.ReportMetric(float64(s.Unreplicated())/float64(b.N), "unreplicated/op")
				// A check may time out on a busy machine; more than one in a hundred is a fault.
				b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
				if n := failed.Load(); n > int64(b.N/100) {
					b.Errorf("%d of %d checks failed or were denied", n, b.N)
				}
			})
		}
	}
}
