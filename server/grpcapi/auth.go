package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server/bearer"
)

// healthPrefix names the health service's methods, which auth leaves open: orchestrators' gRPC
// probes (Kubernetes' among them) cannot send a token, and health reveals nothing.
const healthPrefix = "/grpc.health.v1.Health/"

// UnaryAuth returns an interceptor that admits a unary call only if its "authorization" metadata
// is "Bearer <token>" for one of tokens, each with every right; any other call fails with
// UNAUTHENTICATED. Health checks are always admitted. Empty tokens are ignored, and with no token
// left every call is admitted: auth is off.
func UnaryAuth(tokens []string) grpc.UnaryServerInterceptor { return UnaryScopes(liveOf(tokens)) }

// StreamAuth is UnaryAuth for streaming calls, such as reflection and health's Watch.
func StreamAuth(tokens []string) grpc.StreamServerInterceptor { return StreamScopes(liveOf(tokens)) }

// UnaryScopes is UnaryAuth with scoped tokens, read on each call so that a reload takes effect at
// once; nil means auth is off. A known token without the scope a method needs fails with
// PERMISSION_DENIED: Reset, Refund, Settle, the overrides' methods (reads included) and methods
// not listed in checkMethods need bearer.Admin.
func UnaryScopes(tokens *bearer.Live) grpc.UnaryServerInterceptor {
	a := &auth{tokens: tokens}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamScopes is UnaryScopes for streaming calls.
func StreamScopes(tokens *bearer.Live) grpc.StreamServerInterceptor {
	a := &auth{tokens: tokens}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// checkMethods are the methods a check token may call; any other (but health) needs admin, so
// that a method added later is closed to check tokens until listed here.
var checkMethods = map[string]bool{
	sluicev1.RateLimiter_Check_FullMethodName:                        true,
	sluicev1.RateLimiter_CheckMany_FullMethodName:                    true,
	sluicev1.RateLimiter_CheckAll_FullMethodName:                     true,
	sluicev1.RateLimiter_Peek_FullMethodName:                         true,
	sluicev1.RateLimiter_Forecast_FullMethodName:                     true,
	sluicev1.Concurrency_Admit_FullMethodName:                        true,
	sluicev1.Concurrency_Heartbeat_FullMethodName:                    true,
	sluicev1.Concurrency_Release_FullMethodName:                      true,
	sluicev1.Usage_Record_FullMethodName:                             true,
	sluicev1.Usage_Watch_FullMethodName:                              true,
	"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":   true,
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
}

// liveOf gives tokens every right; with no non-empty token it returns nil: auth off.
func liveOf(tokens []string) *bearer.Live {
	if s := bearer.Of(tokens...); s.Len() > 0 {
		return bearer.NewLive(s)
	}
	return nil
}

type auth struct {
	tokens *bearer.Live
}

func (a *auth) check(ctx context.Context, method string) error {
	if a.tokens.Load() == nil || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) == 0 {
		return status.Error(codes.Unauthenticated, "missing bearer token")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return status.Error(codes.Unauthenticated, `authorization must be "Bearer <token>"`)
	}
	need := bearer.Admin
	if checkMethods[method] {
		need = bearer.Check
	}
	switch a.tokens.Authorize(token, need) {
	case bearer.Unauthenticated:
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	case bearer.Forbidden:
		return status.Errorf(codes.PermissionDenied, "%s needs a token of scope %s", method, need)
	}
	return nil
}
