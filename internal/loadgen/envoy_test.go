package loadgen

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/envoy"
	"github.com/sluicehq/sluice/store/memory"
)

// startEnvoy serves sluice's Envoy service (server/envoy) over the embedded store on a fixed clock,
// on a loopback gRPC listener, with the rule file given (YAML text).
func startEnvoy(t *testing.T, rules string) string {
	t.Helper()
	now := func() int64 { return 1_700_000_055_000 } // no window ends during a test
	store := memory.New(memory.Config{Now: now, SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	cfg, err := config.Parse([]byte("store: memory\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, store, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r, err := envoy.Parse("bench.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(srv, r)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetClock(now)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func TestRunEnvoy(t *testing.T) {
	addr := startEnvoy(t, `
domain: bench
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`)
	tight := startEnvoy(t, `
domain: tight
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 4}
`)
	tests := []struct {
		name        string
		addr        string
		domain      string
		batch       int
		keys        int
		cost        int64
		wantAllowed func(s *Summary) bool
	}{
		{"unary", addr, "bench", 0, 50, 1, func(s *Summary) bool { return s.Allowed == s.Checks }},
		{"batch", addr, "bench", 100, 50, 1, func(s *Summary) bool { return s.Allowed == s.Checks }},
		{"cost", addr, "bench", 3, 50, 7, func(s *Summary) bool { return s.Allowed == s.Checks }},
		// A domain no file defines answers OK for every descriptor, as envoyproxy/ratelimit does.
		{"unknown domain", addr, "other", 5, 10, 1, func(s *Summary) bool { return s.Allowed == s.Checks }},
		// 3 keys × 4 a key, the first call's included: 12 allowed in all, the rest denied.
		{"denials", tight, "tight", 0, 3, 1, func(s *Summary) bool { return s.Allowed == 12 && s.Denied > 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Run(context.Background(), Config{Target: tt.addr, Proto: Envoy, Policy: tt.domain,
				Keys: tt.keys, Concurrency: 4, Conns: 2, Duration: 300 * time.Millisecond, Batch: tt.batch, Cost: tt.cost})
			if err != nil {
				t.Fatal(err)
			}
			batch := int64(max(tt.batch, 1))
			switch {
			case s.Calls == 0 || s.Errors != 0:
				t.Errorf("calls %d errors %d (%s)", s.Calls, s.Errors, s.FirstError)
			case s.Checks != s.Calls*batch:
				t.Errorf("checks %d, want calls %d × %d", s.Checks, s.Calls, batch)
			case s.Allowed+s.Denied != s.Checks || !tt.wantAllowed(s):
				t.Errorf("allowed %d denied %d of %d checks", s.Allowed, s.Denied, s.Checks)
			case s.FailOpen != 0:
				t.Errorf("fail open %d", s.FailOpen)
			}
		})
	}
}

func TestRunEnvoyErrors(t *testing.T) {
	// A rule naming a policy the (unvalidated) config lacks: every call is NOT_FOUND.
	addr := startEnvoy(t, "domain: bench\ndescriptors: [{key: key, rate_limit: {policy: missing}}]\n")
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"server error fails the first call", Config{Target: addr, Proto: Envoy, Policy: "bench", Keys: 1}, "first call"},
		{"cost above hits_addend", Config{Target: addr, Proto: Envoy, Policy: "bench", Keys: 1, Cost: 1 << 32}, "hits_addend"},
		{"too many descriptors", Config{Target: addr, Proto: Envoy, Policy: "bench", Keys: 1, Batch: 1001}, "batch 1001"},
		{"unknown proto", Config{Target: addr, Proto: "envoy2", Policy: "bench", Keys: 1}, "want grpc, http, gubernator or envoy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Concurrency, tt.cfg.Conns, tt.cfg.Duration = 1, 1, 100*time.Millisecond
			_, err := Run(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Run = %v, want an error with %q", err, tt.err)
			}
		})
	}
}

func TestEnvoyOutcome(t *testing.T) {
	ok := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 10}}
	bare := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	over := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	unknown := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_UNKNOWN}
	failOpen := []*corev3.HeaderValue{{Key: "sluice-fail-mode", Value: "open"}}
	tests := []struct {
		name     string
		statuses []*rlsv3.RateLimitResponse_DescriptorStatus
		headers  []*corev3.HeaderValue
		n        int
		want     outcome
		err      string
	}{
		{name: "all OK", statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok, bare, ok}, n: 3, want: outcome{allowed: 3}},
		{name: "one over", statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok, over}, n: 2, want: outcome{allowed: 1}},
		// Under the fail-mode header, the OKs without numbers were the fail mode's; the others a limit's.
		{name: "fail open", statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{bare, ok, bare}, headers: failOpen, n: 3,
			want: outcome{allowed: 3, failOpen: 2}},
		{name: "fewer statuses", statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok}, n: 2, err: "answered 1 statuses"},
		{name: "unknown code", statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok, unknown}, n: 2, err: "descriptor 1: status UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := envoyOutcome(&rlsv3.RateLimitResponse{Statuses: tt.statuses, ResponseHeadersToAdd: tt.headers}, tt.n)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
