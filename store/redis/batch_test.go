package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// evalshaCalls reads how many EVALSHA commands srv has run.
func evalshaCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			var n int64
			fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
			return n
		}
	}
	return 0
}

// TestConcurrentChecksShareRuns runs concurrent checks on a Redis of the test's own, where every
// EVALSHA is this test's: they must be decided exactly (each key admits its limit, no more) in far
// fewer script runs than checks.
func TestConcurrentChecksShareRuns(t *testing.T) {
	srv := redistest.StartServer(t)
	opt, err := redisstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tests := []struct {
		name string
		cfg  redisstore.Config
		keys int
	}{
		{"distinct keys", redisstore.Config{}, 64},
		{"hot key", redisstore.Config{}, 1},
		{"batching off", redisstore.Config{BatchSize: 1}, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := redisstore.New(c, tt.cfg)
			p := sluice.MustPolicy("share", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 30, WindowMs: 3_600_000}})
			const goroutines, checks = 64, 40
			before := evalshaCalls(t, c)
			admitted := make([]atomic.Int64, tt.keys)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range checks {
						k := (g + i) % tt.keys
						d, err := s.Check(context.Background(), t0, p, fmt.Sprint(tt.name, k), 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			for k := range admitted {
				if got := admitted[k].Load(); got != 30 {
					t.Errorf("key %d: %d admitted, want exactly 30 (each key is checked 40 times)", k, got)
				}
			}
			runs := evalshaCalls(t, c) - before
			t.Logf("%d checks in %d script runs", goroutines*checks, runs)
			if tt.cfg.BatchSize == 1 {
				if runs != goroutines*checks {
					t.Errorf("%d script runs with batching off, want one per check (%d)", runs, goroutines*checks)
				}
			} else if runs > goroutines*checks/2 {
				t.Errorf("%d script runs for %d concurrent checks: they did not share runs", runs, goroutines*checks)
			}
		})
	}
}
