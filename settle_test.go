package sluice_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// llmPolicy is a per-model limit: 60 requests a minute, each counted once whatever its
// cost, and 10,000 tokens a minute in a bucket of 10,000.
var llmPolicy = sluice.MustPolicy("gpt",
	sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 60, WindowMs: 60_000, Buckets: 6}, Unit: sluice.UnitRequest},
	sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10_000, RefillPerSec: 10_000.0 / 60}},
)

// TestSettle reserves an estimate, then settles it with the real count: under, the difference
// comes back; over, the key goes into debt and its next request waits for the tokens to refill.
// Requests are counted once each, whatever is settled.
func TestSettle(t *testing.T) {
	lim := newLimiter(t, llmPolicy)
	ctx := at(t0)
	tokens := func() (requests, tokens int64) {
		t.Helper()
		d := mustPeek(t, lim, ctx, "gpt", "team")
		return d.Parts[0].Remaining, d.Parts[1].Remaining
	}

	mustCheck(t, lim, ctx, "gpt", "team", 1000) // reserve
	if err := lim.Settle(ctx, "gpt", "team", 1000, 400); err != nil {
		t.Fatal(err)
	}
	if r, tk := tokens(); r != 59 || tk != 9600 {
		t.Fatalf("after settling 400 of 1000: %d requests and %d tokens left, want 59 and 9600", r, tk)
	}

	mustCheck(t, lim, ctx, "gpt", "team", 1000) // 8600 left
	if err := lim.Settle(ctx, "gpt", "team", 1000, 12_000); err != nil {
		t.Fatal(err)
	}
	if r, tk := tokens(); r != 58 || tk != 0 {
		t.Fatalf("after settling 12000 of 1000: %d requests and %d tokens left, want 58 and 0 (in debt)", r, tk)
	}
	// 8600 - 11000 = -2400 tokens: one more token is 2401 away at 1/6 a millisecond.
	d := mustCheck(t, lim, ctx, "gpt", "team", 1)
	if d.Allowed || d.DeniedBy != 1 || d.RetryAfterMs != 14_406 {
		t.Fatalf("check in debt: %+v, want denied by the token limit with retryAfterMs 14406", d)
	}
	if d := mustCheck(t, lim, at(t0+14_406), "gpt", "team", 1); !d.Allowed {
		t.Fatalf("check once the debt is paid: %+v, want allowed", d)
	}

	if err := lim.Settle(ctx, "gpt", "team", 500, 500); err != nil {
		t.Fatalf("settling exactly what was reserved: %v", err)
	}
}

func TestSettleBadInput(t *testing.T) {
	lim := newLimiter(t, llmPolicy)
	ctx := at(t0)
	for _, tc := range []struct {
		name             string
		policy, key      string
		reserved, actual int64
		field            string
		err              error
	}{
		{name: "reserved zero", policy: "gpt", key: "k", reserved: 0, actual: 1, field: "reserved"},
		{name: "actual negative", policy: "gpt", key: "k", reserved: 1, actual: -1, field: "actual"},
		{name: "empty key, refund", policy: "gpt", key: "", reserved: 2, actual: 1, field: "key"},
		{name: "empty key, debit", policy: "gpt", key: "", reserved: 1, actual: 2, field: "key"},
		{name: "empty key, even", policy: "gpt", key: "", reserved: 1, actual: 1, field: "key"},
		{name: "actual past 2^53", policy: "gpt", key: "k", reserved: 1, actual: 1<<53 + 1, field: "actual"},
		{name: "reserved past 2^53", policy: "gpt", key: "k", reserved: 1<<53 + 1, actual: 1, field: "reserved"},
		{name: "unknown policy", policy: "nope", key: "k", reserved: 1, actual: 2, err: sluice.ErrUnknownPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.Settle(ctx, tc.policy, tc.key, tc.reserved, tc.actual)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %v, want %v", err, tc.err)
				}
				return
			}
			var ie *sluice.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("got %v, want an InvalidError naming %q", err, tc.field)
			}
		})
	}
	if d := mustPeek(t, lim, ctx, "gpt", "k"); d.Parts[1].Remaining != 10_000 {
		t.Fatalf("bad input changed state: %+v", d)
	}
}
