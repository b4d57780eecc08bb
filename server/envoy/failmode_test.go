package envoy

import (
	"context"
	"maps"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/store/memory"
)

// TestFailModeHeader runs the Service over a store that cannot answer: a fail-open request is OK
// with sluice-fail-mode: open and claims no limit; a fail-closed one is UNAVAILABLE.
func TestFailModeHeader(t *testing.T) {
	down := memory.New(memory.Config{SweepInterval: -1})
	down.Close() // every call fails, as an unreachable store's does
	e := &env{}
	e.clock.Store(t0)
	e.start(t, down, policies+`
  strict: {strategy: fixedWindow, limit: 5, window: 1m, failMode: closed}
`, `
domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-ip}
  - key: client
    rate_limit: {policy: tb}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: strict
    rate_limit: {policy: strict}
`)
	tests := []struct {
		name    string
		descs   []string
		headers map[string]string
	}{
		{"rule limit and policy", []string{"ip=1", "client=c"}, map[string]string{FailModeHeader: "open"}},
		{"with a shadow rule", []string{"ip=1", "shadow=s"}, map[string]string{FailModeHeader: "open"}},
		{"shadow rule alone", []string{"shadow=s"}, map[string]string{}},
		{"nothing matched", []string{"nothing=here"}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var descs []*rlv3.RateLimitDescriptor
			for _, d := range tt.descs {
				descs = append(descs, desc(d))
			}
			resp := e.ask(t, "edge", 0, descs...)
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("overall_code %v, want OK", resp.GetOverallCode())
			}
			if got := headerMap(resp.GetResponseHeadersToAdd()); !maps.Equal(got, tt.headers) {
				t.Errorf("headers %v, want %v", got, tt.headers)
			}
			for i, st := range resp.GetStatuses() {
				if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset() != nil {
					t.Errorf("status %d: %v; want OK and no limit", i, st)
				}
			}
		})
	}
	t.Run("fail closed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds(desc("ip=1"), desc("strict=s"))})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%v, want UNAVAILABLE", err)
		}
	})
}
