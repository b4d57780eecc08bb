package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// GCRA checks on the server's clock (here a batch) write 12-byte states that carry the key's
// expiry, and a later check keeps that TTL for as long as it covers the state's idle time plus the
// slack: the key outlives its state by at least the slack (1 s) and at most twice the slack.
func TestBatchedGCRAKeepsTTL(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	// T = 1000 ms, tau = 5000 ms: each check moves the TAT a second on, and five fit.
	p := sluice.MustPolicy("keep", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 5}})
	keys := []string{"a", "b"} // two keys: a call of one step takes the single-step script
	check := func(now int64, keys []string) {
		t.Helper()
		out := make([]sluice.Decision, len(keys))
		if err := s.CheckMany(ctx, now, p, keys, 1, out); err != nil {
			t.Fatal(err)
		}
		for i, d := range out {
			if !d.Allowed {
				t.Fatalf("%s denied: %+v", keys[i], d)
			}
		}
	}
	state := func(key string) (length int, pttl int64) {
		t.Helper()
		redisKey := prefix + ":{keep:" + key + "}"
		n, _ := do(t, c, "STRLEN", redisKey).AsInt64()
		ttl, _ := do(t, c, "PTTL", redisKey).AsInt64()
		return int(n), ttl
	}

	// Check i leaves the TAT i seconds ahead, so its key must live i s + the 1 s slack; a new TTL is
	// the idle time plus twice the slack, rounded up to 16 ms.
	steps := []struct {
		name     string
		min, max int64 // PTTL bounds right after the check
		kept     bool  // the TTL is the previous one, counting down
	}{
		{"fresh key: new TTL", 2000, 3008, false},
		{"still covered: TTL kept", 2000, 3008, true},
		{"no longer covered: new TTL", 4000, 5008, false},
		{"covered again: TTL kept", 4000, 5008, true},
	}
	var last [2]int64
	for _, step := range steps {
		check(0, keys)
		for i, key := range keys {
			n, ttl := state(key)
			if n != 12 {
				t.Errorf("%s: %s holds %d bytes, want 12 (a TAT and an expiry)", step.name, key, n)
			}
			if ttl <= step.min || ttl > step.max {
				t.Errorf("%s: %s has PTTL %d, want (%d, %d]", step.name, key, ttl, step.min, step.max)
			}
			if step.kept && ttl > last[i] {
				t.Errorf("%s: %s has PTTL %d after %d: the TTL was set again", step.name, key, ttl, last[i])
			}
			last[i] = ttl
		}
	}

	t.Run("explicit instant", func(t *testing.T) {
		// At an instant the caller passed, the server's clock is unknown: an 8-byte state, a TTL of
		// the idle time plus the slack, and the next batch on the server's clock sets a TTL anew.
		keys := []string{"c", "d"}
		check(t0, keys)
		for _, key := range keys {
			if n, ttl := state(key); n != 8 || ttl <= 1000 || ttl > 2000 {
				t.Errorf("%s: %d bytes, PTTL %d after a check at an explicit instant, want 8 bytes and (1000, 2000]", key, n, ttl)
			}
		}
		check(0, keys)
		for _, key := range keys {
			if n, ttl := state(key); n != 12 || ttl <= 2000 || ttl > 3008 {
				t.Errorf("%s: %d bytes, PTTL %d, want 12 bytes and a new TTL in (2000, 3008]", key, n, ttl)
			}
		}
	})
}

// The 12-byte GCRA state of a batched check fits the same allocation class as the 8-byte one.
func TestBatchedGCRAMemory(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	p := sluice.MustPolicy("m", sluice.Limit{Strategy: sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 100}})
	usage := func(key string) int64 {
		t.Helper()
		v, err := do(t, c, "MEMORY", "USAGE", fmt.Sprintf("%s:{m:%s}", prefix, key), "SAMPLES", "0").AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if _, err := s.Check(ctx, 0, p, "single", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckMany(ctx, 0, p, []string{"batch1", "batch2"}, 1, make([]sluice.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	if single, batched := usage("single"), usage("batch1"); batched != single { // keys of one length
		t.Errorf("MEMORY USAGE %d for a batched key (12 bytes), %d for a single one (8 bytes): want the same", batched, single)
	}
}

// CheckMany of more keys than one reply chunk (1000) and than one MGET (4000), distinct and
// repeated, decides as the memory store does.
func TestLargeCheckMany(t *testing.T) {
	// Keys expire on Redis's clock while the steps run at fixed instants: a slack of a minute keeps
	// a key through a slow subtest on a loaded host (the default second did not).
	_, c, prefix := newStore(t)
	s := redisstore.New(c, redisstore.Config{Prefix: prefix + ":large", TTLSlack: time.Minute})
	t.Cleanup(func() { s.Close() })
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	policies := []*sluice.Policy{
		sluice.MustPolicy("big-gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 2}}),
		sluice.MustPolicy("big-bucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 3}}),
		sluice.MustPolicy("big-window", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}}),
	}
	for _, n := range []int{1500, 4500} {
		for _, repeated := range []bool{false, true} {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				if repeated {
					keys[i] = fmt.Sprintf("k%d", i%700) // each key about n/700 times
				}
			}
			for _, p := range policies {
				t.Run(fmt.Sprintf("%s/%d keys/repeated=%v", p.Name(), n, repeated), func(t *testing.T) {
					for step, now := range []int64{t0, t0 + 1, t0 + 400} {
						got, want := make([]sluice.Decision, n), make([]sluice.Decision, n)
						if err := s.CheckMany(ctx, now, p, keys, 1, got); err != nil {
							t.Fatal(err)
						}
						if err := ms.CheckMany(ctx, now, p, keys, 1, want); err != nil {
							t.Fatal(err)
						}
						for i := range got {
							if !reflect.DeepEqual(got[i], want[i]) {
								t.Fatalf("call %d, key %d (%s): %+v, memory store %+v", step, i, keys[i], got[i], want[i])
							}
						}
					}
					for _, k := range keys {
						if err := s.Reset(ctx, p, k); err != nil {
							t.Fatal(err)
						}
						if err := ms.Reset(ctx, p, k); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// A batch at an instant before the state's (a replay, a clock stepped back) decides as the memory
// store does: a bucket refills nothing while time runs backwards, and a window's count belongs to
// its window only.
func TestBatchTimeBackwards(t *testing.T) {
	s, _, _ := newStore(t)
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	for _, p := range []*sluice.Policy{
		sluice.MustPolicy("back-gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 3}}),
		sluice.MustPolicy("back-bucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 2}}),
		sluice.MustPolicy("back-window", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2.5, WindowMs: 333.3}}),
	} {
		keys := []string{"a", "b", "a"}
		for _, now := range []int64{t0 + 1000, t0 + 1000, t0 + 400, t0, t0 + 1600} {
			got, want := make([]sluice.Decision, len(keys)), make([]sluice.Decision, len(keys))
			if err := s.CheckMany(ctx, now, p, keys, 1, got); err != nil {
				t.Fatal(err)
			}
			if err := ms.CheckMany(ctx, now, p, keys, 1, want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s at t0%+d: %+v, memory store %+v", p.Name(), now-t0, got, want)
			}
		}
	}
}

// On the server's clock a batch writes a token bucket's or fixed window's state in 12 bytes when
// its instant is a whole ms, and in 16 when it is not: a window of 333.3 ms starts between ms but
// for one window in ten, so the test reads the server's clock around the checks to know which.
func TestBatchStateForms(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	tests := []struct {
		name     string
		strategy sluice.Strategy
		windowMs float64 // the window of a fixed window whose start may fall between ms
	}{
		{name: "bucket", strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 1}},
		{name: "window", strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}},
		{name: "fractionalWindow", strategy: sluice.FixedWindow{Limit: 5, WindowMs: 333.3}, windowMs: 333.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("form-"+tt.name, sluice.Limit{Strategy: tt.strategy})
			keys := []string{"a", "b"}
			out := make([]sluice.Decision, len(keys))
			want := int64(12)
			for try := 0; ; try++ {
				before := serverMs(t, c)
				for range 2 {
					if err := s.CheckMany(ctx, 0, p, keys, 1, out); err != nil {
						t.Fatal(err)
					}
				}
				if tt.windowMs == 0 {
					break
				}
				start := math.Floor(float64(before)/tt.windowMs) * tt.windowMs
				if after := serverMs(t, c); math.Floor(float64(after)/tt.windowMs)*tt.windowMs == start {
					if start != math.Floor(start) {
						want = 16
					}
					break
				}
				if try == 10 {
					t.Fatal("every try crossed a window's boundary")
				}
				for _, key := range keys { // the next try starts from fresh keys
					do(t, c, "DEL", prefix+":{form-"+tt.name+":"+key+"}")
				}
			}
			for _, key := range keys {
				n, _ := do(t, c, "STRLEN", prefix+":{form-"+tt.name+":"+key+"}").AsInt64()
				if n != want {
					t.Errorf("%s holds %d bytes, want %d", key, n, want)
				}
			}
			if tt.name == "bucket" && out[0].Remaining != 3 { // read back: two spent of five
				t.Errorf("remaining %d after two checks, want 3", out[0].Remaining)
			}
		})
	}
}
