package grpcapi_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/grpcapi"
)

func TestScopes(t *testing.T) {
	set, err := bearer.Parse([]byte("check:c1\nadmin:a1\nbare1\n"))
	if err != nil {
		t.Fatal(err)
	}
	live := bearer.NewLive(set)
	conn := serve(t, setup{serverOpts: []grpc.ServerOption{
		grpc.UnaryInterceptor(grpcapi.UnaryScopes(live)),
		grpc.StreamInterceptor(grpcapi.StreamScopes(live)),
	}})
	rl := sluicev1.NewRateLimiterClient(conn)
	calls := map[string]func(context.Context) error{
		"check": func(ctx context.Context) error {
			_, err := rl.Check(ctx, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k"})
			return err
		},
		"peek": func(ctx context.Context) error {
			_, err := rl.Peek(ctx, &sluicev1.PeekRequest{Policy: "partner-api", Key: "k"})
			return err
		},
		"admit": func(ctx context.Context) error {
			_, err := sluicev1.NewConcurrencyClient(conn).Admit(ctx, &sluicev1.AdmitRequest{Name: "jobs", Key: "k", Holder: "h", Limit: 2, TtlMs: 1000})
			return err
		},
		"reset": func(ctx context.Context) error {
			_, err := rl.Reset(ctx, &sluicev1.ResetRequest{Policy: "partner-api", Key: "k"})
			return err
		},
		"refund": func(ctx context.Context) error {
			_, err := rl.Refund(ctx, &sluicev1.RefundRequest{Policy: "partner-api", Key: "k", Cost: 1})
			return err
		},
		"settle": func(ctx context.Context) error {
			_, err := rl.Settle(ctx, &sluicev1.SettleRequest{Policy: "partner-api", Key: "k", Reserved: 2, Actual: 1})
			return err
		},
	}
	tests := []struct {
		name, call, token string
		want              codes.Code
	}{
		{"check token checks", "check", "c1", codes.OK},
		{"check token peeks", "peek", "c1", codes.OK},
		{"check token admits", "admit", "c1", codes.OK},
		{"check token cannot reset", "reset", "c1", codes.PermissionDenied},
		{"check token cannot refund", "refund", "c1", codes.PermissionDenied},
		{"check token cannot settle", "settle", "c1", codes.PermissionDenied},
		{"admin token checks", "check", "a1", codes.OK},
		{"admin token resets", "reset", "a1", codes.OK},
		{"admin token refunds", "refund", "a1", codes.OK},
		{"admin token settles", "settle", "a1", codes.OK},
		{"bare token settles", "settle", "bare1", codes.OK},
		{"unknown token cannot check", "check", "zz", codes.Unauthenticated},
		{"unknown token cannot reset", "reset", "zz", codes.Unauthenticated},
		{"no token", "reset", "", codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tt.token)
			}
			err := calls[tt.call](ctx)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("%s: %v, want %v", tt.call, err, tt.want)
			}
			if tt.want == codes.PermissionDenied {
				if msg := status.Convert(err).Message(); msg != "/sluice.v1.RateLimiter/"+title(tt.call)+" needs a token of scope admin" {
					t.Errorf("message %q does not name the scope", msg)
				}
			}
		})
	}
}

func TestScopesReload(t *testing.T) {
	live := bearer.NewLive(bearer.Of("old"))
	conn := serve(t, setup{serverOpts: []grpc.ServerOption{grpc.UnaryInterceptor(grpcapi.UnaryScopes(live))}})
	rl := sluicev1.NewRateLimiterClient(conn)
	with := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
	}
	if _, err := rl.Reset(with("old"), &sluicev1.ResetRequest{Policy: "partner-api", Key: "k"}); err != nil {
		t.Fatalf("old token before the swap: %v", err)
	}
	next, err := bearer.Parse([]byte("check:new\n"))
	if err != nil {
		t.Fatal(err)
	}
	live.Store(next)
	if _, err := rl.Check(with("old"), &sluicev1.CheckRequest{Policy: "partner-api", Key: "k"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("old token after the swap: %v, want UNAUTHENTICATED", err)
	}
	if _, err := rl.Check(with("new"), &sluicev1.CheckRequest{Policy: "partner-api", Key: "k"}); err != nil {
		t.Errorf("new token checks: %v", err)
	}
	if _, err := rl.Reset(with("new"), &sluicev1.ResetRequest{Policy: "partner-api", Key: "k"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("new check token resets: %v, want PERMISSION_DENIED", err)
	}
}

func title(s string) string { return string(s[0]-'a'+'A') + s[1:] }
