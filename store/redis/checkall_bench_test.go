package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// redisCPU reads the CPU time, user and system, that the Redis behind c has used.
func redisCPU(b *testing.B, c rueidis.Client) time.Duration {
	b.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				sec += x
			}
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// benchCalls runs call b.N times, from one goroutine for 1 caller and from callers goroutines
// otherwise (SetParallelism on GOMAXPROCS), each with a 100 ms deadline, after a first call from
// each caller to load the scripts and open the connections. It reports Redis's CPU per call and the
// share of calls that failed (call returned false), and fails the benchmark above one in a hundred.
func benchCalls(b *testing.B, c rueidis.Client, callers int, call func(ctx context.Context) bool) {
	b.Helper()
	var failed atomic.Int64
	one := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if !call(ctx) {
			failed.Add(1)
		}
	}
	var warm sync.WaitGroup
	for range callers {
		warm.Go(one)
	}
	warm.Wait()
	failed.Store(0)
	cpu := redisCPU(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for b.Loop() {
			one()
		}
	} else {
		b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64((redisCPU(b, c)-cpu).Microseconds())/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	if n := failed.Load(); n > int64(b.N/100) {
		b.Errorf("%d of %d calls failed or were denied", n, b.N)
	}
}

// BenchmarkCheckAll measures Limiter.CheckAll of one and of two items on a Redis of its own, with
// batching off (every call one script run of its own, as CheckAll always ran) and on, side by
// side in one run: the time per call and the Redis CPU per call. 64 callers is SetParallelism(32)
// on -cpu 2. On a shared machine, alternate rounds and compare within each:
//
//	go test -c -o /tmp/redis.test ./store/redis/ && for i in 1 2 3; do
//	  /tmp/redis.test -test.run '^$' -test.bench CheckAll -test.benchtime 2s -test.cpu 2; done
func BenchmarkCheckAll(b *testing.B) {
	srv := redistest.StartServer(b)
	p := sluice.MustPolicy("bench-all", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	for _, items := range []int{1, 2} {
		for _, callers := range []int{1, 64} {
			for _, mode := range []struct {
				name string
				cfg  redisstore.Config
			}{
				{"unbatched", redisstore.Config{BatchSize: 1}},
				{"batched", redisstore.Config{}},
			} {
				b.Run(fmt.Sprintf("items=%d/callers=%d/%s", items, callers, mode.name), func(b *testing.B) {
					opt, err := redisstore.ParseURL(srv.URL())
					if err != nil {
						b.Fatal(err)
					}
					c, err := rueidis.NewClient(opt)
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					s := redisstore.New(c, mode.cfg)
					defer s.Close()
					lim, err := sluice.New(s, p)
					if err != nil {
						b.Fatal(err)
					}
					var next atomic.Int64
					benchCalls(b, c, callers, func(ctx context.Context) bool {
						k := next.Add(1)
						its := make([]sluice.Item, items)
						for i := range its {
							its[i] = sluice.Item{Policy: p.Name(), Key: keys[(k+int64(i))%int64(len(keys))], Cost: 1}
						}
						d, err := lim.CheckAll(ctx, its...)
						return err == nil && d.Allowed
					})
				})
			}
		}
	}
}

// BenchmarkRunSize measures what a script run costs Redis as the checks it decides grow: one
// CheckMany of k keys of a fixed window, unbatched, from one caller, is one run of the batch script
// deciding k checks, as a batch of k concurrent Checks is. Redis's CPU per check is about
// start/k + decide, where start is the cost of a run and decide that of a check:
//
//	go test -run '^$' -bench RunSize -benchtime 20000x ./store/redis/
func BenchmarkRunSize(b *testing.B) {
	srv := redistest.StartServer(b)
	p := sluice.MustPolicy("bench-run", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1e9, WindowMs: 3_600_000}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	for _, k := range []int{1, 6, 12, 32} {
		b.Run(fmt.Sprintf("checks=%d", k), func(b *testing.B) {
			opt, err := redisstore.ParseURL(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s := redisstore.New(c, redisstore.Config{BatchSize: 1})
			out := make([]sluice.Decision, k)
			next := 0
			run := func() {
				batch := make([]string, k)
				for i := range batch {
					batch[i] = keys[next%len(keys)]
					next++
				}
				if err := s.CheckMany(context.Background(), 0, p, batch, 1, out); err != nil {
					b.Fatal(err)
				}
			}
			run() // loads the script
			cpu := redisCPU(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, c)-cpu).Nanoseconds())/1e3/float64(b.N*k), "redis-µs/check")
		})
	}
}
