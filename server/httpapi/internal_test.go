package httpapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		msg    string
	}{
		{"invalid", &sluice.InvalidError{Field: "cost", Reason: "bad"}, 400, CodeInvalid, "sluice: invalid cost: bad"},
		{"unknown policy", fmt.Errorf("%w %q", sluice.ErrUnknownPolicy, "p"), 404, CodeNotFound, `sluice: unknown policy "p"`},
		{"unavailable", sluice.ErrUnavailable, 503, CodeUnavailable, "httpapi: store unavailable"},
		{"closed", sluice.ErrClosed, 503, CodeUnavailable, "httpapi: store closed"},
		{"unsupported", sluice.ErrUnsupported, 501, CodeUnimplemented, "sluice: operation not supported"},
		{"anything else", errors.New("redis: 10.1.2.3:6379 refused"), 500, CodeInternal, "httpapi: internal error"},
		{"own", invalidf("x"), 400, CodeInvalid, "httpapi: x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, msg := statusOf(tt.err)
			if status != tt.status || code != tt.code || msg != tt.msg {
				t.Errorf("statusOf = %d %s %q, want %d %s %q", status, code, msg, tt.status, tt.code, tt.msg)
			}
		})
	}
}
