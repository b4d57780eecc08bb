package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

const t0 int64 = 1_700_000_000_000

// client connects to the test Redis (SLUICE_REDIS_URL, else 127.0.0.1:6379). Without one the test
// is skipped, or fails under CI.
func client(t *testing.T) rueidis.Client {
	t.Helper()
	return clientWith(t, func(*rueidis.ClientOption) {})
}

// clientWith is client with ParseURL's options changed by edit.
func clientWith(t *testing.T, edit func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	url := os.Getenv("SLUICE_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatalf("SLUICE_REDIS_URL: %v", err)
	}
	opt.ForceSingleClient = false
	edit(&opt)
	c, err := rueidis.NewClient(opt)
	if err != nil {
		msg := fmt.Sprintf("no Redis at %s (set SLUICE_REDIS_URL or start redis-server): %v", url, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(c.Close)
	return c
}

// do runs one Redis command for a test.
func do(t *testing.T, c rueidis.Client, args ...string) rueidis.RedisResult {
	t.Helper()
	r := c.Do(context.Background(), c.B().Arbitrary(args...).Build())
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

// keysUnder lists the keys that start with prefix.
func keysUnder(t *testing.T, c rueidis.Client, prefix string) []string {
	t.Helper()
	keys, err := do(t, c, "KEYS", prefix+":*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// newStore returns a store under a prefix no other run uses, and that prefix.
func newStore(t *testing.T) (*redisstore.Store, rueidis.Client, string) {
	t.Helper()
	c := client(t)
	prefix := fmt.Sprintf("sluice-test:%d:%s", time.Now().UnixNano(), t.Name())
	s := redisstore.New(c, redisstore.Config{Prefix: prefix})
	t.Cleanup(func() {
		s.Close()
		for _, k := range keysUnder(t, c, prefix) {
			do(t, c, "DEL", k)
		}
	})
	return s, c, prefix
}

// TestNoClientTracking checks that a client from ParseURL leaves CLIENT TRACKING off: with it on,
// Redis would note an invalidation for every key the store writes.
func TestNoClientTracking(t *testing.T) {
	info, err := do(t, client(t), "CLIENT", "INFO").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range strings.Fields(info) {
		if flags, ok := strings.CutPrefix(field, "flags="); ok && strings.Contains(flags, "t") {
			t.Errorf("CLIENT INFO: %s: the connection tracks keys", field)
		}
	}
}

// TestFewConnections checks that the store's calls share a few connections however many goroutines
// make them: on ParseURL's client only the batcher's runs, at most Config.InFlight at once, take a
// connection of their own, and every other command is pipelined. A command left unmarked would
// take a connection per concurrent call.
func TestFewConnections(t *testing.T) {
	name := fmt.Sprintf("sluice-test-conns-%d", time.Now().UnixNano())
	c := clientWith(t, func(o *rueidis.ClientOption) { o.ClientName = name })
	admin := client(t)
	const inFlight = 2
	prefix := "sluice-test:" + name
	s := redisstore.New(c, redisstore.Config{Prefix: prefix, InFlight: inFlight})
	defer s.Close()
	p := sluice.MustPolicy("conns", sluice.Limit{Strategy: sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: 10}})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			key := fmt.Sprint(g % 8)
			out := make([]sluice.Decision, 2)
			for range 20 {
				_, err := s.Check(ctx, 0, p, key, 1)
				if err == nil {
					_, err = s.Peek(ctx, 0, p, key)
				}
				if err == nil {
					err = s.CheckMany(ctx, 0, p, []string{key, "many"}, 1, out)
				}
				if err == nil {
					err = s.Refund(ctx, 0, p, key, 1)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, k := range keysUnder(t, admin, prefix) {
		do(t, admin, "DEL", k)
	}
	list, err := do(t, admin, "CLIENT", "LIST").ToString()
	if err != nil {
		t.Fatal(err)
	}
	conns := strings.Count(list, " name="+name+" ")
	// rueidis pipelines on up to four connections (ClientOption.PipelineMultiplex).
	if conns == 0 || conns > inFlight+4 {
		t.Errorf("the store holds %d connections after 64 goroutines called it, want 1 to %d", conns, inFlight+4)
	}
}

func TestConformanceVectors(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.Vectors(t, s)
}

func TestKeysApart(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.KeysApart(t, s)
}

func TestStrategyChange(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.StrategyChange(t, s)
}

// exhausting strategies admit 1000 units at one instant and replenish nothing soon after.
var exhausting = []struct {
	name     string
	strategy sluice.Strategy
}{
	{"gcra", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: 1000}},
	{"tokenBucket", sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}},
	{"fixedWindow", sluice.FixedWindow{Limit: 1000, WindowMs: 1e9}},
	{"slidingWindow", sluice.SlidingWindow{Limit: 1000, WindowMs: 1e9, Buckets: 10}},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 1000, WindowMs: 1e9}},
}

func TestConcurrentChecksAreExact(t *testing.T) {
	s, _, _ := newStore(t)
	const goroutines, checks = 32, 100
	for _, tt := range exhausting {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("exact-"+tt.name, sluice.Limit{Strategy: tt.strategy})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < checks; i++ {
						d, err := s.Check(context.Background(), t0, p, "hot", 1)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := admitted.Load(); got != 1000 {
				t.Errorf("admitted %d of %d checks, want exactly 1000", got, goroutines*checks)
			}
		})
	}
}

func TestCheckManyMatchesCheck(t *testing.T) {
	s, _, _ := newStore(t)
	p := sluice.MustPolicy("many", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}})
	keys := []string{"a", "b", "a", "c", "a"}
	out := make([]sluice.Decision, len(keys))
	if err := s.CheckMany(context.Background(), t0, p, keys, 1, out); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, true, false}
	for i, d := range out {
		if d.Allowed != want[i] {
			t.Errorf("key %d (%s): allowed %v, want %v", i, keys[i], d.Allowed, want[i])
		}
	}
	if out[4].RetryAfterMs != 1000 || out[4].DeniedBy != 0 {
		t.Errorf("third check of a: %+v, want retryAfterMs 1000 deniedBy 0", out[4])
	}
}

func TestServerClock(t *testing.T) {
	s, _, _ := newStore(t)
	p := sluice.MustPolicy("clock", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}})
	before := time.Now().UnixMilli()
	d, err := s.Check(context.Background(), 0, p, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The window end is within a second of the server clock; allow a second of skew either side.
	if d.ResetAt < before-1000 || d.ResetAt > before+3000 {
		t.Errorf("resetAt %d not near the clock %d", d.ResetAt, before)
	}
	out := make([]sluice.Decision, 2)
	if err := s.CheckMany(context.Background(), 0, p, []string{"k", "k"}, 1, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || !out[1].Allowed || out[1].Remaining != out[0].Remaining-1 {
		t.Errorf("CheckMany at the server clock: %+v", out)
	}
}

func TestNoScriptRecovery(t *testing.T) {
	s, c, _ := newStore(t)
	ctx := context.Background()
	for _, tt := range exhausting {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("noscript-"+tt.name, sluice.Limit{Strategy: tt.strategy})
			do(t, c, "SCRIPT", "FLUSH")
			if d, err := s.Check(ctx, t0, p, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("Check after SCRIPT FLUSH = %+v, %v", d, err)
			}
			do(t, c, "SCRIPT", "FLUSH")
			out := make([]sluice.Decision, 3)
			if err := s.CheckMany(ctx, t0, p, []string{"k", "m", "n"}, 1, out); err != nil {
				t.Fatalf("CheckMany after SCRIPT FLUSH: %v", err)
			}
			if out[0].Remaining != 998 || out[1].Remaining != 999 {
				t.Errorf("CheckMany after SCRIPT FLUSH: %+v", out)
			}
		})
	}
}

func TestEveryKeyHasTTL(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	for _, tt := range exhausting {
		p := sluice.MustPolicy("ttl-"+tt.name, sluice.Limit{Strategy: tt.strategy})
		for i := int64(0); i < 3; i++ {
			if _, err := s.Check(ctx, t0+i, p, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := keysUnder(t, c, prefix)
	if len(keys) != len(exhausting) {
		t.Errorf("%d keys written, want %d: %v", len(keys), len(exhausting), keys)
	}
	for _, k := range keys {
		if ttl, _ := do(t, c, "PTTL", k).AsInt64(); ttl <= 0 {
			t.Errorf("key %s has no TTL (PTTL %v)", k, ttl)
		}
	}
}

func TestIdleKeyExpires(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	p := sluice.MustPolicy("idle", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}})
	if _, err := s.Check(ctx, t0, p, "k", 1); err != nil {
		t.Fatal(err)
	}
	ttl, _ := do(t, c, "PTTL", prefix+":{idle:k}").AsInt64()
	// One cell of 100 ms, plus the default slack of one second, rounded up to 16 ms.
	if ttl <= 1000 || ttl > 1104 {
		t.Errorf("PTTL %v, want 100ms + 1s slack, rounded up to 16 ms", ttl)
	}
}

func TestReset(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	p := sluice.MustPolicy("reset", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})
	if d, _ := s.Check(ctx, t0, p, "k", 1); !d.Allowed {
		t.Fatal("first check denied")
	}
	if d, _ := s.Check(ctx, t0, p, "k", 1); d.Allowed {
		t.Fatal("second check allowed")
	}
	if err := s.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Check(ctx, t0, p, "k", 1); err != nil || !d.Allowed {
		t.Errorf("check after Reset = %+v, %v", d, err)
	}
}

// TestPoliciesWithColonsKeepApart checks two limits whose keys would once have been one: policy
// "login:ip" for key "1.2.3.4", and policy "login" for key "ip:1.2.3.4".
func TestPoliciesWithColonsKeepApart(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	one := sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}}
	byIP, login := sluice.MustPolicy("login:ip", one), sluice.MustPolicy("login", one)
	if d, err := s.Check(ctx, t0, byIP, "1.2.3.4", 1); err != nil || !d.Allowed {
		t.Fatalf("login:ip/1.2.3.4: %+v, %v", d, err)
	}
	if d, err := s.Check(ctx, t0, login, "ip:1.2.3.4", 1); err != nil || !d.Allowed {
		t.Fatalf("login/ip:1.2.3.4 was denied by login:ip/1.2.3.4's spending: %+v, %v", d, err)
	}
	if d, err := s.Check(ctx, t0, byIP, "1.2.3.4", 1); err != nil || d.Allowed {
		t.Fatalf("login:ip/1.2.3.4, spent: %+v, %v", d, err)
	}
}

// closedPort returns a local address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableIsUnavailable(t *testing.T) {
	s, err := redisstore.Open("redis://" + closedPort(t) + "?dial_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := sluice.MustPolicy("down", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"Ping", func() error { return s.Ping(ctx) }},
		{"Check", func() error { _, err := s.Check(ctx, t0, p, "k", 1); return err }},
		{"Check at server clock", func() error { _, err := s.Check(ctx, 0, p, "k", 1); return err }},
		{"CheckMany", func() error { return s.CheckMany(ctx, t0, p, []string{"a", "b"}, 1, make([]sluice.Decision, 2)) }},
		{"CheckMany at server clock", func() error { return s.CheckMany(ctx, 0, p, []string{"a"}, 1, make([]sluice.Decision, 1)) }},
		{"Reset", func() error { return s.Reset(ctx, p, "k") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, sluice.ErrUnavailable) {
				t.Errorf("error %v, want sluice.ErrUnavailable", err)
			}
		})
	}
}

func TestDeadlineIsUnavailable(t *testing.T) {
	s, _, _ := newStore(t)
	p := sluice.MustPolicy("deadline", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.Check(ctx, t0, p, "k", 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("error %v, want sluice.ErrUnavailable", err)
	}
}

func TestClosed(t *testing.T) {
	s, _, _ := newStore(t)
	s.Close()
	p := sluice.MustPolicy("closed", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	if _, err := s.Check(context.Background(), t0, p, "k", 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("error %v, want sluice.ErrClosed", err)
	}
}
