package redisstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// TestMemoryPerKey measures what Redis holds per key (MEMORY USAGE: the key, its value, and the
// dictionary and expiry entries) with the default prefix, a short policy name and a 16-byte key,
// as docs/redis.md reports. Seed 002 plans 10M buckets at about 100 bytes each: a GCRA key (one
// double) stays within that; a two-double state (16 bytes) crosses jemalloc's 32-byte class for
// the value and takes 104. The bounds catch a layout that grows.
func TestMemoryPerKey(t *testing.T) {
	c := client(t)
	s := redisstore.New(c, redisstore.Config{}) // prefix "sluice"
	defer s.Close()
	ctx := context.Background()
	tests := []struct {
		name     string
		strategy sluice.Strategy
		max      int64 // 0: reported, not bounded
	}{
		{"gcra", sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 100}, 100},
		{"tokenBucket", sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}, 104},
		{"fixedWindow", sluice.FixedWindow{Limit: 100, WindowMs: 60_000}, 104},
		{"slidingWindow", sluice.SlidingWindow{Limit: 100, WindowMs: 60_000, Buckets: 6}, 0},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 100, WindowMs: 60_000}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("m%d", len(tt.name)) // short and unique per strategy
			p := sluice.MustPolicy(name, sluice.Limit{Strategy: tt.strategy})
			const n = 100
			var sum int64
			for i := range n {
				key := fmt.Sprintf("user:%011d", i)
				if _, err := s.Check(ctx, t0, p, key, 1); err != nil {
					t.Fatal(err)
				}
				redisKey := fmt.Sprintf("sluice:{%s:%s}", name, key)
				v, err := do(t, c, "MEMORY", "USAGE", redisKey, "SAMPLES", "0").AsInt64()
				if err != nil {
					t.Fatalf("MEMORY USAGE %s: %v", redisKey, err)
				}
				sum += v
				do(t, c, "DEL", redisKey)
			}
			avg := float64(sum) / n
			t.Logf("%s: %.0f bytes per key (keys like sluice:{%s:user:00000000001})", tt.name, avg, name)
			if tt.max > 0 && avg > float64(tt.max) {
				t.Errorf("%.0f bytes per key, want at most %d", avg, tt.max)
			}
		})
	}
}
