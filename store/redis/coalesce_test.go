package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/storetest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// TestCoalesced checks that concurrent CheckManys, Peeks, Forecasts, Debits and Refunds answer what
// each would alone (storetest.Coalesced), with batching on, in batches smaller than the callers,
// off, and on a Cluster, where keys of several slots are a CheckMany of their own.
func TestCoalesced(t *testing.T) {
	srv := redistest.StartServer(t)
	onServer := func(cfg redisstore.Config) func(t *testing.T) sluice.Store {
		return func(t *testing.T) sluice.Store {
			s := redisstore.New(nodeClient(t, srv.Addr()), cfg)
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	tests := []struct {
		name string
		open func(t *testing.T) sluice.Store
	}{
		{"batched", onServer(redisstore.Config{})},
		{"smallBatches", onServer(redisstore.Config{BatchSize: 4, InFlight: 1})},
		{"unbatched", onServer(redisstore.Config{BatchSize: 1})},
		{"cluster", func(t *testing.T) sluice.Store { return openStore(t, redistest.StartCluster(t, 3).URL()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { storetest.Coalesced(t, tt.open(t)) })
	}
}

// TestCoalescedRuns counts the script runs (EVALSHA, INFO commandstats) of concurrent calls of
// each operation on a Redis of the test's own: with batching on, callers released at once share
// far fewer runs than calls; with BatchSize 1, every call is a run of its own.
func TestCoalescedRuns(t *testing.T) {
	srv := redistest.StartServer(t)
	c := nodeClient(t, srv.Addr())
	p := sluice.MustPolicy("runs", sluice.Limit{Strategy: sluice.GCRA{Limit: 1e6, PeriodMs: 1000, Burst: 1e6}})
	ctx := context.Background()
	key := func(g int) string { return fmt.Sprint("k", g) }
	ops := []struct {
		name string
		do   func(s *redisstore.Store, g int) error
	}{
		{"CheckMany", func(s *redisstore.Store, g int) error {
			return s.CheckMany(ctx, t0, p, []string{key(g), key(g + 1)}, 1, make([]sluice.Decision, 2))
		}},
		{"CheckManyBesideCheck", func(s *redisstore.Store, g int) error {
			if g%2 == 0 {
				_, err := s.Check(ctx, t0, p, key(g), 1)
				return err
			}
			return s.CheckMany(ctx, t0, p, []string{key(g), key(g + 1)}, 1, make([]sluice.Decision, 2))
		}},
		{"Peek", func(s *redisstore.Store, g int) error { _, err := s.Peek(ctx, t0, p, key(g)); return err }},
		{"Forecast", func(s *redisstore.Store, g int) error { _, err := s.Forecast(ctx, t0, p, key(g), 2); return err }},
		{"Refund", func(s *redisstore.Store, g int) error { return s.Refund(ctx, t0, p, key(g), 1) }},
		{"Debit", func(s *redisstore.Store, g int) error { return s.Debit(ctx, t0, p, key(g), 1) }},
	}
	modes := []struct {
		name string
		cfg  redisstore.Config
	}{
		{"batched", redisstore.Config{}},
		{"unbatched", redisstore.Config{BatchSize: 1}},
	}
	const callers, each = 64, 10
	for _, m := range modes {
		for _, op := range ops {
			t.Run(m.name+"/"+op.name, func(t *testing.T) {
				s := redisstore.New(c, m.cfg)
				defer s.Close()
				// Load the scripts first: a NOSCRIPT run counts twice.
				for g := range 2 {
					if err := op.do(s, g); err != nil {
						t.Fatal(err)
					}
				}
				before := evalshaCalls(t, c)
				gate := make(chan struct{})
				var wg sync.WaitGroup
				for g := range callers {
					wg.Go(func() {
						<-gate
						for range each {
							if err := op.do(s, g); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				close(gate)
				wg.Wait()
				runs := evalshaCalls(t, c) - before
				t.Logf("%d calls in %d script runs", callers*each, runs)
				if m.cfg.BatchSize == 1 {
					if runs != callers*each {
						t.Errorf("%d script runs with batching off, want one per call (%d)", runs, callers*each)
					}
				} else if runs > callers*each/4 {
					t.Errorf("%d script runs for %d concurrent calls: they did not share runs", runs, callers*each)
				}
			})
		}
	}
}
