package grpcstatus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
		msg  string // "": the error's own text
	}{
		{"invalid", &sluice.InvalidError{Field: "key", Reason: "must not be empty"}, codes.InvalidArgument, ""},
		{"unknown policy", fmt.Errorf("%w %q", sluice.ErrUnknownPolicy, "x"), codes.NotFound, ""},
		{"unavailable", fmt.Errorf("%w: dial tcp 127.0.0.1:6390: connect: connection refused", sluice.ErrUnavailable), codes.Unavailable, "store unavailable"},
		{"closed store", sluice.ErrClosed, codes.Unavailable, "store closed"},
		{"unsupported", sluice.ErrUnsupported, codes.Unimplemented, ""},
		{"anything else", errors.New("redis: READONLY 10.0.0.7:6379"), codes.Internal, "internal error"},
		{"caller cancelled", fmt.Errorf("store: %w", context.Canceled), codes.Canceled, context.Canceled.Error()},
		{"caller's deadline", context.DeadlineExceeded, codes.DeadlineExceeded, context.DeadlineExceeded.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := status.FromError(Of(tt.err))
			if st.Code() != tt.want {
				t.Errorf("Of(%v) = %v, want %v", tt.err, st.Code(), tt.want)
			}
			want := tt.msg
			if want == "" {
				want = tt.err.Error()
			}
			if st.Message() != want {
				t.Errorf("Of(%v) says %q, want %q", tt.err, st.Message(), want)
			}
		})
	}
}
