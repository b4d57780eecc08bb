package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// The benchmarks below run sluice's Redis store and github.com/go-redis/redis_rate/v10 side by side
// on the same Redis: 127.0.0.1:6379, or the address in SLUICE_BENCH_REDIS. Sub-benchmarks are named
// sluice-gcra and redis_rate so that the results line up in a table. Both are GCRA in one Lua
// script, one EVALSHA and one round trip a check, so what differs is the client and the script.
// Without a Redis they skip, unless CI=true, where they fail: a CI job that asks for them must not
// pass without running them.
//
// Keys: sluice's store keeps a key under "sluice:{p:<key>}" and redis_rate under "rate:<key>", and
// every key the benchmarks pass starts with "bench:"; BenchmarkRedisEvalsha's own keys start with
// "sluice-bench:". Each benchmark deletes exactly those (SCAN and DEL) when it ends, nothing else.

// redisParallelism is the b.SetParallelism of the parallel benchmarks: RunParallel starts
// redisParallelism × GOMAXPROCS goroutines, 64 with -cpu 2. A check waits a round trip, tens of
// microseconds in which its CPU is idle, so the many goroutines are there to keep Redis busy, as a
// server's many concurrent requests would; GOMAXPROCS goroutines would measure latency again.
const redisParallelism = 32

// redisPoolSize is the connection pool of every go-redis client here (redis_rate's and
// BenchmarkRedisEvalsha's): more connections than goroutines (64 with -cpu 2), so that no check
// waits for a connection and go-redis is measured at its best. go-redis's default, 10 × GOMAXPROCS,
// would make 64 goroutines queue for 20 connections.
const redisPoolSize = 128

// redisNumKeys is the key count of BenchmarkRedisParallel.
const redisNumKeys = 10_000

// The limit of every benchmark, the same on both sides: a million a second with a burst of a
// million. redis_rate is GCRA too (rate per period, burst offset = emission interval × burst), so
// redisGCRA and redisRate are one limit. A Redis admits a few hundred thousand checks a second, less
// than the rate, so even one hot key stays far from its burst and every check is admitted
// (allowed/op reports it): both sides take their "allowed" path, which writes the new TAT.
var (
	redisGCRA = sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}
	redisRate = redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: time.Second}
)

// redisKeyPatterns match every key that the benchmarks write, under sluice's and redis_rate's
// prefixes, and nothing else.
var redisKeyPatterns = []string{"sluice:{p:bench:*", "rate:bench:*", "sluice-bench:*"}

// redisAddr returns the address of the benchmarks' Redis, after checking that it answers; if it does
// not, it skips b, or fails it when CI=true. It deletes the benchmarks' keys once b ends.
func redisAddr(b *testing.B) string {
	b.Helper()
	addr := os.Getenv("SLUICE_BENCH_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := c.Ping(pctx).Err()
	cancel()
	if err != nil {
		c.Close()
		if os.Getenv("CI") == "true" {
			b.Fatalf("no Redis at %s (set SLUICE_BENCH_REDIS): %v", addr, err)
		}
		b.Skipf("no Redis at %s (set SLUICE_BENCH_REDIS): %v", addr, err)
	}
	b.Cleanup(func() {
		defer c.Close()
		for _, pattern := range redisKeyPatterns {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			var batch []string
			for iter.Next(ctx) {
				if batch = append(batch, iter.Val()); len(batch) == 1000 {
					c.Del(ctx, batch...)
					batch = batch[:0]
				}
			}
			if len(batch) > 0 {
				c.Del(ctx, batch...)
			}
			if err := iter.Err(); err != nil {
				b.Logf("deleting %s: %v", pattern, err)
			}
		}
	})
	return addr
}

// redisCheck is one check of a key, as either side makes it: whether it was admitted.
type redisCheck func(key string) (bool, error)

// newRedisSluice returns a check by a limiter with one policy "p" (redisGCRA) on sluice's Redis
// store, and closes the store when b ends. The store is opened as a user opens it, with no options:
// its client (rueidis) pipelines the commands of all goroutines, so it has no pool to size.
func newRedisSluice(b *testing.B, addr string) redisCheck {
	b.Helper()
	st, err := redisstore.Open("redis://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	lim, err := sluice.New(st, sluice.MustPolicy("p", sluice.Limit{Strategy: redisGCRA}))
	if err != nil {
		b.Fatal(err)
	}
	return func(key string) (bool, error) {
		d, err := lim.Check(ctx, "p", key, 1)
		return d.Allowed, err
	}
}

// newRedisRate returns a check by redis_rate (redisRate) on a client of its own, closed when b ends.
func newRedisRate(b *testing.B, addr string) redisCheck {
	b.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: redisPoolSize})
	b.Cleanup(func() { c.Close() })
	lim := redis_rate.NewLimiter(c)
	return func(key string) (bool, error) {
		res, err := lim.Allow(ctx, key, redisRate)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}
}

// redisSides are the two sides of every limiter benchmark, in the order they run.
var redisSides = []struct {
	name string
	open func(*testing.B, string) redisCheck
}{
	{"sluice-gcra", newRedisSluice},
	{"redis_rate", newRedisRate},
}

// BenchmarkRedisOneCaller is one key checked b.N times in a loop by one goroutine: ns/op is the
// latency one caller sees, a round trip and a script run.
func BenchmarkRedisOneCaller(b *testing.B) {
	addr := redisAddr(b)
	for _, side := range redisSides {
		b.Run(side.name, func(b *testing.B) {
			check := side.open(b, addr)
			if _, err := check("bench:one"); err != nil { // loads the script and dials
				b.Fatal(err)
			}
			b.ReportAllocs()
			var allowed int64
			b.ResetTimer()
			for range b.N {
				ok, err := check("bench:one")
				if err != nil {
					b.Fatal(err)
				}
				if ok {
					allowed++
				}
			}
			b.StopTimer()
			reportAllowed(b, allowed)
		})
	}
}

var (
	redisKeysOnce sync.Once
	redisKeys     []string
)

// redisManyKeys returns the redisNumKeys keys of BenchmarkRedisParallel, built once per process.
func redisManyKeys() []string {
	redisKeysOnce.Do(func() {
		redisKeys = make([]string, redisNumKeys)
		for i := range redisKeys {
			redisKeys[i] = fmt.Sprintf("bench:k:%05d", i)
		}
	})
	return redisKeys
}

// redisPicker draws keys uniformly at random among any number of keys with its own PRNG, so
// goroutines never share a lock or a cache line to pick a key (picker's, for other than numKeys).
type redisPicker struct {
	keys []string
	r    *rand.Rand
}

func newRedisPicker(keys []string) redisPicker {
	return redisPicker{keys: keys, r: rand.New(rand.NewPCG(pickerSeeds.Add(1), 0x9e3779b97f4a7c15))}
}

func (p redisPicker) next() string { return p.keys[p.r.IntN(len(p.keys))] }

// runRedisParallel checks keys drawn at random among keys (one key: that key every time) from
// redisParallelism × GOMAXPROCS goroutines, and reports allowed/op. Every key is checked once
// before the timer starts, from as many goroutines, so that Redis holds every key's state
// throughout (both sides keep an idle key for about a second, and at a few hundred thousand checks a
// second each of 10k keys is checked every few dozen milliseconds) and the script is loaded.
func runRedisParallel(b *testing.B, keys []string, check redisCheck) {
	b.Helper()
	var wg sync.WaitGroup
	var warmErr atomic.Pointer[error]
	var next atomic.Int64
	for range redisParallelism * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				if _, err := check(keys[i]); err != nil {
					warmErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := warmErr.Load(); err != nil {
		b.Fatal(*err)
	}

	b.SetParallelism(redisParallelism)
	b.ReportAllocs()
	var allowed atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := newRedisPicker(keys)
		var n int64
		for pb.Next() {
			ok, err := check(p.next())
			if err != nil {
				b.Error(err)
				return
			}
			if ok {
				n++
			}
		}
		allowed.Add(n)
	})
	b.StopTimer()
	reportAllowed(b, allowed.Load())
}

// BenchmarkRedisParallel checks keys drawn at random among 10k keys from redisParallelism ×
// GOMAXPROCS goroutines (64 with -cpu 2), each with its own PRNG: ns/op is the inverse of the
// throughput, with Redis rather than the caller the bottleneck.
func BenchmarkRedisParallel(b *testing.B) {
	addr := redisAddr(b)
	keys := redisManyKeys()
	for _, side := range redisSides {
		b.Run(side.name, func(b *testing.B) {
			runRedisParallel(b, keys, side.open(b, addr))
		})
	}
}

// BenchmarkRedisParallelHotKey is BenchmarkRedisParallel with one key for every goroutine. Redis
// runs one script at a time whatever the key, so it should match BenchmarkRedisParallel; a gap
// would be the cost of many keys (Redis's dictionary and cache misses), not of contention.
func BenchmarkRedisParallelHotKey(b *testing.B) {
	addr := redisAddr(b)
	for _, side := range redisSides {
		b.Run(side.name, func(b *testing.B) {
			runRedisParallel(b, []string{"bench:hot"}, side.open(b, addr))
		})
	}
}

// evalshaScript is the smallest script shaped like a check: it reads a key, writes it back with a
// TTL and returns a number, the GET, SET PX and reply of sluice's GCRA script without its
// arithmetic.
const evalshaScript = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
redis.call('SET', KEYS[1], n, 'PX', 60000)
return n
`

// BenchmarkRedisEvalsha runs evalshaScript with EVALSHA from redisParallelism × GOMAXPROCS
// goroutines (64 with -cpu 2), each on a key of its own, through go-redis and through rueidis: the
// cost of the client alone, on the path every check takes. go-redis gives each command a
// connection of its pool and waits for its reply, so Redis reads and answers one command per
// connection at a time, a system call each way per command; rueidis (default options: automatic
// pipelining) writes the commands of all goroutines on a few connections in batches, so Redis reads
// and answers many per system call. The gap between the two is the case for sluice's store's
// choice of client.
func BenchmarkRedisEvalsha(b *testing.B) {
	addr := redisAddr(b)
	var goroutines atomic.Int64 // a key per goroutine, fresh in every run

	b.Run("go-redis", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: redisPoolSize})
		defer c.Close()
		script := goredis.NewScript(evalshaScript)
		if err := script.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(redisParallelism)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keys := []string{fmt.Sprintf("sluice-bench:evalsha:go-redis:%d", goroutines.Add(1))}
			for pb.Next() {
				if _, err := script.Run(ctx, c, keys).Int64(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("rueidis", func(b *testing.B) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		script := rueidis.NewLuaScript(evalshaScript)
		if _, err := script.Exec(ctx, c, []string{"sluice-bench:evalsha:rueidis:0"}, nil).AsInt64(); err != nil {
			b.Fatal(err) // loads the script
		}
		b.SetParallelism(redisParallelism)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keys := []string{fmt.Sprintf("sluice-bench:evalsha:rueidis:%d", goroutines.Add(1))}
			for pb.Next() {
				if _, err := script.Exec(ctx, c, keys, nil).AsInt64(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
