package header_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
)

// t0 is the instant decisions are taken at: 2023-11-14T22:13:20Z in epoch ms.
const t0 int64 = 1_700_000_000_000

func TestFormat(t *testing.T) {
	tests := []struct {
		name                string
		items               []header.Item
		wantPolicy, wantNow string
	}{
		{"none", nil, "", ""},
		{"one item", []header.Item{{Name: "api", Quota: 10, Window: time.Minute, Remaining: 7, Reset: time.Millisecond}},
			`"api";q=10;w=60`, `"api";r=7;t=1`},
		{"reset on the second", []header.Item{{Name: "api", Quota: 10, Window: time.Minute, Remaining: 7, Reset: 2 * time.Second}},
			`"api";q=10;w=60`, `"api";r=7;t=2`},
		{"reset rounds up, window to the nearest", []header.Item{{Name: "api", Quota: 10, Window: 1500 * time.Millisecond, Remaining: 7, Reset: 2001 * time.Millisecond}},
			`"api";q=10;w=2`, `"api";r=7;t=3`},
		{"window rounds down to the nearest", []header.Item{{Name: "api", Quota: 10, Window: 1400 * time.Millisecond, Remaining: 7, Reset: time.Second}},
			`"api";q=10;w=1`, `"api";r=7;t=1`},
		{"window at least 1 s", []header.Item{{Name: "api", Quota: 10, Window: 200 * time.Millisecond, Remaining: 7, Reset: time.Second}},
			`"api";q=10;w=1`, `"api";r=7;t=1`},
		{"no window", []header.Item{{Name: "api", Quota: 10, Remaining: 10}}, `"api";q=10`, `"api";r=10;t=0`},
		{"longest window", []header.Item{{Name: "api", Quota: 1, Window: math.MaxInt64}}, `"api";q=1;w=9223372036`, `"api";r=0;t=0`},
		{"reset past, remaining below 0", []header.Item{{Name: "api", Quota: 10, Remaining: -3, Reset: -5 * time.Second}},
			`"api";q=10`, `"api";r=0;t=0`},
		{"quoting", []header.Item{{Name: `a"b\c`, Quota: 1, Remaining: 1}}, `"a\"b\\c";q=1`, `"a\"b\\c";r=1;t=0`},
		{"not printable ASCII", []header.Item{{Name: "naïve\tx", Quota: 1, Remaining: 1}}, `"na??ve?x";q=1`, `"na??ve?x";r=1;t=0`},
		{"several", []header.Item{
			{Name: "per-ip", Quota: 2, Window: time.Minute, Remaining: 1, Reset: 45 * time.Second},
			{Name: "edge.client", Quota: 3, Window: 3 * time.Second, Remaining: 2, Reset: 500 * time.Millisecond},
		}, `"per-ip";q=2;w=60, "edge.client";q=3;w=3`, `"per-ip";r=1;t=45, "edge.client";r=2;t=1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy, now := header.Format(tt.items...)
			if policy != tt.wantPolicy || now != tt.wantNow {
				t.Errorf("Format = %q, %q; want %q, %q", policy, now, tt.wantPolicy, tt.wantNow)
			}
		})
	}
}

func TestSet(t *testing.T) {
	tokens := sluice.TokenBucket{Capacity: 10, RefillPerSec: 2}
	one := func(s sluice.Strategy) *sluice.Policy { return sluice.MustPolicy("p", sluice.Limit{Strategy: s}) }
	allowed := func(resetAt int64) sluice.Decision {
		return sluice.Decision{Allowed: true, Limit: 1, ResetAt: resetAt, DeniedBy: -1}
	}
	composite := sluice.MustPolicy("m",
		sluice.Limit{Name: `say "hi"`, Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}},
		sluice.Limit{Name: "naïve", Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 60_000}})
	parts := []sluice.Decision{
		{Allowed: true, Limit: 1, Remaining: 0, ResetAt: t0 + 1000, DeniedBy: -1},
		{Limit: 2, Remaining: 0, ResetAt: t0 + 500, RetryAfterMs: 500, DeniedBy: 0},
		{Allowed: true, Limit: 3, Remaining: 2, ResetAt: t0 + 59_001, DeniedBy: -1},
	}
	tests := []struct {
		name                    string
		p                       *sluice.Policy
		d                       sluice.Decision
		policy, rateLimit, wait string
	}{
		{"token bucket", one(tokens), allowed(t0 + 1), `"p";q=10;w=5`, `"p";r=0;t=1`, ""},
		{"gcra: burst cells", one(sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20}), allowed(t0), `"p";q=20;w=12`, `"p";r=0;t=0`, ""},
		{"sub-second window", one(sluice.FixedWindow{Limit: 3, WindowMs: 200}), allowed(t0 - 5), `"p";q=3;w=1`, `"p";r=0;t=0`, ""},
		{"sliding window", one(sluice.SlidingWindow{Limit: 7.9, WindowMs: 90_400, Buckets: 4}), allowed(t0), `"p";q=7;w=90`, `"p";r=0;t=0`, ""},
		{"sliding window log", one(sluice.SlidingWindowLog{Limit: 7, WindowMs: 90_500}), allowed(t0), `"p";q=7;w=91`, `"p";r=0;t=0`, ""},
		{"denial", one(tokens), sluice.Decision{Limit: 10, ResetAt: t0 + 5000, RetryAfterMs: 2001, DeniedBy: 0},
			`"p";q=10;w=5`, `"p";r=0;t=5`, "3"},
		{"denial without wait", one(tokens), sluice.Decision{Limit: 10, ResetAt: t0, DeniedBy: 0}, `"p";q=10;w=5`, `"p";r=0;t=0`, "1"},
		{"fail open: no numbers", one(tokens), sluice.Decision{Allowed: true, DeniedBy: -1}, `"p";q=10;w=5`, "", ""},
		{"composite: one item per limit", composite,
			sluice.Decision{Limit: 2, ResetAt: t0 + 500, RetryAfterMs: 500, DeniedBy: 1, Parts: parts},
			`"m#say \"hi\"";q=1;w=1, "m#1";q=2;w=1, "m#2";q=3;w=60`,
			`"m#say \"hi\"";r=0;t=1, "m#1";r=0;t=1, "m#2";r=2;t=60`, "1"},
		{"composite without parts", composite, allowed(t0),
			`"m#say \"hi\"";q=1;w=1, "m#1";q=2;w=1, "m#2";q=3;w=60`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Ratelimit": {"stale"}, "Retry-After": {"9"}}
			header.Set(h, tt.p, tt.d, time.UnixMilli(t0))
			for _, f := range []struct{ name, got, want string }{
				{"RateLimit-Policy", h.Get("RateLimit-Policy"), tt.policy},
				{"RateLimit", h.Get("RateLimit"), tt.rateLimit},
				{"Retry-After", h.Get("Retry-After"), tt.wait},
			} {
				if f.got != f.want {
					t.Errorf("%s %q, want %q", f.name, f.got, f.want)
				}
			}
			if policy, rateLimit := header.Fields(tt.p, tt.d, time.UnixMilli(t0)); policy != tt.policy || rateLimit != tt.rateLimit {
				t.Errorf("Fields = %q, %q; want what Set set", policy, rateLimit)
			}
		})
	}
}

func TestSetItems(t *testing.T) {
	h := http.Header{"Retry-After": {"9"}}
	header.SetItems(h, sluice.Decision{Allowed: true}, header.Item{Name: "api", Quota: 2, Remaining: 1, Reset: time.Second})
	if got, want := [3]string{h.Get("RateLimit-Policy"), h.Get("RateLimit"), h.Get("Retry-After")}, [3]string{`"api";q=2`, `"api";r=1;t=1`, ""}; got != want {
		t.Errorf("SetItems: %q, want %q", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		ms   int64
		want string
	}{
		{"negative", -5, "1"},
		{"none", 0, "1"},
		{"1 ms", 1, "1"},
		{"just under a second", 999, "1"},
		{"a second", 1000, "1"},
		{"just over a second", 1001, "2"},
		{"1.5 s", 1500, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := header.RetryAfter(sluice.Decision{RetryAfterMs: tt.ms}); got != tt.want {
				t.Errorf("RetryAfter(%d ms) = %q, want %q", tt.ms, got, tt.want)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		name     string
		strategy sluice.Strategy
		want     time.Duration
	}{
		{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}, 500 * time.Millisecond},
		{"token bucket", sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}, time.Minute},
		{"fixed window", sluice.FixedWindow{Limit: 5, WindowMs: 15 * 60_000}, 15 * time.Minute},
		{"sliding window", sluice.SlidingWindow{Limit: 5, WindowMs: 1000, Buckets: 4}, time.Second},
		{"sliding window log", sluice.SlidingWindowLog{Limit: 5, WindowMs: 2500}, 2500 * time.Millisecond},
		{"beyond a Duration", sluice.FixedWindow{Limit: 5, WindowMs: 1e15}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := header.Window(sluice.Limit{Strategy: tt.strategy}); got != tt.want {
				t.Errorf("Window = %v, want %v", got, tt.want)
			}
		})
	}
}
