package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server/internal/grpcstatus"
)

// maxListLimit is the most overrides one ListOverrides page may ask for, the Table's own bound.
const maxListLimit = 1000

func (s *service) SetOverride(ctx context.Context, req *sluicev1.SetOverrideRequest) (*sluicev1.Override, error) {
	o := overrideOf(req.GetOverride())
	switch ttl := req.GetTtlMs(); {
	case ttl < 0:
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "ttlMs", Reason: fmt.Sprintf("must not be negative, got %d", ttl)})
	case ttl > 0 && o.ExpiresAt != 0:
		// Named as the HTTP API names it.
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "override.expiresAt", Reason: "set ttlMs or expiresAt, not both"})
	case ttl > 0:
		at, err := overrides.ExpiresIn(time.Now().UnixMilli(), ttl)
		if err != nil {
			return nil, grpcstatus.Of(err)
		}
		o.ExpiresAt = at
	}
	t := s.srv.Overrides()
	if err := t.Set(ctx, o); err != nil {
		// The Table names the override's fields; on this wire they sit in the request's override.
		var ie *sluice.InvalidError
		if errors.As(err, &ie) {
			err = &sluice.InvalidError{Field: "override." + ie.Field, Reason: ie.Reason}
		}
		return nil, grpcstatus.Of(err)
	}
	// Read back for UpdatedAt; an override that expired at once is answered as given.
	if got, ok := t.Get(o.Policy, o.Key); ok {
		o = got
	}
	return overrideMsg(o), nil
}

func (s *service) GetOverride(ctx context.Context, req *sluicev1.OverrideRef) (*sluicev1.Override, error) {
	if err := checkRef(req); err != nil {
		return nil, err
	}
	o, ok := s.srv.Overrides().Get(req.GetPolicy(), req.GetKey())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "policy %q has no override for key %q", req.GetPolicy(), req.GetKey())
	}
	return overrideMsg(o), nil
}

func (s *service) DeleteOverride(ctx context.Context, req *sluicev1.OverrideRef) (*sluicev1.DeleteOverrideResponse, error) {
	deleted, err := s.srv.Overrides().Delete(ctx, req.GetPolicy(), req.GetKey())
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.DeleteOverrideResponse{Deleted: deleted}, nil
}

func (s *service) ListOverrides(ctx context.Context, req *sluicev1.ListOverridesRequest) (*sluicev1.ListOverridesResponse, error) {
	if req.GetPolicy() == "" {
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "policy", Reason: "is required"})
	}
	limit := req.GetLimit()
	if limit < 0 || limit > maxListLimit {
		// The Table would clamp it; a client asking for more should learn it gets less.
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d (0 for 100), got %d", maxListLimit, limit)})
	}
	page, next := s.srv.Overrides().List(req.GetPolicy(), req.GetPrefix(), req.GetPageToken(), int(limit))
	out := &sluicev1.ListOverridesResponse{Overrides: make([]*sluicev1.Override, len(page)), NextPageToken: next}
	for i, o := range page {
		out.Overrides[i] = overrideMsg(o)
	}
	return out, nil
}

// checkRef refuses an empty policy or key, which Get would only report as not found.
func checkRef(r *sluicev1.OverrideRef) error {
	switch {
	case r.GetPolicy() == "":
		return grpcstatus.Of(&sluice.InvalidError{Field: "policy", Reason: "is required"})
	case r.GetKey() == "":
		return grpcstatus.Of(&sluice.InvalidError{Field: "key", Reason: "is required"})
	}
	return nil
}

// overrideOf is m as an Override; nil is the zero Override, which Set refuses.
func overrideOf(m *sluicev1.Override) overrides.Override {
	o := overrides.Override{Policy: m.GetPolicy(), Key: m.GetKey(), Plan: m.GetPlan(), ExpiresAt: m.GetExpiresAt(), Reason: m.GetReason()}
	for _, l := range m.GetLimits() {
		o.Limits = append(o.Limits, overrides.Limit{
			Name: l.GetName(), Unit: l.GetUnit(), Strategy: l.GetStrategy(),
			Limit: l.GetLimit(), PeriodMs: l.GetPeriodMs(), Burst: l.GetBurst(),
			Capacity: l.GetCapacity(), RefillPerSec: l.GetRefillPerSec(),
			WindowMs: l.GetWindowMs(), Buckets: int(l.GetBuckets()), Calendar: l.GetCalendar(), TimeZone: l.GetTimezone(),
		})
	}
	return o
}

// overrideMsg is o as a message.
func overrideMsg(o overrides.Override) *sluicev1.Override {
	m := &sluicev1.Override{Policy: o.Policy, Key: o.Key, Plan: o.Plan, ExpiresAt: o.ExpiresAt, Reason: o.Reason, UpdatedAt: o.UpdatedAt}
	for _, l := range o.Limits {
		m.Limits = append(m.Limits, &sluicev1.OverrideLimit{
			Name: l.Name, Unit: l.Unit, Strategy: l.Strategy,
			Limit: l.Limit, PeriodMs: l.PeriodMs, Burst: l.Burst,
			Capacity: l.Capacity, RefillPerSec: l.RefillPerSec,
			WindowMs: l.WindowMs, Buckets: int32(l.Buckets), Calendar: l.Calendar, Timezone: l.TimeZone,
		})
	}
	return m
}
