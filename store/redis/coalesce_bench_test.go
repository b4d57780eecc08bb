package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// BenchmarkCoalesced measures the store's CheckMany of four keys, Peek, Forecast and Refund on a
// Redis of its own, at the Redis clock, with batching off (every call one script run of its own,
// as these calls always ran) and on, side by side in one run, at 1 caller and at 64: the time per
// call and the Redis CPU per call. Every key holds a state (a check at the start, kept by an hour
// of TTL slack), so Peek, Forecast and Refund read and Refund writes one. 64 callers is
// SetParallelism(32) on -cpu 2. On a shared machine, alternate rounds and compare within each:
//
//	go test -c -o /tmp/redis.test ./store/redis/ && for i in 1 2 3; do
//	  /tmp/redis.test -test.run '^$' -test.bench Coalesced -test.benchtime 2s -test.cpu 2; done
func BenchmarkCoalesced(b *testing.B) {
	srv := redistest.StartServer(b)
	p := sluice.MustPolicy("bench-coalesced", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	newClient := func(b *testing.B) rueidis.Client {
		opt, err := redisstore.ParseURL(srv.URL())
		if err != nil {
			b.Fatal(err)
		}
		c, err := rueidis.NewClient(opt)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	const slack = time.Hour
	{
		c := newClient(b)
		s := redisstore.New(c, redisstore.Config{TTLSlack: slack})
		out := make([]sluice.Decision, 100)
		for i := 0; i < len(keys); i += len(out) {
			if err := s.CheckMany(context.Background(), 0, p, keys[i:i+len(out)], 1, out); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
	}
	ops := []struct {
		name string
		do   func(ctx context.Context, s *redisstore.Store, k int) error
	}{
		{"CheckMany4", func(ctx context.Context, s *redisstore.Store, k int) error {
			ks := make([]string, 4)
			for i := range ks {
				ks[i] = keys[(4*k+i)%len(keys)]
			}
			out := make([]sluice.Decision, len(ks))
			if err := s.CheckMany(ctx, 0, p, ks, 1, out); err != nil {
				return err
			}
			for _, d := range out {
				if !d.Allowed {
					return fmt.Errorf("denied: %+v", d)
				}
			}
			return nil
		}},
		{"Peek", func(ctx context.Context, s *redisstore.Store, k int) error {
			_, err := s.Peek(ctx, 0, p, keys[k%len(keys)])
			return err
		}},
		{"Forecast", func(ctx context.Context, s *redisstore.Store, k int) error {
			_, err := s.Forecast(ctx, 0, p, keys[k%len(keys)], 1)
			return err
		}},
		{"Refund", func(ctx context.Context, s *redisstore.Store, k int) error {
			return s.Refund(ctx, 0, p, keys[k%len(keys)], 1)
		}},
	}
	for _, op := range ops {
		for _, callers := range []int{1, 64} {
			for _, mode := range []struct {
				name string
				cfg  redisstore.Config
			}{
				{"unbatched", redisstore.Config{BatchSize: 1, TTLSlack: slack}},
				{"batched", redisstore.Config{TTLSlack: slack}},
			} {
				b.Run(fmt.Sprintf("%s/callers=%d/%s", op.name, callers, mode.name), func(b *testing.B) {
					c := newClient(b)
					defer c.Close()
					s := redisstore.New(c, mode.cfg)
					defer s.Close()
					var next atomic.Int64
					benchCalls(b, c, callers, func(ctx context.Context) bool {
						return op.do(ctx, s, int(next.Add(1))) == nil
					})
				})
			}
		}
	}
}
