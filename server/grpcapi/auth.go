package grpcapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// healthPrefix names the health service's methods, which auth leaves open: orchestrators' gRPC
// probes (Kubernetes' among them) cannot send a token, and health reveals nothing.
const healthPrefix = "/grpc.health.v1.Health/"

// UnaryAuth returns an interceptor that admits a unary call only if its "authorization" metadata
// is "Bearer <token>" for one of tokens; any other call fails with UNAUTHENTICATED. Health checks
// are always admitted. Empty tokens are ignored, and with no token left every call is admitted:
// auth is off.
func UnaryAuth(tokens []string) grpc.UnaryServerInterceptor {
	a := newAuth(tokens)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamAuth is UnaryAuth for streaming calls, such as reflection and health's Watch.
func StreamAuth(tokens []string) grpc.StreamServerInterceptor {
	a := newAuth(tokens)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// auth holds the tokens' digests: comparing digests of equal length leaks neither a token's
// length nor, through an early exit, which token was close.
type auth struct {
	digests [][sha256.Size]byte
}

func newAuth(tokens []string) *auth {
	a := &auth{}
	for _, t := range tokens {
		if t != "" {
			a.digests = append(a.digests, sha256.Sum256([]byte(t)))
		}
	}
	return a
}

func (a *auth) check(ctx context.Context, method string) error {
	if len(a.digests) == 0 || strings.HasPrefix(method, healthPrefix) {
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
	got := sha256.Sum256([]byte(token))
	match := 0
	for i := range a.digests {
		match |= subtle.ConstantTimeCompare(got[:], a.digests[i][:])
	}
	if match != 1 {
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	return nil
}
