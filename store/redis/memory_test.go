package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// TestMemoryPerKey measures what Redis holds per key (MEMORY USAGE: the key, its value, and the
// dictionary and expiry entries) with the default prefix, a short policy name and a 16-byte key,
// as docs/redis.md reports. A plan of 10M buckets at about 100 bytes each: a GCRA key (one
// double) and a token bucket or fixed window key on the server's clock (12 bytes, see
// TestCompactStates) stay within that; a 16-byte state crosses jemalloc's 32-byte class for the
// value and takes 104. The bounds catch a layout that grows.
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
		{"tokenBucket", sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}, 100},
		{"fixedWindow", sluice.FixedWindow{Limit: 100, WindowMs: 60_000}, 100},
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
				if _, err := s.Check(ctx, 0, p, key, 1); err != nil { // the server clock, as in production
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

// serverMs reads the Redis server's clock in epoch ms.
func serverMs(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	v, err := do(t, c, "TIME").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(v[0], 10, 64)
	usec, _ := strconv.ParseInt(v[1], 10, 64)
	return sec*1000 + usec/1000
}

// TestCompactStates: a token bucket's or fixed window's state written on the server's clock takes
// 12 bytes (its instant as the low 32 bits of the server's clock) and reads back exactly, also by
// an operation at an instant the caller passes, a month away; an instant the caller passed, or a
// key that may live longer than 12 days, keeps the 16-byte form.
func TestCompactStates(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	strlen := func(p *sluice.Policy, key string) int64 {
		t.Helper()
		n, err := do(t, c, "STRLEN", fmt.Sprintf("%s:{%s:%s}", prefix, p.Name(), key)).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	peek := func(p *sluice.Policy, now int64, key string) sluice.Decision {
		t.Helper()
		d, err := s.Peek(ctx, now, p, key)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("tokenBucket", func(t *testing.T) {
		p := sluice.MustPolicy("tb", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}})
		if d, err := s.Check(ctx, 0, p, "k", 40); err != nil || !d.Allowed || d.Remaining != 60 {
			t.Fatalf("check on the server clock: %+v, %v", d, err)
		}
		if n := strlen(p, "k"); n != 12 {
			t.Fatalf("state of %d bytes, want 12", n)
		}
		// 10 s after the check, 10 tokens have come back (and less than one more, however long the
		// calls took); 30 days before it, time runs backwards and refills nothing. (Expanded
		// against that instant instead of the server's clock, the low bits would read as an
		// instant 20 days before it, and the bucket would be full.)
		if d := peek(p, serverMs(t, c)+10_000, "k"); d.Remaining != 70 {
			t.Errorf("10 s later: remaining %d, want 70", d.Remaining)
		}
		if d := peek(p, serverMs(t, c)-30*86_400_000, "k"); d.Remaining != 60 {
			t.Errorf("30 days earlier: remaining %d, want 60", d.Remaining)
		}
		if d, err := s.Check(ctx, 0, p, "k", 60); err != nil || !d.Allowed || d.Remaining > 1 {
			t.Fatalf("second check on the server clock: %+v, %v", d, err)
		}
		if d, err := s.Check(ctx, t0, p, "at-t0", 1); err != nil || !d.Allowed {
			t.Fatalf("check at t0: %+v, %v", d, err)
		}
		if n := strlen(p, "at-t0"); n != 16 {
			t.Errorf("state written at a passed instant: %d bytes, want 16", n)
		}
		slow := sluice.MustPolicy("tb-slow", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e6, RefillPerSec: 0.1}})
		if _, err := s.Check(ctx, 0, slow, "k", 500_000); err != nil { // refilled in 58 days
			t.Fatal(err)
		}
		if n := strlen(slow, "k"); n != 16 {
			t.Errorf("state of a key living 58 days: %d bytes, want 16", n)
		}
	})

	t.Run("fixedWindow", func(t *testing.T) {
		p := sluice.MustPolicy("fw", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 3_600_000}})
		first, err := s.Check(ctx, 0, p, "k", 3)
		if err != nil || !first.Allowed {
			t.Fatalf("check on the server clock: %+v, %v", first, err)
		}
		if n := strlen(p, "k"); n != 12 {
			t.Fatalf("state of %d bytes, want 12", n)
		}
		// At the window's last instant (the caller's), the count read back is the same window's.
		if d := peek(p, first.ResetAt-1, "k"); d.Remaining != 7 {
			t.Errorf("at the window's end: remaining %d, want 7", d.Remaining)
		}
		if d, err := s.Check(ctx, 0, p, "k", 2); err != nil || d.Remaining != 5 && d.ResetAt == first.ResetAt {
			t.Errorf("second check: %+v, %v", d, err)
		}
	})
}
