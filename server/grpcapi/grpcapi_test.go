package grpcapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/grpcapi"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the fixed instant (epoch ms) the tests decide at, with client time allowed.
const t0 = int64(1_700_000_000_000)

const testConfig = `
policies:
  partner-api:               # 100 a minute, bursting to 100
    strategy: tokenBucket
    capacity: 100
    refillPerSec: 1.6666666666666667
  login-ip:
    strategy: fixedWindow
    limit: 5
    window: 15m
  login-account:
    strategy: fixedWindow
    limit: 2
    window: 15m
  gpt-4o:                    # 2 requests and 1000 tokens a minute
    limits:
      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}
      - {name: tokens, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}
  strict:
    failMode: closed
    strategy: tokenBucket
    capacity: 10
    refillPerSec: 1
`

type setup struct {
	store           sluice.Store // nil: a fresh memory store
	allowClientTime bool
	serverOpts      []grpc.ServerOption
}

// serve starts a gRPC server with the RateLimiter, health and reflection services on a loopback
// port and returns a client connection to it.
func serve(t *testing.T, s setup) *grpc.ClientConn {
	t.Helper()
	if s.store == nil {
		mem := memory.New(memory.Config{SweepInterval: -1})
		t.Cleanup(func() { mem.Close() })
		s.store = mem
	}
	cfg, err := config.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, s.store, server.Options{
		AllowClientTime: s.allowClientTime,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(s.serverOpts...)
	grpcapi.Register(gs, srv)
	return dial(t, gs)
}

// dial serves gs on a free local port until the test ends and returns a client connection to it.
func dial(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func client(t *testing.T) sluicev1.RateLimiterClient {
	t.Helper()
	return sluicev1.NewRateLimiterClient(serve(t, setup{allowClientTime: true}))
}

func check(t *testing.T, c sluicev1.RateLimiterClient, req *sluicev1.CheckRequest) *sluicev1.Decision {
	t.Helper()
	d, err := c.Check(t.Context(), req)
	if err != nil {
		t.Fatalf("Check(%v): %v", req, err)
	}
	return d
}

// single is a decision of a single-limit policy.
func single(allowed bool, limit, remaining, resetAt, retry int64) *sluicev1.Decision {
	d := &sluicev1.Decision{Allowed: allowed, Limit: limit, Remaining: remaining, ResetAt: resetAt, RetryAfterMs: retry, DeniedBy: -1}
	if !allowed {
		d.DeniedBy = 0
	}
	return d
}

func TestRPCs(t *testing.T) {
	partner := func(key string, cost int64) *sluicev1.CheckRequest {
		return &sluicev1.CheckRequest{Policy: "partner-api", Key: key, Cost: cost, Now: t0}
	}
	// One token of partner-api refills every 600 ms; 100 refill in a minute.
	tests := []struct {
		name  string
		setup []*sluicev1.CheckRequest // checks made first
		call  func(context.Context, sluicev1.RateLimiterClient) (proto.Message, error)
		want  proto.Message
	}{
		{
			name: "check with cost 0 spends 1",
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Check(ctx, partner("k", 0))
			},
			want: single(true, 100, 99, t0+600, 0),
		},
		{
			name: "check with cost",
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Check(ctx, partner("k", 40))
			},
			want: single(true, 100, 60, t0+40*600, 0),
		},
		{
			name:  "check denied is a response",
			setup: []*sluicev1.CheckRequest{partner("k", 95)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Check(ctx, partner("k", 10))
			},
			want: single(false, 100, 5, t0+95*600, 5*600),
		},
		{
			name:  "check many decides each key alone",
			setup: []*sluicev1.CheckRequest{partner("b", 100)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.CheckMany(ctx, &sluicev1.CheckManyRequest{Policy: "partner-api", Keys: []string{"a", "b", "c"}, Cost: 2, Now: t0})
			},
			want: &sluicev1.CheckManyResponse{Decisions: []*sluicev1.Decision{
				single(true, 100, 98, t0+1200, 0),
				single(false, 100, 0, t0+60_000, 1200),
				single(true, 100, 98, t0+1200, 0),
			}},
		},
		{
			name: "check many of no keys",
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.CheckMany(ctx, &sluicev1.CheckManyRequest{Policy: "partner-api", Now: t0})
			},
			want: &sluicev1.CheckManyResponse{},
		},
		{
			name:  "peek consumes nothing",
			setup: []*sluicev1.CheckRequest{partner("k", 30)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: t0})
			},
			want: single(true, 100, 70, t0+30*600, 0),
		},
		{
			name:  "forecast of an empty bucket",
			setup: []*sluicev1.CheckRequest{partner("k", 100)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Forecast(ctx, &sluicev1.ForecastRequest{Policy: "partner-api", Key: "k", Cost: 2, Now: t0})
			},
			want: &sluicev1.Forecast{SpendableNow: 0, NextReplenishAt: t0 + 600, FullAt: t0 + 60_000},
		},
		{
			name: "forecast of a fresh key",
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.Forecast(ctx, &sluicev1.ForecastRequest{Policy: "partner-api", Key: "k", Cost: 10, Now: t0})
			},
			want: &sluicev1.Forecast{SpendableNow: 10, NextReplenishAt: t0, FullAt: t0},
		},
		{
			name:  "refund gives back",
			setup: []*sluicev1.CheckRequest{partner("k", 50)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				if _, err := c.Refund(ctx, &sluicev1.RefundRequest{Policy: "partner-api", Key: "k", Cost: 20, Now: t0}); err != nil {
					return nil, err
				}
				if _, err := c.Refund(ctx, &sluicev1.RefundRequest{Policy: "partner-api", Key: "k", Now: t0}); err != nil { // cost 0: 1
					return nil, err
				}
				return c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: t0})
			},
			want: single(true, 100, 71, t0+29*600, 0),
		},
		{
			name:  "settle debits past the reservation",
			setup: []*sluicev1.CheckRequest{partner("k", 50)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				if _, err := c.Settle(ctx, &sluicev1.SettleRequest{Policy: "partner-api", Key: "k", Reserved: 50, Actual: 80, Now: t0}); err != nil {
					return nil, err
				}
				return c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: t0})
			},
			want: single(true, 100, 20, t0+80*600, 0),
		},
		{
			name:  "reset forgets",
			setup: []*sluicev1.CheckRequest{partner("k", 100)},
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				if _, err := c.Reset(ctx, &sluicev1.ResetRequest{Policy: "partner-api", Key: "k"}); err != nil {
					return nil, err
				}
				return c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: t0})
			},
			want: single(true, 100, 100, t0, 0),
		},
		{
			name: "check all allowed",
			call: func(ctx context.Context, c sluicev1.RateLimiterClient) (proto.Message, error) {
				return c.CheckAll(ctx, &sluicev1.CheckAllRequest{Now: t0, Items: []*sluicev1.Item{
					{Policy: "partner-api", Key: "k", Cost: 3},
					{Policy: "login-account", Key: "alice"},
				}})
			},
			// The binding part is the one with the least remaining.
			want: &sluicev1.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAt: t0 + 15*60_000 - t0%(15*60_000), DeniedBy: -1,
				Parts: []*sluicev1.Decision{
					single(true, 100, 97, t0+3*600, 0),
					single(true, 2, 1, t0+15*60_000-t0%(15*60_000), 0),
				}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t)
			for _, req := range tt.setup {
				check(t, c, req)
			}
			got, err := tt.call(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

// Over gRPC: partner-api takes 100 checks at one instant, denies the 101st with a retry of
// 600 ms, and allows again 600 ms later.
func TestPartnerAPIScenario(t *testing.T) {
	c := client(t)
	for i := 1; i <= 100; i++ {
		d := check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "key42", Now: t0})
		if !d.GetAllowed() || d.GetRemaining() != int64(100-i) || d.GetLimit() != 100 {
			t.Fatalf("check %d = %v, want allowed with %d remaining", i, d, 100-i)
		}
	}
	d := check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "key42", Now: t0})
	if d.GetAllowed() || d.GetRetryAfterMs() != 600 || d.GetDeniedBy() != 0 || d.GetRemaining() != 0 {
		t.Fatalf("101st check = %v, want denied with retry_after_ms 600, denied_by 0", d)
	}
	if d := check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "key42", Now: t0 + 599}); d.GetAllowed() {
		t.Fatalf("check at t0+599 = %v, want denied", d)
	}
	if d := check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "key42", Now: t0 + d.GetRetryAfterMs()}); !d.GetAllowed() {
		t.Fatalf("check at t0+600 = %v, want allowed", d)
	}
}

// Composite policies and CheckAll report the denying part in denied_by and every part in parts.
func TestDeniedByAndParts(t *testing.T) {
	type step struct {
		req          *sluicev1.CheckRequest
		items        []*sluicev1.Item // CheckAll instead of Check when set
		wantAllowed  bool
		wantDeniedBy int32
		wantParts    []bool // each part's allowed
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "gpt-4o denied by its request limit",
			steps: []step{
				{req: &sluicev1.CheckRequest{Policy: "gpt-4o", Key: "u", Cost: 100, Now: t0}, wantAllowed: true, wantDeniedBy: -1, wantParts: []bool{true, true}},
				{req: &sluicev1.CheckRequest{Policy: "gpt-4o", Key: "u", Cost: 100, Now: t0}, wantAllowed: true, wantDeniedBy: -1, wantParts: []bool{true, true}},
				{req: &sluicev1.CheckRequest{Policy: "gpt-4o", Key: "u", Cost: 100, Now: t0}, wantDeniedBy: 0, wantParts: []bool{false, true}},
			},
		},
		{
			name: "gpt-4o denied by its token limit",
			steps: []step{
				{req: &sluicev1.CheckRequest{Policy: "gpt-4o", Key: "u", Cost: 1000, Now: t0}, wantAllowed: true, wantDeniedBy: -1, wantParts: []bool{true, true}},
				{req: &sluicev1.CheckRequest{Policy: "gpt-4o", Key: "u", Cost: 1, Now: t0}, wantDeniedBy: 1, wantParts: []bool{true, false}},
			},
		},
		{
			name: "login pair denied by the account",
			steps: []step{
				{items: []*sluicev1.Item{{Policy: "login-ip", Key: "10.0.0.1"}, {Policy: "login-account", Key: "alice"}}, wantAllowed: true, wantDeniedBy: -1, wantParts: []bool{true, true}},
				{items: []*sluicev1.Item{{Policy: "login-ip", Key: "10.0.0.1"}, {Policy: "login-account", Key: "alice"}}, wantAllowed: true, wantDeniedBy: -1, wantParts: []bool{true, true}},
				{items: []*sluicev1.Item{{Policy: "login-ip", Key: "10.0.0.1"}, {Policy: "login-account", Key: "alice"}}, wantDeniedBy: 1, wantParts: []bool{true, false}},
				{items: []*sluicev1.Item{{Policy: "login-ip", Key: "10.0.0.1"}, {Policy: "login-account", Key: "alice"}}, wantDeniedBy: 1, wantParts: []bool{true, false}},
				// The denied attempts spent nothing of the IP's budget: 3 of 5 are left.
				{req: &sluicev1.CheckRequest{Policy: "login-ip", Key: "10.0.0.1", Now: t0}, wantAllowed: true, wantDeniedBy: -1},
				{req: &sluicev1.CheckRequest{Policy: "login-ip", Key: "10.0.0.1", Now: t0}, wantAllowed: true, wantDeniedBy: -1},
				{req: &sluicev1.CheckRequest{Policy: "login-ip", Key: "10.0.0.1", Now: t0}, wantAllowed: true, wantDeniedBy: -1},
				{req: &sluicev1.CheckRequest{Policy: "login-ip", Key: "10.0.0.1", Now: t0}, wantDeniedBy: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t)
			for i, s := range tt.steps {
				var d *sluicev1.Decision
				var err error
				if s.items != nil {
					d, err = c.CheckAll(t.Context(), &sluicev1.CheckAllRequest{Items: s.items, Now: t0})
				} else {
					d, err = c.Check(t.Context(), s.req)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				var parts []bool
				for _, p := range d.GetParts() {
					parts = append(parts, p.GetAllowed())
				}
				if d.GetAllowed() != s.wantAllowed || d.GetDeniedBy() != s.wantDeniedBy || !slices.Equal(parts, s.wantParts) {
					t.Fatalf("step %d = %v, want allowed %v, denied_by %d, parts allowed %v", i, d, s.wantAllowed, s.wantDeniedBy, s.wantParts)
				}
				if !d.GetAllowed() && d.GetRetryAfterMs() <= 0 {
					t.Errorf("step %d: denied with retry_after_ms %d, want positive", i, d.GetRetryAfterMs())
				}
			}
		})
	}
}

// closedStore is a memory store already closed: every call fails, as an unreachable store does.
func closedStore(t *testing.T) sluice.Store {
	t.Helper()
	s := memory.New(memory.Config{SweepInterval: -1})
	s.Close()
	return s
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("k", i)
	}
	return out
}

func items(n int) []*sluicev1.Item {
	out := make([]*sluicev1.Item, n)
	for i := range out {
		out[i] = &sluicev1.Item{Policy: "partner-api", Key: fmt.Sprint("k", i)}
	}
	return out
}

func TestErrorCodes(t *testing.T) {
	type call func(context.Context, sluicev1.RateLimiterClient) error
	checkReq := func(req *sluicev1.CheckRequest) call {
		return func(ctx context.Context, c sluicev1.RateLimiterClient) error { _, err := c.Check(ctx, req); return err }
	}
	checkMany := func(req *sluicev1.CheckManyRequest) call {
		return func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.CheckMany(ctx, req)
			return err
		}
	}
	checkAll := func(req *sluicev1.CheckAllRequest) call {
		return func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.CheckAll(ctx, req)
			return err
		}
	}
	tests := []struct {
		name      string
		closed    bool // the store fails every call
		call      call
		want      codes.Code
		wantField string // the BadRequest field violation of INVALID_ARGUMENT
	}{
		{name: "unknown policy", call: checkReq(&sluicev1.CheckRequest{Policy: "nope", Key: "k"}), want: codes.NotFound},
		{name: "unknown policy in check many", call: checkMany(&sluicev1.CheckManyRequest{Policy: "nope", Keys: []string{"k"}}), want: codes.NotFound},
		{name: "unknown policy in check all", call: checkAll(&sluicev1.CheckAllRequest{Items: []*sluicev1.Item{{Policy: "partner-api", Key: "k"}, {Policy: "nope", Key: "k"}}}), want: codes.NotFound},
		{name: "unknown policy in peek", call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Peek(ctx, &sluicev1.PeekRequest{Policy: "nope", Key: "k"})
			return err
		}, want: codes.NotFound},
		{name: "unknown policy in forecast", call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Forecast(ctx, &sluicev1.ForecastRequest{Policy: "nope", Key: "k"})
			return err
		}, want: codes.NotFound},
		{name: "unknown policy in refund", call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Refund(ctx, &sluicev1.RefundRequest{Policy: "nope", Key: "k"})
			return err
		}, want: codes.NotFound},
		{name: "unknown policy in reset", call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Reset(ctx, &sluicev1.ResetRequest{Policy: "nope", Key: "k"})
			return err
		}, want: codes.NotFound},
		{name: "empty key", call: checkReq(&sluicev1.CheckRequest{Policy: "partner-api"}), want: codes.InvalidArgument, wantField: "key"},
		{name: "negative cost", call: checkReq(&sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Cost: -1}), want: codes.InvalidArgument, wantField: "cost"},
		{name: "cost over capacity", call: checkReq(&sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Cost: 101}), want: codes.InvalidArgument, wantField: "cost"},
		{name: "negative now", call: checkReq(&sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Now: -5}), want: codes.InvalidArgument, wantField: "now"},
		{name: "empty key in check many", call: checkMany(&sluicev1.CheckManyRequest{Policy: "partner-api", Keys: []string{"a", ""}}), want: codes.InvalidArgument, wantField: "keys[1]"},
		{name: "1000 keys", call: checkMany(&sluicev1.CheckManyRequest{Policy: "partner-api", Keys: keys(1000)}), want: codes.OK},
		{name: "1001 keys", call: checkMany(&sluicev1.CheckManyRequest{Policy: "partner-api", Keys: keys(1001)}), want: codes.InvalidArgument, wantField: "keys"},
		{name: "1000 items", call: checkAll(&sluicev1.CheckAllRequest{Items: items(1000)}), want: codes.OK},
		{name: "1001 items", call: checkAll(&sluicev1.CheckAllRequest{Items: items(1001)}), want: codes.InvalidArgument, wantField: "items"},
		{name: "no items", call: checkAll(&sluicev1.CheckAllRequest{}), want: codes.InvalidArgument, wantField: "items"},
		{name: "bad item", call: checkAll(&sluicev1.CheckAllRequest{Items: []*sluicev1.Item{{Policy: "partner-api", Key: "k"}, {Policy: "partner-api", Key: "k", Cost: -2}}}), want: codes.InvalidArgument, wantField: "items[1].cost"},
		{name: "fail-closed policy, store down", closed: true, call: checkReq(&sluicev1.CheckRequest{Policy: "strict", Key: "k"}), want: codes.Unavailable},
		{name: "fail-closed item, store down", closed: true, call: checkAll(&sluicev1.CheckAllRequest{Items: []*sluicev1.Item{{Policy: "partner-api", Key: "k"}, {Policy: "strict", Key: "k"}}}), want: codes.Unavailable},
		{name: "fail-open policy, store down", closed: true, call: checkReq(&sluicev1.CheckRequest{Policy: "partner-api", Key: "k"}), want: codes.OK},
		{name: "peek, store down", closed: true, call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k"})
			return err
		}, want: codes.Unavailable},
		{name: "reset, store down", closed: true, call: func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.Reset(ctx, &sluicev1.ResetRequest{Policy: "partner-api", Key: "k"})
			return err
		}, want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup{allowClientTime: true}
			if tt.closed {
				s.store = closedStore(t)
			}
			c := sluicev1.NewRateLimiterClient(serve(t, s))
			err := tt.call(t.Context(), c)
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tt.want)
			}
			if tt.wantField != "" {
				if got := violationField(st); got != tt.wantField {
					t.Errorf("BadRequest field %q, want %q (%v)", got, tt.wantField, err)
				}
			}
		})
	}
}

func violationField(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

// Without --allow-client-time a request carrying now is refused, whatever the operation, and one
// without it is decided by the server's clock.
func TestClientTimeRefused(t *testing.T) {
	tests := []struct {
		name string
		call func(context.Context, sluicev1.RateLimiterClient, int64) error
	}{
		{"check", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.Check(ctx, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Now: now})
			return err
		}},
		{"check many", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.CheckMany(ctx, &sluicev1.CheckManyRequest{Policy: "partner-api", Keys: []string{"k"}, Now: now})
			return err
		}},
		{"check all", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.CheckAll(ctx, &sluicev1.CheckAllRequest{Items: []*sluicev1.Item{{Policy: "partner-api", Key: "k"}}, Now: now})
			return err
		}},
		{"peek", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: now})
			return err
		}},
		{"forecast", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.Forecast(ctx, &sluicev1.ForecastRequest{Policy: "partner-api", Key: "k", Now: now})
			return err
		}},
		{"refund", func(ctx context.Context, c sluicev1.RateLimiterClient, now int64) error {
			_, err := c.Refund(ctx, &sluicev1.RefundRequest{Policy: "partner-api", Key: "k", Now: now})
			return err
		}},
	}
	c := sluicev1.NewRateLimiterClient(serve(t, setup{allowClientTime: false}))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t.Context(), c, t0)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || violationField(st) != "now" {
				t.Fatalf("with now: %v, want INVALID_ARGUMENT on field now", err)
			}
			if err := tt.call(t.Context(), c, 0); err != nil {
				t.Fatalf("without now: %v", err)
			}
		})
	}
}

// pingStore is a memory store whose Ping reports err, for readiness.
type pingStore struct {
	*memory.Store
	err error
}

func (p pingStore) Ping(context.Context) error { return p.err }

func TestHealth(t *testing.T) {
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	tests := []struct {
		name    string
		pingErr error
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
		code    codes.Code
	}{
		{name: "server serving", service: "", want: serving},
		{name: "rate limiter serving", service: "sluice.v1.RateLimiter", want: serving},
		{name: "server not serving when the store is down", pingErr: errors.New("connection refused"), service: "", want: notServing},
		{name: "rate limiter not serving when the store is down", pingErr: errors.New("connection refused"), service: "sluice.v1.RateLimiter", want: notServing},
		{name: "unknown service", service: "nope.v1.Nothing", code: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memory.New(memory.Config{SweepInterval: -1})
			t.Cleanup(func() { mem.Close() })
			hc := healthpb.NewHealthClient(serve(t, setup{store: pingStore{mem, tt.pingErr}}))
			resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: tt.service})
			if status.Code(err) != tt.code {
				t.Fatalf("Check: %v, want code %v", err, tt.code)
			}
			if err == nil && resp.GetStatus() != tt.want {
				t.Errorf("status %v, want %v", resp.GetStatus(), tt.want)
			}
		})
	}
}

// The health status follows the store: a Watch opened while it is down starts NOT_SERVING.
func TestHealthWatchAndList(t *testing.T) {
	mem := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	hc := healthpb.NewHealthClient(serve(t, setup{store: pingStore{mem, errors.New("down")}}))
	stream, err := hc.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "sluice.v1.RateLimiter"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch's first status %v, want NOT_SERVING", first.GetStatus())
	}
	list, err := hc.List(t.Context(), &healthpb.HealthListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "sluice.v1.RateLimiter"} {
		if got := list.GetStatuses()[name].GetStatus(); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("List[%q] = %v, want NOT_SERVING", name, got)
		}
	}
}

func TestReflection(t *testing.T) {
	rc := reflectionpb.NewServerReflectionClient(serve(t, setup{}))
	stream, err := rc.ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection error: %v", e)
		}
		return resp
	}

	resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"sluice.v1.RateLimiter", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("services %v, want %s among them", names, want)
		}
	}
	resp = ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "sluice.v1.Decision"}})
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("no file descriptor for sluice.v1.Decision")
	}
}

func TestAuth(t *testing.T) {
	tokens := []string{"first-secret", "second-secret"}
	tests := []struct {
		name   string
		tokens []string
		header []string // authorization values; none when empty
		want   codes.Code
	}{
		{name: "no header", tokens: tokens, want: codes.Unauthenticated},
		{name: "wrong token", tokens: tokens, header: []string{"Bearer first-secreT"}, want: codes.Unauthenticated},
		{name: "prefix of a token", tokens: tokens, header: []string{"Bearer first"}, want: codes.Unauthenticated},
		{name: "other scheme", tokens: tokens, header: []string{"Basic first-secret"}, want: codes.Unauthenticated},
		{name: "scheme alone", tokens: tokens, header: []string{"Bearer"}, want: codes.Unauthenticated},
		{name: "first token", tokens: tokens, header: []string{"Bearer first-secret"}, want: codes.OK},
		{name: "second token", tokens: tokens, header: []string{"Bearer second-secret"}, want: codes.OK},
		{name: "scheme is case-insensitive", tokens: tokens, header: []string{"bearer second-secret"}, want: codes.OK},
		{name: "empty token never matches", tokens: []string{"", "first-secret"}, header: []string{"Bearer "}, want: codes.Unauthenticated},
		{name: "no tokens: auth off", tokens: nil, want: codes.OK},
		{name: "only empty tokens: auth off", tokens: []string{""}, want: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := serve(t, setup{serverOpts: []grpc.ServerOption{
				grpc.UnaryInterceptor(grpcapi.UnaryAuth(tt.tokens)),
				grpc.StreamInterceptor(grpcapi.StreamAuth(tt.tokens)),
			}})
			ctx := t.Context()
			for _, h := range tt.header {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", h)
			}
			_, err := sluicev1.NewRateLimiterClient(conn).Check(ctx, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k"})
			if status.Code(err) != tt.want {
				t.Errorf("Check: %v, want %v", err, tt.want)
			}
			// Reflection streams are guarded by StreamAuth alike.
			stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			if err == nil {
				// Send reports io.EOF when the server has already ended the stream; the stream's
				// status then comes from Recv, as grpc documents.
				if err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err == nil || errors.Is(err, io.EOF) {
					_, err = stream.Recv()
				}
			}
			if status.Code(err) != tt.want {
				t.Errorf("reflection: %v, want %v", err, tt.want)
			}
			// Probes cannot send a token: health is always open.
			if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("health without a token: %v", err)
			}
		})
	}
}
