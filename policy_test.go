package sluice_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// above2p53 is the first float64 above 2^53 (2^53+1 is not representable).
var above2p53 = math.Nextafter(1<<53, math.Inf(1))

// wantInvalid fails t unless err is an *InvalidError for field that matches ErrInvalid.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want an *InvalidError for %q", field)
	}
	if !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	if errors.Is(err, sluice.ErrUnknownPolicy) {
		t.Errorf("errors.Is(%v, ErrUnknownPolicy) = true for bad input", err)
	}
	var ie *sluice.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v (%T) is not an *InvalidError", err, err)
	}
	if ie.Field != field {
		t.Errorf("Field = %q, want %q (error: %v)", ie.Field, field, err)
	}
	if ie.Reason == "" {
		t.Errorf("Reason is empty")
	}
	if want := "sluice: invalid " + field + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Error() = %q, want prefix %q", err.Error(), want)
	}
}

// newPolicySafely is NewPolicy that turns a panic into a test failure, so that one bad case does
// not take the whole test binary down.
func newPolicySafely(t *testing.T, name string, limits ...sluice.Limit) (p *sluice.Policy, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("NewPolicy(%q) panicked: %v", name, r)
			p, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return sluice.NewPolicy(name, limits...)
}

// Valid strategies of every kind, used as the base that the rejection cases spoil one parameter of.
var (
	validGCRA        = sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}
	validTokenBucket = sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}
	validFixed       = sluice.FixedWindow{Limit: 10, WindowMs: 1000}
	validSliding     = sluice.SlidingWindow{Limit: 10, WindowMs: 1000, Buckets: 10}
	validLog         = sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}
)

func TestNewPolicyAccepts(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		limits []sluice.Limit
	}{
		{"gcra", "api", []sluice.Limit{{Strategy: validGCRA}}},
		{"gcra fractional limit and burst", "api", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 0.5, PeriodMs: 1, Burst: 1.5}}}},
		{"gcra at 2^53", "api", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 1 << 53, PeriodMs: 1 << 53, Burst: 1 << 53}}}},
		{"tokenBucket", "api", []sluice.Limit{{Strategy: validTokenBucket}}},
		{"tokenBucket 100 a minute", "api", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}}}},
		{"tokenBucket tiny refill", "api", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1e-9}}}},
		{"tokenBucket at 2^53", "api", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 1 << 53, RefillPerSec: 1 << 53}}}},
		{"fixedWindow", "api", []sluice.Limit{{Strategy: validFixed}}},
		{"fixedWindow minimum", "api", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1}}}},
		{"fixedWindow fractional", "api", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 2.5, WindowMs: 1.5}}}},
		{"slidingWindow", "api", []sluice.Limit{{Strategy: validSliding}}},
		{"slidingWindow one bucket", "api", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: 1, WindowMs: 1, Buckets: 1}}}},
		{"slidingWindow buckets equal windowMs", "api", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: 5, WindowMs: 60, Buckets: 60}}}},
		{"slidingWindow 4096 buckets", "api", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: 5, WindowMs: 3_600_000, Buckets: 4096}}}},
		{"slidingWindowLog", "api", []sluice.Limit{{Strategy: validLog}}},
		{"slidingWindowLog at 2^53", "api", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: 1 << 53, WindowMs: 1 << 53}}}},
		{"request unit", "api", []sluice.Limit{{Strategy: validFixed, Unit: sluice.UnitRequest}}},
		{"composite requests and tokens", "model:gpt-4o", []sluice.Limit{
			{Name: "requests", Strategy: sluice.SlidingWindow{Limit: 500, WindowMs: 60_000, Buckets: 60}, Unit: sluice.UnitRequest},
			{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 60_000, RefillPerSec: 500}},
		}},
		{"composite of all five", "all", []sluice.Limit{
			{Strategy: validGCRA}, {Strategy: validTokenBucket}, {Strategy: validFixed},
			{Strategy: validSliding, Unit: sluice.UnitRequest}, {Strategy: validLog},
		}},
		{"every allowed name character", "azAZ09-_.:/", []sluice.Limit{{Strategy: validGCRA}}},
		{"name of 128 bytes", strings.Repeat("n", 128), []sluice.Limit{{Strategy: validGCRA}}},
		{"name of 1 byte", "x", []sluice.Limit{{Strategy: validGCRA}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPolicySafely(t, tt.policy, tt.limits...)
			if err != nil {
				t.Fatalf("NewPolicy: %v", err)
			}
			if p.Name() != tt.policy {
				t.Errorf("Name() = %q, want %q", p.Name(), tt.policy)
			}
			got := p.Limits()
			if len(got) != len(tt.limits) {
				t.Fatalf("len(Limits()) = %d, want %d", len(got), len(tt.limits))
			}
			for i := range got {
				if got[i] != tt.limits[i] {
					t.Errorf("Limits()[%d] = %+v, want %+v", i, got[i], tt.limits[i])
				}
			}
			if p.MaxCost() < 1 {
				t.Errorf("MaxCost() = %d, want at least 1", p.MaxCost())
			}
			// MustPolicy agrees with NewPolicy on valid input.
			if q := sluice.MustPolicy(tt.policy, tt.limits...); !q.Equal(p) {
				t.Errorf("MustPolicy result is not Equal to NewPolicy's")
			}
		})
	}
}

func TestStrategyKindAndCeiling(t *testing.T) {
	tests := []struct {
		name     string
		strategy sluice.Strategy
		kind     string
		ceiling  float64
	}{
		{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}, "gcra", 5},
		{"tokenBucket", sluice.TokenBucket{Capacity: 7.5, RefillPerSec: 1}, "tokenBucket", 7.5},
		{"fixedWindow", sluice.FixedWindow{Limit: 3, WindowMs: 1000}, "fixedWindow", 3},
		{"slidingWindow", sluice.SlidingWindow{Limit: 4, WindowMs: 1000, Buckets: 2}, "slidingWindow", 4},
		{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 6, WindowMs: 1000}, "slidingWindowLog", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.strategy.Kind(); got != tt.kind {
				t.Errorf("Kind() = %q, want %q", got, tt.kind)
			}
			if got := tt.strategy.Ceiling(); got != tt.ceiling {
				t.Errorf("Ceiling() = %v, want %v", got, tt.ceiling)
			}
		})
	}
}

// param is one numeric parameter of one strategy: with returns the valid base strategy with that
// parameter set to v; atLeastOne is true when its minimum is 1 rather than "above 0".
type param struct {
	kind, field string
	atLeastOne  bool
	with        func(v float64) sluice.Strategy
}

var params = []param{
	{"gcra", "limit", false, func(v float64) sluice.Strategy { s := validGCRA; s.Limit = v; return s }},
	{"gcra", "periodMs", true, func(v float64) sluice.Strategy { s := validGCRA; s.PeriodMs = v; return s }},
	{"gcra", "burst", true, func(v float64) sluice.Strategy { s := validGCRA; s.Burst = v; return s }},
	{"tokenBucket", "capacity", true, func(v float64) sluice.Strategy { s := validTokenBucket; s.Capacity = v; return s }},
	{"tokenBucket", "refillPerSec", false, func(v float64) sluice.Strategy { s := validTokenBucket; s.RefillPerSec = v; return s }},
	{"fixedWindow", "limit", true, func(v float64) sluice.Strategy { s := validFixed; s.Limit = v; return s }},
	{"fixedWindow", "windowMs", true, func(v float64) sluice.Strategy { s := validFixed; s.WindowMs = v; return s }},
	{"slidingWindow", "limit", true, func(v float64) sluice.Strategy { s := validSliding; s.Limit = v; return s }},
	{"slidingWindow", "windowMs", true, func(v float64) sluice.Strategy { s := validSliding; s.WindowMs = v; return s }},
	{"slidingWindowLog", "limit", true, func(v float64) sluice.Strategy { s := validLog; s.Limit = v; return s }},
	{"slidingWindowLog", "windowMs", true, func(v float64) sluice.Strategy { s := validLog; s.WindowMs = v; return s }},
}

func TestNewPolicyRejectsBadParameters(t *testing.T) {
	bad := []struct {
		name string
		v    float64
	}{
		{"zero", 0},
		{"negative zero", math.Copysign(0, -1)},
		{"negative", -1},
		{"tiny negative", -1e-300},
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"-Inf", math.Inf(-1)},
		{"above 2^53", above2p53},
		{"max float", math.MaxFloat64},
	}
	for _, p := range params {
		values := bad
		if p.atLeastOne {
			values = append(values[:len(values):len(values)], struct {
				name string
				v    float64
			}{"below 1", 0.5})
		}
		for _, b := range values {
			// The bad limit alone, and as the second limit of a composite whose first is valid.
			for idx := 0; idx < 2; idx++ {
				t.Run(fmt.Sprintf("%s.%s=%s/limits[%d]", p.kind, p.field, b.name, idx), func(t *testing.T) {
					limits := []sluice.Limit{{Strategy: p.with(b.v)}}
					if idx == 1 {
						limits = append([]sluice.Limit{{Strategy: validTokenBucket}}, limits...)
					}
					pol, err := newPolicySafely(t, "p", limits...)
					if pol != nil {
						t.Errorf("NewPolicy returned a policy with an error expected")
					}
					wantInvalid(t, err, fmt.Sprintf("limits[%d].%s", idx, p.field))
				})
			}
		}
	}
}

func TestNewPolicyRejects(t *testing.T) {
	one := []sluice.Limit{{Strategy: validGCRA}}
	sw := func(limit, window float64, buckets int) []sluice.Limit {
		return []sluice.Limit{{Strategy: validTokenBucket}, {Strategy: sluice.SlidingWindow{Limit: limit, WindowMs: window, Buckets: buckets}}}
	}
	tests := []struct {
		name   string
		policy string
		limits []sluice.Limit
		field  string
	}{
		{"buckets 0", "p", sw(10, 1000, 0), "limits[1].buckets"},
		{"buckets negative", "p", sw(10, 1000, -1), "limits[1].buckets"},
		{"buckets above windowMs", "p", sw(10, 10, 11), "limits[1].buckets"},
		{"buckets above fractional windowMs", "p", sw(10, 2.5, 3), "limits[1].buckets"},
		{"buckets above 4096", "p", sw(10, 1e9, 4097), "limits[1].buckets"},
		{"buckets far above 4096", "p", sw(10, 1e9, math.MaxInt32), "limits[1].buckets"},
		{"slidingWindow windowMs below 1", "p", sw(10, 0.5, 1), "limits[1].windowMs"},
		{"fixedWindow windowMs below 1", "p", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 0.999}}}, "limits[0].windowMs"},
		{"gcra periodMs below 1", "p", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 0.5, Burst: 1}}}, "limits[0].periodMs"},
		{"slidingWindowLog fractional limit", "p", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: 2.5, WindowMs: 1000}}}, "limits[0].limit"},
		{"slidingWindowLog fractional limit second", "p", []sluice.Limit{{Strategy: validLog}, {Strategy: sluice.SlidingWindowLog{Limit: 10.000001, WindowMs: 1000}}}, "limits[1].limit"},
		{"nil strategy", "p", []sluice.Limit{{Name: "tokens"}}, "limits[0].strategy"},
		{"nil strategy second", "p", []sluice.Limit{{Strategy: validGCRA}, {}}, "limits[1].strategy"},
		{"unit 2", "p", []sluice.Limit{{Strategy: validGCRA, Unit: 2}}, "limits[0].unit"},
		{"unit 255 second", "p", []sluice.Limit{{Strategy: validGCRA}, {Strategy: validFixed, Unit: 255}}, "limits[1].unit"},
		{"first bad limit wins", "p", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 0, RefillPerSec: 0}}, {}}, "limits[0].capacity"},
		{"no limits", "p", nil, "limits"},
		{"empty limits", "p", []sluice.Limit{}, "limits"},
		{"empty name", "", one, "policy"},
		{"name of 129 bytes", strings.Repeat("n", 129), one, "policy"},
		{"name with a space", "my api", one, "policy"},
		{"name with a comma", "a,b", one, "policy"},
		{"name with braces", "rl:{x}", one, "policy"},
		{"name with non-ASCII", "café", one, "policy"},
		{"name with NUL", "a\x00", one, "policy"},
		{"name with newline", "a\n", one, "policy"},
		{"name checked before limits", "", nil, "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPolicySafely(t, tt.policy, tt.limits...)
			if p != nil {
				t.Errorf("NewPolicy returned a policy with an error expected")
			}
			wantInvalid(t, err, tt.field)
		})
	}
}

// customStrategy satisfies sluice.Strategy by embedding a valid one; no store knows it.
type customStrategy struct{ sluice.TokenBucket }

func (customStrategy) Kind() string { return "leakyBucket" }

// A pointer to one of the five strategies is copied when the policy is built, so changing it later
// changes nothing.
func TestNewPolicyCopiesPointerStrategy(t *testing.T) {
	tb := &sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}
	p, err := sluice.NewPolicy("p", sluice.Limit{Strategy: tb})
	if err != nil {
		t.Fatal(err)
	}
	tb.Capacity = 1000
	if got := p.Limits()[0].Strategy; got != (sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}) {
		t.Errorf("strategy = %#v, want the value as built", got)
	}
}

// Issue 2 item 6: an unknown strategy is a typed error when the policy is built, not a panic at
// its first check. A nil pointer and a type embedding a strategy satisfy the interface, but no
// store implements them.
func TestNewPolicyRejectsUnknownStrategy(t *testing.T) {
	var nilBucket *sluice.TokenBucket
	tests := []struct {
		name     string
		strategy sluice.Strategy
	}{
		{"nil pointer to tokenBucket", nilBucket},
		{"type embedding tokenBucket", customStrategy{sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPolicySafely(t, "p", sluice.Limit{Strategy: tt.strategy})
			if p != nil {
				t.Errorf("NewPolicy accepted strategy %T, which no store implements", tt.strategy)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "panic") {
				wantInvalid(t, err, "limits[0].strategy")
			}
		})
	}
}

func TestMustPolicyPanicsOnInvalid(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("MustPolicy did not panic")
		}
		err, ok := r.(error)
		if !ok {
			t.Fatalf("MustPolicy panicked with %T, want an error", r)
		}
		wantInvalid(t, err, "limits[0].capacity")
	}()
	sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 0, RefillPerSec: 1}})
}

func TestPolicyIsImmutable(t *testing.T) {
	limits := []sluice.Limit{{Name: "a", Strategy: validGCRA}, {Name: "b", Strategy: validFixed}}
	p := sluice.MustPolicy("p", limits...)
	limits[0] = sluice.Limit{Name: "changed", Strategy: validLog}
	if got := p.Limits()[0]; got.Name != "a" || got.Strategy != sluice.Strategy(validGCRA) {
		t.Errorf("changing the caller's slice changed the policy: Limits()[0] = %+v", got)
	}
}

func TestPolicyMaxCost(t *testing.T) {
	tests := []struct {
		name   string
		limits []sluice.Limit
		want   int64
	}{
		{"tokenBucket capacity", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}}}, 10},
		{"fractional capacity truncated", []sluice.Limit{{Strategy: sluice.TokenBucket{Capacity: 10.9, RefillPerSec: 1}}}, 10},
		{"gcra burst, not limit", []sluice.Limit{{Strategy: sluice.GCRA{Limit: 100, PeriodMs: 1000, Burst: 3.5}}}, 3},
		{"fixedWindow limit", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 7, WindowMs: 1000}}}, 7},
		{"slidingWindow limit", []sluice.Limit{{Strategy: sluice.SlidingWindow{Limit: 8, WindowMs: 1000, Buckets: 4}}}, 8},
		{"slidingWindowLog limit", []sluice.Limit{{Strategy: sluice.SlidingWindowLog{Limit: 9, WindowMs: 1000}}}, 9},
		{"limit of 2^53", []sluice.Limit{{Strategy: sluice.FixedWindow{Limit: 1 << 53, WindowMs: 1000}}}, 1 << 53},
		{"composite: smallest cost ceiling", []sluice.Limit{
			{Strategy: sluice.TokenBucket{Capacity: 50, RefillPerSec: 1}},
			{Strategy: sluice.FixedWindow{Limit: 30, WindowMs: 1000}},
			{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 40}},
		}, 30},
		{"composite: request unit does not bound cost", []sluice.Limit{
			{Name: "requests", Strategy: sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}, Unit: sluice.UnitRequest},
			{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}},
		}, 1000},
		{"composite: request unit after cost", []sluice.Limit{
			{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1}},
			{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}, Unit: sluice.UnitRequest},
		}, 1000},
		{"request unit only: unbounded", []sluice.Limit{
			{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}, Unit: sluice.UnitRequest},
		}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("p", tt.limits...)
			if got := p.MaxCost(); got != tt.want {
				t.Errorf("MaxCost() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPolicyCost(t *testing.T) {
	p := sluice.MustPolicy("p",
		sluice.Limit{Strategy: validFixed, Unit: sluice.UnitRequest},
		sluice.Limit{Strategy: validTokenBucket},
	)
	tests := []struct {
		name  string
		limit int
		cost  int64
		want  int64
	}{
		{"request unit counts 1", 0, 7, 1},
		{"request unit counts 1 for cost 1", 0, 1, 1},
		{"cost unit counts the cost", 1, 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Cost(tt.limit, tt.cost); got != tt.want {
				t.Errorf("Cost(%d, %d) = %d, want %d", tt.limit, tt.cost, got, tt.want)
			}
		})
	}
}

func TestUnitString(t *testing.T) {
	tests := []struct {
		unit sluice.Unit
		want string
	}{
		{sluice.UnitCost, "cost"},
		{sluice.UnitRequest, "request"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.unit.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPolicyEqual(t *testing.T) {
	tokens := sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}}
	requests := sluice.Limit{Name: "requests", Strategy: sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}, Unit: sluice.UnitRequest}
	base := sluice.MustPolicy("gpt-4o", requests, tokens)
	var nilPolicy *sluice.Policy
	tests := []struct {
		name string
		p, q *sluice.Policy
		want bool
	}{
		{"same pointer", base, base, true},
		{"rebuilt from the same limits", base, sluice.MustPolicy("gpt-4o", requests, tokens), true},
		{"both nil", nilPolicy, nilPolicy, true},
		{"nil and non-nil", nilPolicy, base, false},
		{"non-nil and nil", base, nilPolicy, false},
		{"other name", base, sluice.MustPolicy("gpt-4o-mini", requests, tokens), false},
		{"limits swapped", base, sluice.MustPolicy("gpt-4o", tokens, requests), false},
		{"limit dropped", base, sluice.MustPolicy("gpt-4o", requests), false},
		{"limit renamed", base, sluice.MustPolicy("gpt-4o", requests, sluice.Limit{Name: "toks", Strategy: tokens.Strategy}), false},
		{"unit changed", base, sluice.MustPolicy("gpt-4o", sluice.Limit{Name: requests.Name, Strategy: requests.Strategy}, tokens), false},
		{"parameter changed", base, sluice.MustPolicy("gpt-4o", requests,
			sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 2000, RefillPerSec: 1000.0 / 60}}), false},
		{"strategy kind changed", base, sluice.MustPolicy("gpt-4o", requests,
			sluice.Limit{Name: "tokens", Strategy: sluice.FixedWindow{Limit: 1000, WindowMs: 60_000}}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Equal(tt.q); got != tt.want {
				t.Errorf("p.Equal(q) = %v, want %v", got, tt.want)
			}
			if tt.p != nil && tt.q != nil {
				if got := tt.q.Equal(tt.p); got != tt.want {
					t.Errorf("q.Equal(p) = %v, want %v (not symmetric)", got, tt.want)
				}
			}
		})
	}
}
