package loadgen

import (
	"context"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// EnvoyDescriptorKey is the key of the one entry of every descriptor an Envoy run sends: a
// descriptor is [(EnvoyDescriptorKey, K)] for a bench key K. A rule file matching it counts each
// value apart, in sluice and envoyproxy/ratelimit alike:
//
//	domain: bench
//	descriptors:
//	  - key: key
//	    rate_limit: {unit: hour, requests_per_unit: 1000000000}
const EnvoyDescriptorKey = "key"

// envoyFailModeHeader is the header sluice's Envoy service adds when the store did not answer and
// the fail mode allowed the request (server/envoy.FailModeHeader, not imported to keep the load
// generator free of the server).
const envoyFailModeHeader = "sluice-fail-mode"

// envoyTransport drives Envoy's rate-limit service, ShouldRateLimit, over the same connections as
// the gRPC transport: Policy is the domain, each key one descriptor of one entry, Batch the
// descriptors per request, and Cost the request's hits_addend.
type envoyTransport struct {
	*grpcTransport
}

func newEnvoy(cfg Config) (*envoyTransport, error) {
	g, err := newGRPC(cfg)
	if err != nil {
		return nil, err
	}
	return &envoyTransport{grpcTransport: g}, nil
}

func (t *envoyTransport) caller(worker int) caller {
	c := &envoyCaller{
		client: rlsv3.NewRateLimitServiceClient(t.conns[worker%len(t.conns)]),
		auth:   authContext{token: t.cfg.Token},
		req:    &rlsv3.RateLimitRequest{Domain: t.cfg.Policy, HitsAddend: uint32(t.cfg.Cost)},
	}
	// One descriptor of one entry per key of a call, allocated once and refilled.
	c.descs = make([]*rlv3.RateLimitDescriptor, t.cfg.Batch)
	for i := range c.descs {
		c.descs[i] = &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: EnvoyDescriptorKey}}}
	}
	return c
}

type envoyCaller struct {
	client rlsv3.RateLimitServiceClient
	auth   authContext
	req    *rlsv3.RateLimitRequest
	descs  []*rlv3.RateLimitDescriptor
}

func (c *envoyCaller) call(ctx context.Context, keys []string) (outcome, error) {
	ctx = c.auth.of(ctx)
	if len(keys) > len(c.descs) {
		return outcome{}, fmt.Errorf("envoy: %d keys in a call of at most %d", len(keys), len(c.descs))
	}
	for i, k := range keys {
		c.descs[i].Entries[0].Value = k
	}
	c.req.Descriptors = c.descs[:len(keys)]
	r, err := c.client.ShouldRateLimit(ctx, c.req)
	if err != nil {
		return outcome{}, err
	}
	return envoyOutcome(r, len(keys))
}

// envoyOutcome counts the descriptors of a response of n statuses: OK ones are allowed, OVER_LIMIT
// ones denied. An OK without numbers (no current_limit) in a response carrying sluice's fail-mode
// header was allowed by the fail mode.
func envoyOutcome(r *rlsv3.RateLimitResponse, n int) (outcome, error) {
	statuses := r.GetStatuses()
	if len(statuses) != n {
		return outcome{}, fmt.Errorf("ShouldRateLimit of %d descriptors answered %d statuses", n, len(statuses))
	}
	failMode := false
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == envoyFailModeHeader && h.GetValue() == "open" {
			failMode = true
		}
	}
	var o outcome
	for i, s := range statuses {
		switch s.GetCode() {
		case rlsv3.RateLimitResponse_OK:
			o.allowed++
			if failMode && s.GetCurrentLimit() == nil {
				o.failOpen++
			}
		case rlsv3.RateLimitResponse_OVER_LIMIT:
		default:
			return outcome{}, fmt.Errorf("ShouldRateLimit descriptor %d: status %v", i, s.GetCode())
		}
	}
	return o, nil
}
