package storeerr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storeerr"
)

func TestUnavailable(t *testing.T) {
	cause := errors.New("dial tcp 127.0.0.1:6390: connection refused")
	invalid := &sluice.InvalidError{Field: "key", Reason: "must not be empty"}
	marked := storeerr.Unavailable("redis store", cause)
	tests := []struct {
		name  string
		err   error
		want  error  // the error returned as it is, if not nil
		text  string // the text of a newly marked error
		cause error  // what the marked error still matches
	}{
		{"nil", nil, nil, "", nil},
		{"a backend failure", cause, nil, "sluice: store unavailable: redis store: " + cause.Error(), cause},
		{"a deadline", context.DeadlineExceeded, nil, "sluice: store unavailable: redis store: context deadline exceeded", context.DeadlineExceeded},
		{"bad input stays bad input", invalid, invalid, "", nil},
		{"marked once only", marked, marked, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storeerr.Unavailable("redis store", tt.err)
			switch {
			case tt.err == nil:
				if got != nil {
					t.Fatalf("got %v, want nil", got)
				}
			case tt.want != nil:
				if got != tt.want {
					t.Fatalf("got %v, want %v unchanged", got, tt.want)
				}
			default:
				if !errors.Is(got, sluice.ErrUnavailable) || !errors.Is(got, tt.cause) || got.Error() != tt.text {
					t.Fatalf("got %q, want %q matching ErrUnavailable and its cause", got, tt.text)
				}
			}
		})
	}
}
