package grpcmw_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/middleware/grpcmw"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the instant the store's clock stands still at: 2023-11-14T22:13:20Z in epoch ms.
const t0 int64 = 1_700_000_000_000

func newLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	store := memory.New(memory.Config{Now: func() int64 { return t0 }, SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := sluice.New(store, sluice.MustPolicy("rpc", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// byTenant keys a health Check by its x-tenant metadata and costs it x-cost (default 1); the
// service's other methods are not limited.
func byTenant(policy string) func(ctx context.Context, fullMethod string) (string, string, int64) {
	return func(ctx context.Context, fullMethod string) (string, string, int64) {
		if fullMethod != healthpb.Health_Check_FullMethodName {
			return "", "", 0
		}
		md, _ := metadata.FromIncomingContext(ctx)
		cost := int64(1)
		if v := md.Get("x-cost"); len(v) > 0 {
			cost, _ = strconv.ParseInt(v[0], 10, 64)
		}
		key := "anonymous"
		if v := md.Get("x-tenant"); len(v) > 0 {
			key = v[0]
		}
		return policy, key, cost
	}
}

// serve runs a health server behind the interceptor over an in-process connection, and counts
// the calls that get past it.
func serve(t *testing.T, opts grpcmw.Options) (healthpb.HealthClient, *atomic.Int32) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	var reached atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcmw.UnaryServerInterceptor(opts), count))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn), &reached
}

// stub answers every check with err.
type stub struct{ err error }

func (s stub) Check(context.Context, string, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, s.err
}

func TestUnaryServerInterceptor(t *testing.T) {
	type call struct {
		tenant    string
		cost      string
		wantCode  codes.Code
		wantRetry time.Duration // of the RetryInfo, on RESOURCE_EXHAUSTED
	}
	tests := []struct {
		name  string
		opts  func(t *testing.T) grpcmw.Options
		calls []call
	}{
		{"admits a burst, then denies with retry info", func(t *testing.T) grpcmw.Options {
			return grpcmw.Options{Checker: newLimiter(t), Key: byTenant("rpc")}
		}, []call{
			{"acme", "", codes.OK, 0},
			{"acme", "", codes.OK, 0},
			{"acme", "", codes.ResourceExhausted, time.Second},
			{"globex", "2", codes.OK, 0}, // another key, another budget
			{"initech", "1", codes.OK, 0},
			{"initech", "2", codes.ResourceExhausted, time.Second},
		}},
		{"unknown policy", func(t *testing.T) grpcmw.Options {
			return grpcmw.Options{Checker: newLimiter(t), Key: byTenant("nope")}
		}, []call{{"acme", "", codes.Internal, 0}}},
		{"bad cost", func(t *testing.T) grpcmw.Options {
			return grpcmw.Options{Checker: newLimiter(t), Key: byTenant("rpc")}
		}, []call{{"acme", "3", codes.Internal, 0}}},
		{"unavailable", func(t *testing.T) grpcmw.Options {
			return grpcmw.Options{Checker: stub{sluice.ErrUnavailable}, Key: byTenant("rpc")}
		}, []call{{"acme", "", codes.Unavailable, 0}}},
		{"fail open by OnError", func(t *testing.T) grpcmw.Options {
			return grpcmw.Options{Checker: stub{sluice.ErrUnavailable}, Key: byTenant("rpc"),
				OnError: func(context.Context, string, error) error { return nil }}
		}, []call{{"acme", "", codes.OK, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc, reached := serve(t, tt.opts(t))
			for i, c := range tt.calls {
				md := metadata.Pairs("x-tenant", c.tenant)
				if c.cost != "" {
					md.Append("x-cost", c.cost)
				}
				before := reached.Load()
				_, err := hc.Check(metadata.NewOutgoingContext(context.Background(), md), &healthpb.HealthCheckRequest{})
				st := status.Convert(err)
				if st.Code() != c.wantCode {
					t.Fatalf("call %d: %v, want %v", i, err, c.wantCode)
				}
				if got := reached.Load() > before; got != (c.wantCode == codes.OK) {
					t.Errorf("call %d reached the handler: %v", i, got)
				}
				if c.wantCode != codes.ResourceExhausted {
					continue
				}
				var retry *errdetails.RetryInfo
				for _, d := range st.Details() {
					if r, ok := d.(*errdetails.RetryInfo); ok {
						retry = r
					}
				}
				if retry == nil || retry.GetRetryDelay().AsDuration() != c.wantRetry {
					t.Errorf("call %d: details %v, want a RetryInfo of %v", i, st.Details(), c.wantRetry)
				}
			}
		})
	}
}

// TestUnlimitedMethod: an empty policy lets the call through without asking the Checker.
func TestUnlimitedMethod(t *testing.T) {
	hc, reached := serve(t, grpcmw.Options{
		Checker: stub{errors.New("the checker was asked")},
		Key:     func(context.Context, string) (string, string, int64) { return "", "", 0 },
	})
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if reached.Load() != 1 {
		t.Errorf("%d calls reached the handler, want 1", reached.Load())
	}
}

func TestPanicsWithoutCheckerOrKey(t *testing.T) {
	tests := []struct {
		name string
		opts grpcmw.Options
	}{
		{"no checker", grpcmw.Options{Key: byTenant("rpc")}},
		{"no key", grpcmw.Options{Checker: stub{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			grpcmw.UnaryServerInterceptor(tt.opts)
		})
	}
}

// decided answers every check with d.
type decided struct{ d sluice.Decision }

func (s decided) Check(context.Context, string, string, int64) (sluice.Decision, error) {
	return s.d, nil
}

// TestFailModeMetadata checks sluice-fail-mode on calls decided without a limit.
func TestFailModeMetadata(t *testing.T) {
	letThrough := func(context.Context, string, error) error { return nil }
	tests := []struct {
		name     string
		opts     grpcmw.Options
		wantCode codes.Code
		wantMode string
	}{
		{"a real decision", grpcmw.Options{Checker: newLimiter(t)}, codes.OK, ""},
		{"a fail-open decision", grpcmw.Options{Checker: decided{sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}}}, codes.OK, "open"},
		{"unavailable, refused", grpcmw.Options{Checker: stub{sluice.ErrUnavailable}}, codes.Unavailable, "closed"},
		{"unavailable, let through by OnError", grpcmw.Options{Checker: stub{sluice.ErrUnavailable}, OnError: letThrough}, codes.OK, "open"},
		{"another error, refused", grpcmw.Options{Checker: stub{errors.New("boom")}}, codes.Internal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Key = byTenant("rpc")
			hc, _ := serve(t, tt.opts)
			var md metadata.MD
			_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			if status.Code(err) != tt.wantCode {
				t.Fatalf("%v, want %v", err, tt.wantCode)
			}
			var mode string
			if v := md.Get(grpcmw.FailModeKey); len(v) > 0 {
				mode = v[0]
			}
			if mode != tt.wantMode {
				t.Errorf("%s %q, want %q", grpcmw.FailModeKey, mode, tt.wantMode)
			}
		})
	}
}
