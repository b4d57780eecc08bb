package sluice

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxParam bounds every numeric parameter: beyond 2^53 a float64 no longer counts whole units
// exactly, and every store computes in float64 like the reference scripts.
const maxParam = 1 << 53

// MaxKeyLen is the longest key, in bytes, that a check accepts.
const MaxKeyLen = 1024

// A Strategy is one rate-limiting algorithm with its parameters: GCRA, TokenBucket, FixedWindow,
// SlidingWindow or SlidingWindowLog. The set is closed so that every store can implement every
// strategy exactly; docs/semantics.md gives the math of each.
type Strategy interface {
	// Kind is the strategy's wire name: "gcra", "tokenBucket", "fixedWindow", "slidingWindow" or
	// "slidingWindowLog".
	Kind() string
	// Ceiling is the most units one check can ever be admitted for.
	Ceiling() float64
	validate() *InvalidError
}

// GCRA is the generic cell rate algorithm: Limit cells per PeriodMs, with Burst cells of headroom.
// It keeps one number per key (the theoretical arrival time), so it is the cheapest strategy to
// store. The ceiling of one check is Burst.
type GCRA struct {
	Limit    float64 `json:"limit"`
	PeriodMs float64 `json:"periodMs"`
	Burst    float64 `json:"burst"`
}

// TokenBucket holds up to Capacity tokens and refills at RefillPerSec tokens a second; a check
// spends cost tokens. 100 a minute is RefillPerSec 100.0/60. The ceiling of one check is Capacity.
type TokenBucket struct {
	Capacity     float64 `json:"capacity"`
	RefillPerSec float64 `json:"refillPerSec"`
}

// FixedWindow admits Limit units per window. Windows are WindowMs long and aligned to the epoch; or,
// with Calendar set (and WindowMs 0), they are the calendar days or months of TimeZone, for quotas
// such as 10,000 calls a day: a day in Europe/Rome starts at local midnight and lasts 23, 24 or 25
// hours.
type FixedWindow struct {
	Limit    float64 `json:"limit"`
	WindowMs float64 `json:"windowMs,omitempty"`
	// Calendar is Day or Month for calendar windows; empty for windows of WindowMs.
	Calendar Calendar `json:"calendar,omitempty"`
	// TimeZone is the IANA name of the calendar's zone, such as "Europe/Rome"; empty is UTC.
	TimeZone string `json:"timezone,omitempty"`
}

// Calendar is a calendar period a FixedWindow can align to.
type Calendar string

const (
	Day   Calendar = "day"
	Month Calendar = "month"
)

// Bounds returns the window holding the instant now (epoch ms): its start, included, and its end,
// excluded. For windows of WindowMs they are multiples of WindowMs, which need not be whole.
func (s FixedWindow) Bounds(now int64) (start, end float64) {
	if s.Calendar == "" {
		start = math.Floor(float64(now)/s.WindowMs) * s.WindowMs
		return start, start + s.WindowMs
	}
	loc := zone(s.TimeZone)
	y, m, d := time.UnixMilli(now).In(loc).Date()
	if s.Calendar == Month {
		return dayStart(y, m, 1, loc), dayStart(y, m+1, 1, loc)
	}
	return dayStart(y, m, d, loc), dayStart(y, m, d+1, loc)
}

// dayStart is the first instant (epoch ms) of the local day y-m-d in loc (normalized as time.Date
// normalizes it). Where a change of offset skips midnight (Santiago's DST in spring) or the whole
// day (Apia's 2011-12-30), time.Date answers an instant of the day before; the day starts at the
// change instead, where the offset of the day's noon begins.
func dayStart(y int, m time.Month, d int, loc *time.Location) float64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if ty, tm, td := t.Date(); ty != day.Year() || tm != day.Month() || td != day.Day() {
		_, before := t.Zone()
		_, after := day.Add(12*time.Hour - time.Duration(before)*time.Second).In(loc).Zone()
		t = t.Add(time.Duration(after-before) * time.Second)
	}
	return float64(t.UnixMilli())
}

// zones caches loaded time zones by name: time.LoadLocation reads the zone database each time.
var zones sync.Map // string → *time.Location

// zone returns the named time zone, which validate has loaded once already.
func zone(name string) *time.Location {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC // unreachable for a validated policy
	}
	zones.Store(name, loc)
	return loc
}

// SlidingWindow admits Limit units over the trailing WindowMs, estimated from Buckets sub-windows
// plus the weighted part of the oldest one. Memory per key grows with Buckets.
type SlidingWindow struct {
	Limit    float64 `json:"limit"`
	WindowMs float64 `json:"windowMs"`
	Buckets  int     `json:"buckets"`
}

// SlidingWindowLog admits Limit units over the trailing WindowMs, counted exactly from a log of
// admitted units. Limit is a whole number. Memory per key grows with the number of distinct instants in the window.
type SlidingWindowLog struct {
	Limit    float64 `json:"limit"`
	WindowMs float64 `json:"windowMs"`
}

func (GCRA) Kind() string             { return "gcra" }
func (TokenBucket) Kind() string      { return "tokenBucket" }
func (FixedWindow) Kind() string      { return "fixedWindow" }
func (SlidingWindow) Kind() string    { return "slidingWindow" }
func (SlidingWindowLog) Kind() string { return "slidingWindowLog" }

func (s GCRA) Ceiling() float64             { return s.Burst }
func (s TokenBucket) Ceiling() float64      { return s.Capacity }
func (s FixedWindow) Ceiling() float64      { return s.Limit }
func (s SlidingWindow) Ceiling() float64    { return s.Limit }
func (s SlidingWindowLog) Ceiling() float64 { return s.Limit }

func (s GCRA) validate() *InvalidError {
	if err := firstErr(positive("limit", s.Limit), atLeast("periodMs", s.PeriodMs, 1), atLeast("burst", s.Burst, 1)); err != nil {
		return err
	}
	// The emission interval periodMs/limit must stay well above the float64 resolution of an epoch
	// instant (about 0.0002 ms), or cells stop advancing the TAT; and a full burst must drain within
	// 2^53 ms, or retry times overflow.
	if t := s.PeriodMs / s.Limit; t < 0.001 || t*s.Burst > maxParam {
		return invalid("limit", "periodMs/limit must be at least 0.001 ms and periodMs/limit*burst at most 2^53 ms, got %v ms", t)
	}
	return nil
}

func (s TokenBucket) validate() *InvalidError {
	if err := firstErr(atLeast("capacity", s.Capacity, 1), positive("refillPerSec", s.RefillPerSec)); err != nil {
		return err
	}
	// Refilling the whole bucket must take at most 2^53 ms, or retry times overflow.
	if s.Capacity/(s.RefillPerSec/1000) > maxParam {
		return invalid("refillPerSec", "refilling capacity must take at most 2^53 ms, got %v ms", s.Capacity/(s.RefillPerSec/1000))
	}
	return nil
}

func (s FixedWindow) validate() *InvalidError {
	if err := atLeast("limit", s.Limit, 1); err != nil {
		return err
	}
	switch s.Calendar {
	case "":
		if s.TimeZone != "" {
			return invalid("timezone", "applies only to calendar windows (calendar day or month)")
		}
		return atLeast("windowMs", s.WindowMs, 1)
	case Day, Month:
	default:
		return invalid("calendar", "must be day or month, got %q", s.Calendar)
	}
	if s.WindowMs != 0 {
		return invalid("windowMs", "must be 0 with a calendar window, got %v", s.WindowMs)
	}
	if _, err := time.LoadLocation(s.TimeZone); err != nil || strings.EqualFold(s.TimeZone, "local") {
		return invalid("timezone", "must be an IANA time zone such as Europe/Rome, got %q", s.TimeZone)
	}
	zone(s.TimeZone)
	return nil
}

func (s SlidingWindow) validate() *InvalidError {
	if err := firstErr(atLeast("limit", s.Limit, 1), atLeast("windowMs", s.WindowMs, 1)); err != nil {
		return err
	}
	if s.Buckets < 1 || float64(s.Buckets) > s.WindowMs || s.Buckets > 4096 {
		return invalid("buckets", "must be from 1 to 4096 and at most windowMs, got %d", s.Buckets)
	}
	return nil
}

func (s SlidingWindowLog) validate() *InvalidError {
	if err := atLeast("limit", s.Limit, 1); err != nil || s.Limit != math.Trunc(s.Limit) {
		return invalid("limit", "must be a whole number from 1 to 2^53 (a log counts whole units), got %v", s.Limit)
	}
	return atLeast("windowMs", s.WindowMs, 1)
}

// Unit says what a limit counts.
type Unit uint8

const (
	// UnitCost counts the cost of each check: tokens, bytes, units of work. The zero value.
	UnitCost Unit = iota
	// UnitRequest counts each check as 1, whatever its cost: requests per minute beside tokens per
	// minute.
	UnitRequest
)

func (u Unit) String() string {
	if u == UnitRequest {
		return "request"
	}
	return "cost"
}

// Limit is one strategy within a policy.
type Limit struct {
	// Name labels the limit in reports, e.g. "requests" or "tokens". Optional.
	Name     string
	Strategy Strategy
	// Unit is what the limit counts; the zero value counts cost.
	Unit Unit
}

// Policy is a named, validated set of limits that are checked together: a check passes only if
// every limit passes, and consumes from all of them or from none. Most policies hold one limit.
//
// A Policy is immutable and safe for concurrent use. Build one with NewPolicy.
type Policy struct {
	name    string
	plan    string
	limits  []Limit
	maxCost int64
	ceiling int64 // the ceiling of a policy of one limit, as Decision.Limit reports it; 0 for several
}

// NewPolicy validates and builds a policy. The name may hold letters, digits and "-_.:/" (at most
// 128 bytes); it is how checks name the policy. A policy needs at least one limit, and every
// parameter must be finite and in range: an invalid one is an *InvalidError naming it.
func NewPolicy(name string, limits ...Limit) (*Policy, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if len(limits) == 0 {
		return nil, invalid("limits", "a policy needs at least one limit")
	}
	p := &Policy{name: name, limits: slices.Clone(limits), maxCost: math.MaxInt64}
	for i := range p.limits {
		l := &p.limits[i]
		l.Strategy = concrete(l.Strategy)
		if l.Strategy == nil {
			return nil, invalid(fmt.Sprintf("limits[%d].strategy", i), "must be one of GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingWindowLog")
		}
		if l.Unit > UnitRequest {
			return nil, invalid(fmt.Sprintf("limits[%d].unit", i), "must be cost or request")
		}
		if err := l.Strategy.validate(); err != nil {
			return nil, &InvalidError{Field: fmt.Sprintf("limits[%d].%s", i, err.Field), Reason: err.Reason}
		}
		if l.Unit == UnitCost {
			p.maxCost = min(p.maxCost, int64(l.Strategy.Ceiling()))
		}
	}
	if len(p.limits) == 1 {
		p.ceiling = int64(p.limits[0].Strategy.Ceiling())
	}
	return p, nil
}

// concrete returns the strategy as one of the five value types, so that a policy keeps its own copy
// of the parameters and every store can switch on the type; nil for anything else.
func concrete(s Strategy) Strategy {
	switch v := s.(type) {
	case GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingWindowLog:
		return v
	case *GCRA:
		return deref(v)
	case *TokenBucket:
		return deref(v)
	case *FixedWindow:
		return deref(v)
	case *SlidingWindow:
		return deref(v)
	case *SlidingWindowLog:
		return deref(v)
	}
	return nil
}

// deref copies the strategy p points to; nil for a nil pointer.
func deref[T Strategy](p *T) Strategy {
	if p == nil {
		return nil
	}
	return *p
}

// MustPolicy is NewPolicy that panics on error, for policies fixed at compile time.
func MustPolicy(name string, limits ...Limit) *Policy {
	p, err := NewPolicy(name, limits...)
	if err != nil {
		panic(err)
	}
	return p
}

// Name is the policy's name.
func (p *Policy) Name() string { return p.name }

// Plan names the plan p is, of the policy named Name: "" for a policy without plans. Decisions
// under p report it (Decision.Plan).
func (p *Policy) Plan() string { return p.plan }

// WithPlan returns a copy of p that is the plan named plan of its policy: the same name and
// limits, so a key's state is the same whatever plan applies to it, labelled so that decisions say
// which plan applied. The config file's plans are built so; a Resolver hands them out per key.
func (p *Policy) WithPlan(plan string) *Policy {
	q := *p
	q.plan = plan
	return &q
}

// Limits returns the policy's limits. The caller must not modify the slice.
func (p *Policy) Limits() []Limit { return p.limits }

// MaxCost is the largest cost one check can ever be admitted for: the smallest ceiling among the
// limits that count cost.
func (p *Policy) MaxCost() int64 { return p.maxCost }

// Equal reports whether p and q have the same name, plan and limits, so that state kept for one
// serves the other.
func (p *Policy) Equal(q *Policy) bool {
	return p == q || p != nil && q != nil && p.name == q.name && p.plan == q.plan && slices.Equal(p.limits, q.limits)
}

// Cost is the cost that limit i of p counts for a check of cost.
func (p *Policy) Cost(i int, cost int64) int64 {
	if p.limits[i].Unit == UnitRequest {
		return 1
	}
	return cost
}

func validName(name string) error {
	if name == "" || len(name) > 128 {
		return invalid("policy", "name must be 1 to 128 bytes, got %d", len(name))
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '/':
		default:
			return invalid("policy", "name %q may hold only letters, digits and -_.:/", name)
		}
	}
	return nil
}

func positive(field string, v float64) *InvalidError {
	if !(v > 0 && v <= maxParam) {
		return invalid(field, "must be above 0 and at most 2^53, got %v", v)
	}
	return nil
}

func atLeast(field string, v, lo float64) *InvalidError {
	if !(v >= lo && v <= maxParam) {
		return invalid(field, "must be from %v to 2^53, got %v", lo, v)
	}
	return nil
}

func firstErr(errs ...*InvalidError) *InvalidError {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
