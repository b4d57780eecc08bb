package grpcapi

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
	}{
		{"invalid", &sluice.InvalidError{Field: "key", Reason: "must not be empty"}, codes.InvalidArgument},
		{"unknown policy", fmt.Errorf("%w %q", sluice.ErrUnknownPolicy, "x"), codes.NotFound},
		{"unavailable", fmt.Errorf("%w: timeout", sluice.ErrUnavailable), codes.Unavailable},
		{"closed store", sluice.ErrClosed, codes.Unavailable},
		{"unsupported", sluice.ErrUnsupported, codes.Unimplemented},
		{"anything else", errors.New("boom"), codes.Internal},
		{"caller cancelled", fmt.Errorf("store: %w", context.Canceled), codes.Canceled},
		{"caller's deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(Status(tt.err)); got != tt.want {
				t.Errorf("Status(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
