// Package grpcmw rate-limits gRPC servers with sluice: a unary server interceptor that answers a
// denied call RESOURCE_EXHAUSTED with a google.rpc.RetryInfo detail, so that clients (and gRPC's
// own retry policies) know when to try again. It is apart from package middleware so that net/http
// users do not import gRPC.
//
// A call let through without a limit consulted (a decision with FailOpen set, or a failed check
// that OnError let through) carries the response header metadata sluice-fail-mode: open; a call
// refused because the limiter was unavailable carries sluice-fail-mode: closed.
package grpcmw

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/middleware"
)

// FailModeKey is the response header metadata key that says a call was let through ("open") or
// turned away ("closed") without a limit consulted, because the limiter could not answer.
const FailModeKey = "sluice-fail-mode"

// failMode sets FailModeKey on the call's response header; best effort, as the call goes on.
func failMode(ctx context.Context, mode string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(FailModeKey, mode))
}

// Options configure UnaryServerInterceptor.
type Options struct {
	// Checker decides; required. *sluice.Limiter and *client.Client satisfy it.
	Checker middleware.Checker
	// Key names the policy, key and cost of a call to fullMethod ("/package.Service/Method"),
	// typically from metadata or the peer in ctx; required. An empty policy lets the call through
	// unchecked, for methods that are not limited (health checks, say).
	Key func(ctx context.Context, fullMethod string) (policy, key string, cost int64)
	// OnError turns a failed check into the call's error; returning nil lets the call through
	// (fail open). Nil means DefaultOnError.
	OnError func(ctx context.Context, fullMethod string, err error) error
}

// UnaryServerInterceptor checks every unary call before its handler runs. It panics if
// opts.Checker or opts.Key is missing: that is a programming error, not a call's.
func UnaryServerInterceptor(opts Options) grpc.UnaryServerInterceptor {
	if opts.Checker == nil || opts.Key == nil {
		panic("grpcmw: UnaryServerInterceptor needs a Checker and a Key")
	}
	if opts.OnError == nil {
		opts.OnError = DefaultOnError
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		policy, key, cost := opts.Key(ctx, info.FullMethod)
		if policy == "" {
			return handler(ctx, req)
		}
		d, err := opts.Checker.Check(ctx, policy, key, cost)
		if err != nil {
			if refused := opts.OnError(ctx, info.FullMethod, err); refused != nil {
				if errors.Is(err, sluice.ErrUnavailable) {
					failMode(ctx, "closed")
				}
				return nil, refused
			}
			failMode(ctx, "open")
			return handler(ctx, req)
		}
		if !d.Allowed {
			return nil, Denied(policy, d)
		}
		if d.FailOpen {
			failMode(ctx, "open")
		}
		return handler(ctx, req)
	}
}

// Denied is the status error of a call that decision d of the named policy denied:
// RESOURCE_EXHAUSTED with a RetryInfo detail holding d's retry.
func Denied(policy string, d sluice.Decision) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded; retry in %v", policy, d.RetryAfter()))
	withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter())})
	if err != nil {
		return st.Err() // a RetryInfo always marshals; the plain status still denies
	}
	return withInfo.Err()
}

// DefaultOnError maps a failed check to a status: UNAVAILABLE when the limiter is unavailable
// (the call may pass soon), INTERNAL for anything else, bad input and unknown policy included (the
// server's configuration is at fault, not the call). The message never carries err's text, which
// may describe the deployment.
func DefaultOnError(_ context.Context, _ string, err error) error {
	if errors.Is(err, sluice.ErrUnavailable) {
		return status.Error(codes.Unavailable, "the rate limiter is unavailable")
	}
	return status.Error(codes.Internal, "the rate limit could not be checked")
}
