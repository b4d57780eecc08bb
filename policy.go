package sluice

import (
	"fmt"
	"math"
	"slices"
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

// FixedWindow admits Limit units per window of WindowMs, windows aligned to the epoch.
type FixedWindow struct {
	Limit    float64 `json:"limit"`
	WindowMs float64 `json:"windowMs"`
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
	return firstErr(atLeast("limit", s.Limit, 1), atLeast("windowMs", s.WindowMs, 1))
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
	limits  []Limit
	maxCost int64
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

// Limits returns the policy's limits. The caller must not modify the slice.
func (p *Policy) Limits() []Limit { return p.limits }

// MaxCost is the largest cost one check can ever be admitted for: the smallest ceiling among the
// limits that count cost.
func (p *Policy) MaxCost() int64 { return p.maxCost }

// Equal reports whether p and q have the same name and the same limits, so that state kept for
// one serves the other.
func (p *Policy) Equal(q *Policy) bool {
	return p == q || p != nil && q != nil && p.name == q.name && slices.Equal(p.limits, q.limits)
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
