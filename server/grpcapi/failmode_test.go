package grpcapi_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server/grpcapi"
)

// TestFailMode checks that a store that cannot answer shows: fail_open on the decisions a
// fail-open policy allows, UNAVAILABLE for a fail-closed one, and sluice-fail-mode on both.
func TestFailMode(t *testing.T) {
	c := sluicev1.NewRateLimiterClient(serve(t, setup{store: closedStore(t)}))
	open := &sluicev1.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}
	tests := []struct {
		name string
		call func(opt grpc.CallOption) ([]*sluicev1.Decision, error)
		want []*sluicev1.Decision // nil: UNAVAILABLE
		mode string
	}{
		{"Check, fail open", func(opt grpc.CallOption) ([]*sluicev1.Decision, error) {
			d, err := c.Check(t.Context(), &sluicev1.CheckRequest{Policy: "partner-api", Key: "k"}, opt)
			return []*sluicev1.Decision{d}, err
		}, []*sluicev1.Decision{open}, "open"},
		{"CheckMany, fail open", func(opt grpc.CallOption) ([]*sluicev1.Decision, error) {
			r, err := c.CheckMany(t.Context(), &sluicev1.CheckManyRequest{Policy: "partner-api", Keys: []string{"a", "b"}}, opt)
			return r.GetDecisions(), err
		}, []*sluicev1.Decision{open, open}, "open"},
		{"CheckAll, fail open", func(opt grpc.CallOption) ([]*sluicev1.Decision, error) {
			d, err := c.CheckAll(t.Context(), &sluicev1.CheckAllRequest{Items: items(2)}, opt)
			return []*sluicev1.Decision{d}, err
		}, []*sluicev1.Decision{{Allowed: true, DeniedBy: -1, FailOpen: true, Parts: []*sluicev1.Decision{open, open}}}, "open"},
		{"Check, fail closed", func(opt grpc.CallOption) ([]*sluicev1.Decision, error) {
			d, err := c.Check(t.Context(), &sluicev1.CheckRequest{Policy: "strict", Key: "k"}, opt)
			return []*sluicev1.Decision{d}, err
		}, nil, "closed"},
		{"Peek has no fail mode", func(opt grpc.CallOption) ([]*sluicev1.Decision, error) {
			d, err := c.Peek(t.Context(), &sluicev1.PeekRequest{Policy: "partner-api", Key: "k"}, opt)
			return []*sluicev1.Decision{d}, err
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var md metadata.MD
			got, err := tt.call(grpc.Header(&md))
			if tt.want == nil {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("%v, want UNAVAILABLE", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				for i := range tt.want {
					if !proto.Equal(got[i], tt.want[i]) {
						t.Errorf("decision %d: %v, want %v", i, got[i], tt.want[i])
					}
				}
			}
			var mode string
			if v := md.Get(grpcapi.FailModeKey); len(v) > 0 {
				mode = v[0]
			}
			if mode != tt.mode {
				t.Errorf("%s: %q, want %q", grpcapi.FailModeKey, mode, tt.mode)
			}
		})
	}
}
