// Package grpcstatus maps the errors of package server to gRPC statuses, for both gRPC front ends
// (sluice's own API and Envoy's), so that they answer one error alike.
package grpcstatus

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server"
)

// Of maps an error of the Server to a gRPC status error. Bad input keeps its text and names its
// field in a BadRequest detail; a store failure or an unexpected error gets a stable message
// (the details may name the store's address or internals: they go to the server's log).
func Of(err error) error {
	var code codes.Code
	msg := err.Error()
	switch server.CodeOf(err) {
	case server.CodeInvalid:
		code = codes.InvalidArgument
	case server.CodeNotFound:
		code = codes.NotFound
	case server.CodeUnavailable:
		// The store's error names its address and the socket's: a stable message on the wire,
		// the details in the server's (sampled) log.
		code, msg = codes.Unavailable, "store unavailable"
		if errors.Is(err, sluice.ErrClosed) {
			msg = "store closed"
		}
	case server.CodeUnimplemented:
		code = codes.Unimplemented
	case server.CodeNotHeld:
		code = codes.FailedPrecondition
	default:
		// The caller gave up: its own cancellation or deadline is no fault of the server's.
		// Its bare text: what wraps it may name the store's internals.
		for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
			if errors.Is(err, c) {
				return status.FromContextError(c).Err()
			}
		}
		// The text of an unexpected error may describe the store's internals.
		code, msg = codes.Internal, "internal error"
	}
	st := status.New(code, msg)
	var ie *sluice.InvalidError
	if errors.As(err, &ie) {
		// A client can name the offending field without parsing the message.
		detailed, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: ie.Field, Description: ie.Reason},
		}})
		if derr == nil {
			st = detailed
		}
	}
	return st.Err()
}
