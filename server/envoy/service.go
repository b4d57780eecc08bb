package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/internal/grpcstatus"
)

// MaxDescriptors is the most descriptors one request may carry.
const MaxDescriptors = 1000

// FailModeHeader is the response header added when the store could not answer and the fail mode
// of the policies let the request through: sluice-fail-mode: open. A fail-closed policy makes the
// call UNAVAILABLE instead, which Envoy treats per its failure_mode_deny.
const FailModeHeader = "sluice-fail-mode"

// Service answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from Rules, deciding
// through a server.Server. It is safe for concurrent use; SetRules swaps the rules while it serves.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	srv   *server.Server
	log   *slog.Logger
	rules atomic.Pointer[Rules]
	now   atomic.Pointer[func() int64]

	// overMu serializes installing limit overrides' policies; overrides are those installed.
	overMu    sync.Mutex
	overrides []*sluice.Policy
}

// New returns a Service deciding rules through srv. rules may be nil (no domain: everything is OK).
func New(srv *server.Server, rules *Rules) (*Service, error) {
	s := &Service{srv: srv, log: slog.Default()}
	s.SetClock(nil)
	if err := s.SetRules(rules); err != nil {
		return nil, err
	}
	return s, nil
}

// Register registers the Service on gs as envoy.service.ratelimit.v3.RateLimitService.
func (s *Service) Register(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, s) }

// SetClock sets the clock (epoch ms) that durations until reset are measured from; nil means the
// process clock. Durations are reported relative to the store's decisions, so a test whose store
// runs on a fixed clock gives the same clock here.
func (s *Service) SetClock(now func() int64) {
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	s.now.Store(&now)
}

// SetRules swaps in rules atomically (nil: no rules). Requests already under way finish with the
// old rules. The fixed-window policies the rules generate join the Server's policies, beside the
// config's; those Equal to ones already installed keep their state. If they cannot be installed
// (a config policy has a generated name), the old rules stay and the error says why.
func (s *Service) SetRules(rules *Rules) error {
	if rules == nil {
		rules = &Rules{}
	}
	if err := s.srv.SetExtraPolicies("envoy", rules.policies); err != nil {
		return err
	}
	s.rules.Store(rules)
	return nil
}

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

// kind is what a request descriptor asks of its rule.
type kind uint8

const (
	kNone      kind = iota // no rule, a replaced rule or an unknown domain: OK, no limit
	kUnlimited             // unlimited: true
	kCheck                 // consume hits
	kPeek                  // hits_addend 0: check without consuming
	kTooBig                // hits above what the policy can ever admit: over limit, nothing consumed
	kDenyAll               // requests_per_unit 0: everything is over limit
	kRefund                // is_negative_hits: give hits back
)

// slot is one request descriptor on its way to a status.
type slot struct {
	rule   *rule
	pol    *sluice.Policy
	key    string
	hits   uint64
	kind   kind
	d      sluice.Decision
	has    bool // d was decided
	denied bool
}

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService. All the descriptors a
// request's rules enforce are decided together by one Server.CheckAll: if any is over limit,
// nothing is consumed from any of them.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case n == 0:
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", n, MaxDescriptors)
	}
	resp, err := s.decide(ctx, req)
	if errors.Is(err, errTooManyOverrides) {
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	}
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	return resp, nil
}

func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	rules := s.rules.Load()
	lim := s.srv.Limiter()
	domain := req.GetDomain()
	hits := uint64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // the API's default
	}

	slots := make([]slot, len(req.GetDescriptors()))
	replaced := map[string]bool{}
	for i, desc := range req.GetDescriptors() {
		sl := &slots[i]
		if o := desc.GetLimit(); o != nil {
			// A limit override applies instead of the config's rules, as in envoyproxy/ratelimit:
			// counted per domain and entries, whether or not a rule matches them, but only in a
			// domain some file defines.
			ov, err := parseOverride(i, o)
			if err != nil {
				return nil, err
			}
			if rules.domains[domain] == nil {
				continue
			}
			if sl.rule, err = s.overrideRule(domain, desc, ov); err != nil {
				return nil, err
			}
			sl.key = stateKey(domain, nil, desc.GetEntries())
		} else {
			chain := rules.match(domain, desc.GetEntries())
			if chain == nil {
				continue
			}
			sl.rule = chain[len(chain)-1].rule
			sl.key = stateKey(domain, chain, desc.GetEntries())
		}
		for _, name := range sl.rule.replaces {
			replaced[name] = true
		}
		sl.hits = hits
		if h := desc.GetHitsAddend(); h != nil {
			sl.hits = h.GetValue()
		}
		if desc.GetIsNegativeHits() {
			sl.kind = kRefund
		}
	}
	for i := range slots {
		sl := &slots[i]
		r := sl.rule
		switch {
		case r == nil || r.name != "" && replaced[r.name]:
			*sl = slot{}
			continue
		case r.unlimited:
			sl.kind = kUnlimited
			continue
		case r.denyAll:
			if sl.kind == kRefund {
				*sl = slot{} // nothing to give back to a limit of 0
				continue
			}
			sl.kind, sl.denied = kDenyAll, true
			continue
		}
		pol, ok := lim.Policy(r.policy)
		if !ok {
			// A config policy the rule names is missing, or rules swapped while this request ran.
			return nil, fmt.Errorf("%w %q (named by the Envoy rule %s)", sluice.ErrUnknownPolicy, r.policy, r.id)
		}
		sl.pol = pol
		switch {
		case sl.kind == kRefund:
		case sl.hits == 0:
			sl.kind = kPeek
		case sl.hits > uint64(pol.MaxCost()):
			sl.kind, sl.denied = kTooBig, true
		default:
			sl.kind = kCheck
		}
	}

	// Refunds first, apart from the rest: giving back is never denied.
	for i := range slots {
		if sl := &slots[i]; sl.kind == kRefund && sl.hits > 0 {
			cost := int64(min(sl.hits, math.MaxInt64))
			if err := s.srv.Refund(ctx, 0, sl.pol.Name(), sl.key, cost); err != nil {
				return nil, err
			}
		}
	}

	// Enforced peeks next: a request one of them denies consumes nothing. A peek (hits_addend 0)
	// itself denies nothing: as envoyproxy/ratelimit compares the count after adding the hits,
	// limit < count + 0, a key at exactly its limit is OK with nothing remaining, and sluice never
	// counts past a limit. Hits that no window can admit are over limit, as is everything under
	// requests_per_unit 0.
	denied := false
	for i := range slots {
		sl := &slots[i]
		if sl.rule == nil || sl.rule.shadow {
			continue
		}
		switch sl.kind {
		case kPeek, kTooBig:
			if err := s.peek(ctx, sl); err != nil {
				return nil, err
			}
			denied = denied || sl.denied
		case kDenyAll:
			denied = true
		}
	}

	// Then every enforced check together, all or nothing.
	var items []sluice.Item
	var idx []int
	for i := range slots {
		if sl := &slots[i]; sl.kind == kCheck && !sl.rule.shadow {
			items = append(items, sluice.Item{Policy: sl.pol.Name(), Key: sl.key, Cost: int64(sl.hits)})
			idx = append(idx, i)
		}
	}
	if len(items) > 0 && !denied {
		d, err := s.srv.CheckAll(ctx, 0, items)
		if err != nil {
			return nil, err
		}
		denied = !d.Allowed
		for j, i := range idx {
			sl := &slots[i]
			part := d
			if len(d.Parts) == len(items) {
				part = d.Parts[j]
			}
			sl.d, sl.has, sl.denied = part, true, !part.Allowed
			if denied && part.Allowed {
				// The part reports what would be left had it consumed; nothing was.
				if err := s.peek(ctx, sl); err != nil {
					return nil, err
				}
			}
		}
	} else if len(items) > 0 {
		// Denied already: report what each check would decide, consuming nothing.
		for _, i := range idx {
			sl := &slots[i]
			if err := s.peek(ctx, sl); err != nil {
				return nil, err
			}
			sl.denied = !wouldAllow(sl.pol, sl.d, int64(sl.hits))
		}
	}

	// Shadow rules count what they would have admitted, and never deny: a request the enforced
	// rules deny reached no upstream, so they only look then.
	for i := range slots {
		sl := &slots[i]
		if sl.rule == nil || !sl.rule.shadow {
			continue
		}
		var err error
		switch {
		case sl.kind == kCheck && !denied:
			sl.d, err = s.srv.Check(ctx, 0, sl.pol.Name(), sl.key, int64(sl.hits))
			sl.has = err == nil
		case sl.kind == kCheck, sl.kind == kPeek, sl.kind == kTooBig:
			err = s.peek(ctx, sl)
		}
		if err != nil {
			return nil, err
		}
		if sl.kind == kCheck && denied {
			sl.denied = !wouldAllow(sl.pol, sl.d, int64(sl.hits))
		} else if sl.kind == kCheck {
			sl.denied = !sl.d.Allowed
		}
		if sl.denied {
			s.log.Debug("envoy: shadow-mode rule would deny", "rule", sl.rule.id)
		}
	}
	for i := range slots {
		if sl := &slots[i]; sl.kind == kRefund {
			if err := s.peek(ctx, sl); err != nil {
				return nil, err
			}
			sl.denied = false
		}
	}
	return s.response(slots, denied), nil
}

func (s *Service) peek(ctx context.Context, sl *slot) error {
	d, err := s.srv.Peek(ctx, 0, sl.pol.Name(), sl.key)
	if err != nil {
		return err
	}
	sl.d, sl.has = d, true
	return nil
}

// wouldAllow says whether a check of cost would pass against the state Peek reported: every store
// admits cost exactly when the whole units left cover it (limits counting requests count 1).
func wouldAllow(p *sluice.Policy, d sluice.Decision, cost int64) bool {
	if d.Limit == 0 && d.Allowed {
		return true // a fail-open answer carries no numbers
	}
	if len(d.Parts) != len(p.Limits()) {
		return d.Remaining >= p.Cost(0, cost)
	}
	for i, part := range d.Parts {
		if part.Remaining < p.Cost(i, cost) {
			return false
		}
	}
	return true
}

func (s *Service) response(slots []slot, denied bool) *rlsv3.RateLimitResponse {
	now := (*s.now.Load())()
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(slots)),
	}
	if denied {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var hdr headers
	failOpen := false // an enforced check was allowed by its fail mode
	for i := range slots {
		sl := &slots[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch sl.kind {
		case kNone:
			continue
		case kUnlimited:
			st.LimitRemaining = math.MaxUint32 // as envoyproxy/ratelimit reports unlimited
			continue
		}
		if sl.denied && !sl.rule.shadow && sl.kind != kRefund {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if sl.d.FailOpen {
			// No limit was consulted: report none, neither in the headers nor in current_limit,
			// from which Envoy's own x-ratelimit headers would claim nothing remains.
			failOpen = failOpen || !sl.rule.shadow
			continue
		}
		var q, windowMs, remaining, resetMs, retryMs int64
		if sl.kind == kDenyAll {
			q, windowMs = 0, sl.rule.unitMs
			resetMs = windowMs - now%windowMs
			retryMs = resetMs
			st.CurrentLimit = sl.rule.limit
		} else {
			q, windowMs, st.CurrentLimit = describe(sl.rule, sl.pol, sl.d)
			remaining = sl.d.Remaining
			resetMs = max(sl.d.ResetAt-now, 0)
			if sl.rule.limit != nil {
				// A rate_limit block's or an override's window, aligned to the epoch: it resets at
				// its end whatever the key's count, untouched keys too, as envoyproxy/ratelimit says.
				resetMs = sl.rule.unitMs - now%sl.rule.unitMs
			}
			retryMs = sl.d.RetryAfterMs
			if sl.kind == kTooBig {
				retryMs = max(resetMs, 1) // no wait admits it; point at the next reset
			}
		}
		st.LimitRemaining = uint32(min(remaining, math.MaxUint32))
		// Whole seconds, rounded up, as envoyproxy/ratelimit reports them (a window's reset is then
		// in [1 s, its length]): Envoy drops the fraction when it writes x-ratelimit-reset.
		st.DurationUntilReset = &durationpb.Duration{Seconds: (resetMs + 999) / 1000}
		if sl.rule.shadow || sl.kind == kRefund || q == 0 && sl.kind != kDenyAll {
			continue // not enforced, or a fail-open answer without numbers
		}
		hdr.add(sl.rule.label(), q, windowMs, remaining, resetMs)
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			hdr.retryMs = max(hdr.retryMs, retryMs, 1)
		}
	}
	resp.ResponseHeadersToAdd = hdr.fields(denied)
	if failOpen {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: FailModeHeader, Value: "open"})
	}
	return resp
}

// describe gives the quota and window (ms) of the limit that bound decision d, and Envoy's
// current_limit for it.
func describe(r *rule, p *sluice.Policy, d sluice.Decision) (q, windowMs int64, cur *rlsv3.RateLimitResponse_RateLimit) {
	if r.limit != nil {
		return int64(r.limit.GetRequestsPerUnit()), r.unitMs, r.limit
	}
	i := binding(d, len(p.Limits()))
	l := p.Limits()[i]
	q = d.Limit
	if len(d.Parts) == len(p.Limits()) {
		q = d.Parts[i].Limit
	}
	if q == 0 {
		q = int64(l.Strategy.Ceiling())
	}
	windowMs = window(l)
	name := r.name
	if name == "" {
		name = p.Name()
		if l.Name != "" && len(p.Limits()) > 1 {
			name += "/" + l.Name
		}
	}
	return q, windowMs, currentLimit(name, q, windowMs)
}

// binding finds the index of the limit that bound d among n: Combine reports its numbers but not
// its index when allowed.
func binding(d sluice.Decision, n int) int {
	if len(d.Parts) != n {
		return 0
	}
	if d.DeniedBy >= 0 && d.DeniedBy < n {
		return d.DeniedBy
	}
	for i, p := range d.Parts {
		if p.Remaining == d.Remaining && p.Limit == d.Limit && p.ResetAt == d.ResetAt {
			return i
		}
	}
	return 0
}

// window is the span (ms) over which a limit grants its ceiling (header.Window), at least 1.
func window(l sluice.Limit) int64 {
	w := header.Window(l)
	ms := int64(w / time.Millisecond)
	if w%time.Millisecond != 0 {
		ms++
	}
	return max(ms, 1)
}

// currentLimit expresses q per windowMs in Envoy's units: exactly, as q per a whole number of the
// largest unit dividing the window, or else rounded to a rate per second.
func currentLimit(name string, q, windowMs int64) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name}
	for _, u := range []string{"year", "month", "week", "day", "hour", "minute", "second"} {
		if ms := units[u].ms; windowMs%ms == 0 {
			rl.Unit, rl.RequestsPerUnit = units[u].enum, uint32(min(q, math.MaxUint32))
			if m := windowMs / ms; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
			}
			return rl
		}
	}
	rps := math.Round(float64(q) * 1000 / float64(windowMs))
	rl.Unit, rl.RequestsPerUnit = rlsv3.RateLimitResponse_RateLimit_SECOND, uint32(min(max(rps, 1), math.MaxUint32))
	return rl
}

// headers builds the IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers): one
// list member per enforced limit, named by its rate_limit name or else its descriptor path.
type headers struct {
	items   []header.Item
	byName  map[string]int // index in items
	retryMs int64
}

func (h *headers) add(name string, q, windowMs, remaining, resetMs int64) {
	it := header.Item{
		Name:      name,
		Quota:     q,
		Window:    time.Duration(windowMs) * time.Millisecond,
		Remaining: remaining,
		Reset:     time.Duration(resetMs) * time.Millisecond,
	}
	if h.byName == nil {
		h.byName = map[string]int{}
	}
	if i, ok := h.byName[name]; ok {
		// One rule matched by several descriptors: report the tightest.
		if it.Remaining < h.items[i].Remaining {
			h.items[i] = it
		}
		return
	}
	h.byName[name] = len(h.items)
	h.items = append(h.items, it)
}

func (h *headers) fields(denied bool) []*corev3.HeaderValue {
	if len(h.items) == 0 {
		return nil
	}
	policy, ratelimit := header.Format(h.items...)
	out := []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: policy},
		{Key: "RateLimit", Value: ratelimit},
	}
	if denied && h.retryMs > 0 {
		out = append(out, &corev3.HeaderValue{Key: "Retry-After", Value: header.RetryAfter(sluice.Decision{RetryAfterMs: h.retryMs})})
	}
	return out
}
