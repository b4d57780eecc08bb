package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// BenchmarkCoalesced measures each operation that concurrent callers share statements for, with
// batching off (BatchSize 1: every call a statement of its own) and on, side by side in one run,
// at 1 caller and at 64 (SetParallelism on GOMAXPROCS): the time per call and the statements sent
// per call. Every call is at the server's clock (now = 0), on 10,000 keys that all have rows (no
// sweep), of a policy that never denies; the pool is pgxpool's default. On a shared machine, compare within
// one run:
//
//	go test -run '^$' -bench BenchmarkCoalesced -benchtime 2s -count 3 ./store/postgres/
func BenchmarkCoalesced(b *testing.B) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close) // after the schemas are dropped
	if err := pool.Ping(ctx); err != nil {
		b.Skipf("no PostgreSQL at %s: %v", dbURL(), err)
	}
	p := sluice.MustPolicy("bench-coalesced", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	modes := []struct {
		name  string
		cfg   pgstore.Config
		store *pgstore.Store
	}{
		{name: "unbatched", cfg: pgstore.Config{BatchSize: 1, SweepInterval: -1}},
		{name: "batched", cfg: pgstore.Config{SweepInterval: -1}},
	}
	for i := range modes {
		modes[i].store = benchStore(b, pool, modes[i].cfg)
		// Every key has its row before the clock starts, as a busy deployment's keys do.
		if err := modes[i].store.CheckMany(ctx, 0, p, keys, 1, make([]sluice.Decision, len(keys))); err != nil {
			b.Fatal(err)
		}
	}
	ops := []struct {
		name string
		call func(ctx context.Context, s *pgstore.Store, k int) error
	}{
		{"checkAll2", func(ctx context.Context, s *pgstore.Store, k int) error {
			items := []sluice.Item{{Policy: p.Name(), Key: keys[k%len(keys)], Cost: 1}, {Policy: p.Name(), Key: keys[(k+1)%len(keys)], Cost: 1}}
			out := make([]sluice.Decision, 2)
			if err := s.CheckAll(ctx, 0, []*sluice.Policy{p, p}, items, out); err != nil || !out[0].Allowed {
				return fmt.Errorf("%+v, %v", out, err)
			}
			return nil
		}},
		{"checkMany4", func(ctx context.Context, s *pgstore.Store, k int) error {
			ks := make([]string, 4)
			for i := range ks {
				ks[i] = keys[(k+i)%len(keys)]
			}
			out := make([]sluice.Decision, 4)
			if err := s.CheckMany(ctx, 0, p, ks, 1, out); err != nil || !out[0].Allowed {
				return fmt.Errorf("%+v, %v", out, err)
			}
			return nil
		}},
		{"peek", func(ctx context.Context, s *pgstore.Store, k int) error {
			_, err := s.Peek(ctx, 0, p, keys[k%len(keys)])
			return err
		}},
		{"forecast", func(ctx context.Context, s *pgstore.Store, k int) error {
			_, err := s.Forecast(ctx, 0, p, keys[k%len(keys)], 1)
			return err
		}},
		{"refund", func(ctx context.Context, s *pgstore.Store, k int) error {
			return s.Refund(ctx, 0, p, keys[k%len(keys)], 1)
		}},
	}
	for _, op := range ops {
		for _, callers := range []int{1, 64} {
			for _, m := range modes {
				b.Run(fmt.Sprintf("%s/callers=%d/%s", op.name, callers, m.name), func(b *testing.B) {
					s := m.store
					var next, failed atomic.Int64
					call := func() {
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						defer cancel()
						if err := op.call(ctx, s, int(next.Add(1))); err != nil {
							failed.Add(1)
						}
					}
					// Open the connections and plan the statements before the clock starts.
					var warm sync.WaitGroup
					for range callers {
						warm.Go(call)
					}
					warm.Wait()
					failed.Store(0)
					statements := s.Statements()
					b.ReportAllocs()
					b.ResetTimer()
					if callers == 1 {
						for b.Loop() {
							call()
						}
					} else {
						b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								call()
							}
						})
					}
					b.StopTimer()
					b.ReportMetric(float64(s.Statements()-statements)/float64(b.N), "statements/op")
					b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
					if n := failed.Load(); n > int64(b.N/100) {
						b.Errorf("%d of %d calls failed", n, b.N)
					}
				})
			}
		}
	}
}

// benchStore returns a store on pool in a schema of its own, dropped when b ends.
func benchStore(b *testing.B, pool *pgxpool.Pool, cfg pgstore.Config) *pgstore.Store {
	b.Helper()
	cfg.Schema = fmt.Sprintf("sluice_bench_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, schemas.Add(1))
	b.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE"); err != nil {
			b.Errorf("dropping schema %s: %v", cfg.Schema, err)
		}
	})
	s, err := pgstore.New(pool, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
