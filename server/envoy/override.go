package envoy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
)

// Limit overrides: a request descriptor may carry its own limit (RateLimitDescriptor.limit,
// requests_per_unit per unit), which envoyproxy/ratelimit applies instead of any rule of the
// domain's config, counted per domain and entries. Each distinct shape gets a fixed-window policy,
// installed in the Server's limiter on first use beside the rules' policies.

// maxOverridePolicies bounds the distinct override shapes (unit, unit_multiplier,
// requests_per_unit) a Service installs policies for: each is a policy of the Server's limiter, and
// a client could otherwise make them grow without end. A request needing one more is refused.
const maxOverridePolicies = 1000

// overrideOwner owns the overrides' policies in Server.SetExtraPolicies, apart from the rules'
// (which SetRules replaces).
const overrideOwner = "envoy-override"

// overridePrefix starts the name of every policy made for a limit override.
const overridePrefix = GeneratedPrefix + "override:"

// errTooManyOverrides refuses a request whose override would need a policy past
// maxOverridePolicies; ShouldRateLimit answers it RESOURCE_EXHAUSTED.
var errTooManyOverrides = fmt.Errorf("more than %d distinct descriptor limit overrides (unit, unit_multiplier, requests_per_unit) in use", maxOverridePolicies)

// override is a descriptor's limit override, checked.
type override struct {
	rpu      uint32
	unit     string // second … year, as in rate_limit blocks
	enum     rlsv3.RateLimitResponse_RateLimit_Unit
	mult     int64 // unit_multiplier, 1 when unset or 0
	windowMs int64
}

// parseOverride checks the limit override of descriptor i. Its unit is an envoy.type.v3.RateLimitUnit
// (SECOND 1 … YEAR 6), which envoyproxy/ratelimit casts to the response's unit enum, so that 7 is a
// week there: sluice reads it alike. envoyproxy/ratelimit panics on any other unit (UNKNOWN
// included), which takes its process down; sluice answers INVALID_ARGUMENT naming the field.
// unit_multiplier, which envoyproxy/ratelimit ignores, multiplies the window.
func parseOverride(i int, o *rlv3.RateLimitDescriptor_RateLimitOverride) (override, error) {
	field := func(f string) string { return fmt.Sprintf("descriptors[%d].limit.%s", i, f) }
	u := int32(o.GetUnit())
	name, ok := rlsv3.RateLimitResponse_RateLimit_Unit_name[u]
	if !ok || u == int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
		return override{}, &sluice.InvalidError{Field: field("unit"),
			Reason: fmt.Sprintf("must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR (1 to 6; 7 is WEEK, as envoyproxy/ratelimit reads it), got %d", u)}
	}
	ov := override{rpu: o.GetRequestsPerUnit(), unit: strings.ToLower(name), enum: rlsv3.RateLimitResponse_RateLimit_Unit(u), mult: 1}
	ms := units[ov.unit].ms
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		ov.mult = int64(m.GetValue())
	}
	if ov.mult > (1<<53)/ms {
		return override{}, &sluice.InvalidError{Field: field("unit_multiplier"),
			Reason: fmt.Sprintf("makes a window longer than 2^53 ms: %d %ss", ov.mult, ov.unit)}
	}
	ov.windowMs = ov.mult * ms
	return ov, nil
}

// policyName is the name of the override's policy: envoy:override:UNIT:N, or
// envoy:override:MxUNIT:N for a unit_multiplier M above 1.
func (ov override) policyName() string {
	unit := ov.unit
	if ov.mult > 1 {
		unit = strconv.FormatInt(ov.mult, 10) + "x" + unit
	}
	return overridePrefix + unit + ":" + strconv.FormatUint(uint64(ov.rpu), 10)
}

// overrideRule is the rule of a descriptor of domain carrying the limit override ov: neither shadow
// nor named (so never replaced), as in envoyproxy/ratelimit. Its id, which names it in the
// RateLimit header fields, is the domain and the entries' keys (not their values, which come from
// requests); requests_per_unit 0 denies everything, as a rate_limit block's does.
func (s *Service) overrideRule(domain string, desc *rlv3.RateLimitDescriptor, ov override) (*rule, error) {
	var id strings.Builder
	id.WriteString(domain)
	for _, e := range desc.GetEntries() {
		id.WriteByte('.')
		id.WriteString(e.GetKey())
	}
	r := &rule{
		id:     id.String(),
		unitMs: ov.windowMs,
		limit:  &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: ov.rpu, Unit: ov.enum},
	}
	if ov.mult > 1 {
		r.limit.UnitMultiplier = wrapperspb.UInt32(uint32(ov.mult))
	}
	if ov.rpu == 0 {
		r.denyAll = true
		return r, nil
	}
	r.policy = ov.policyName()
	if err := s.installOverride(r.policy, ov); err != nil {
		return nil, err
	}
	return r, nil
}

// installOverride makes sure the Server's limiter holds the override policy named name: a fixed
// window of ov.rpu per ov.windowMs aligned to the epoch, as the rate_limit blocks' policies are.
func (s *Service) installOverride(name string, ov override) error {
	if _, ok := s.srv.Limiter().Policy(name); ok {
		return nil
	}
	s.overMu.Lock()
	defer s.overMu.Unlock()
	if _, ok := s.srv.Limiter().Policy(name); ok {
		return nil
	}
	if len(s.overrides) >= maxOverridePolicies {
		return errTooManyOverrides
	}
	pol, err := sluice.NewPolicy(name, sluice.Limit{
		Name:     ov.unit,
		Strategy: sluice.FixedWindow{Limit: float64(ov.rpu), WindowMs: float64(ov.windowMs)},
		Unit:     sluice.UnitCost,
	})
	if err != nil {
		return err
	}
	next := append(slices.Clip(s.overrides), pol)
	if err := s.srv.SetExtraPolicies(overrideOwner, next); err != nil {
		return err
	}
	s.overrides = next
	return nil
}
