package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	pgstore "github.com/sluicehq/sluice/store/postgres"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// sizingStrategies are slow limits: one check leaves every key spending for about an hour, so no
// key expires (Redis) or goes idle (PostgreSQL's sweep) while the store is measured.
var sizingStrategies = []strategyCase{
	{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 36_000_000, Burst: 10}},
	{"tokenbucket", sluice.TokenBucket{Capacity: 10, RefillPerSec: 10.0 / 36_000}},
	{"fixedwindow", sluice.FixedWindow{Limit: 10, WindowMs: 3_600_000}},
}

// sizingKeys is how many keys BenchmarkStoreBytesPerKey writes: SLUICE_SIZING_KEYS, else 100k
// (docs/sizing.md uses 1M).
func sizingKeys(b *testing.B) int {
	n := 100_000
	if s := os.Getenv("SLUICE_SIZING_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("SLUICE_SIZING_KEYS=%q: want a positive count", s)
		}
	}
	return n
}

// BenchmarkStoreBytesPerKey measures what a key costs the shared stores: one op fills an empty
// store with sizingKeys keys (CheckMany of 500 at a time, 16-byte keys) and reports the growth
// per key as B/key: Redis's used_memory (on a redis-server of its own, so nothing else moves it),
// and for PostgreSQL the size of the store's tables with their indexes after a VACUUM.
func BenchmarkStoreBytesPerKey(b *testing.B) {
	for _, sc := range sizingStrategies {
		b.Run("redis-"+sc.name, func(b *testing.B) {
			addr := startRedis(b)
			for range b.N {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				usedMemory := func() float64 {
					info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
					if err != nil {
						b.Fatal(err)
					}
					for _, line := range strings.Split(info, "\r\n") {
						if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
							f, _ := strconv.ParseFloat(v, 64)
							return f
						}
					}
					b.Fatal("INFO memory has no used_memory")
					return 0
				}
				before := usedMemory()
				n := fillSizing(b, redisstore.New(c, redisstore.Config{}), sc.strategy)
				b.ReportMetric((usedMemory()-before)/float64(n), "B/key")
				c.Close()
			}
		})
	}
	for _, sc := range sizingStrategies {
		b.Run("postgres-"+sc.name, func(b *testing.B) {
			url := postgresURL(b)
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			const schema = "sluice_sizing"
			size := func() float64 {
				if _, err := pool.Exec(ctx, "VACUUM"); err != nil {
					b.Fatal(err)
				}
				var v float64
				err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
					JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&v)
				if err != nil {
					b.Fatal(err)
				}
				return v
			}
			for range b.N {
				if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
					b.Fatal(err)
				}
				sep := "?"
				if strings.Contains(url, "?") {
					sep = "&"
				}
				st, err := pgstore.Open(ctx, url+sep+"sluice_schema="+schema)
				if err != nil {
					b.Fatal(err)
				}
				before := size()
				n := fillSizing(b, st, sc.strategy)
				b.ReportMetric((size()-before)/float64(n), "B/key")
				st.Close()
			}
			if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// fillSizing checks sizingKeys fresh keys once each under one policy of s and returns the count.
func fillSizing(b *testing.B, st sluice.Store, s sluice.Strategy) int {
	b.Helper()
	p := sluice.MustPolicy("size", sluice.Limit{Strategy: s})
	lim, err := sluice.New(st, p)
	if err != nil {
		b.Fatal(err)
	}
	n := sizingKeys(b)
	keys := make([]string, 0, 500)
	for i := range n {
		keys = append(keys, fmt.Sprintf("user:%011d", i))
		if len(keys) == cap(keys) || i == n-1 {
			if _, err := lim.CheckMany(ctx, "size", keys, 1); err != nil {
				b.Fatal(err)
			}
			keys = keys[:0]
		}
	}
	return n
}

// startRedis starts a redis-server of the benchmark's own on a free loopback port, with nothing
// on disk, and stops it when b ends. Without redis-server it skips b, or fails it when CI=true.
func startRedis(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("redis-server not found: %v", err)
		}
		b.Skipf("redis-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on %s did not start", addr)
		}
	}
}
