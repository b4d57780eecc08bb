package sluice_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func allowedPart(limit, remaining, resetAt int64) sluice.Decision {
	return sluice.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAt: resetAt, DeniedBy: -1}
}

func deniedPart(limit, remaining, resetAt, retry int64) sluice.Decision {
	return sluice.Decision{Limit: limit, Remaining: remaining, ResetAt: resetAt, RetryAfterMs: retry}
}

func TestCombine(t *testing.T) {
	tests := []struct {
		name  string
		parts []sluice.Decision
		// bind is the index of the part whose Limit, Remaining, ResetAt and RetryAfterMs the result
		// carries; -1 for none.
		bind     int
		allowed  bool
		deniedBy int
	}{
		{
			name:  "single allowed part",
			parts: []sluice.Decision{allowedPart(10, 4, 1500)},
			bind:  0, allowed: true, deniedBy: -1,
		},
		{
			name:  "single denied part",
			parts: []sluice.Decision{deniedPart(10, 0, 1500, 300)},
			bind:  0, allowed: false, deniedBy: 0,
		},
		{
			name:  "all allowed: least remaining binds",
			parts: []sluice.Decision{allowedPart(500, 499, 61_000), allowedPart(1000, 20, 2_000), allowedPart(50, 49, 3_000)},
			bind:  1, allowed: true, deniedBy: -1,
		},
		{
			name:  "all allowed: least remaining binds when last",
			parts: []sluice.Decision{allowedPart(500, 499, 61_000), allowedPart(1000, 300, 2_000), allowedPart(50, 0, 3_000)},
			bind:  2, allowed: true, deniedBy: -1,
		},
		{
			name:  "all allowed: tie on remaining goes to the lowest index",
			parts: []sluice.Decision{allowedPart(10, 7, 1_000), allowedPart(20, 3, 2_000), allowedPart(30, 3, 3_000)},
			bind:  1, allowed: true, deniedBy: -1,
		},
		{
			name:  "one denied among allowed: it binds",
			parts: []sluice.Decision{allowedPart(50, 0, 1_000), deniedPart(5, 0, 900_000, 179_000), allowedPart(20, 10, 1_000)},
			bind:  1, allowed: false, deniedBy: 1,
		},
		{
			name:  "one denied first: it binds even with more remaining",
			parts: []sluice.Decision{deniedPart(2, 0, 61_000, 59_000), allowedPart(1000, 0, 2_000)},
			bind:  0, allowed: false, deniedBy: 0,
		},
		{
			name:  "several denied: longest retry binds",
			parts: []sluice.Decision{deniedPart(10, 0, 1_000, 100), allowedPart(10, 0, 1_000), deniedPart(10, 5, 1_000, 900), deniedPart(10, 0, 1_000, 400)},
			bind:  2, allowed: false, deniedBy: 2,
		},
		{
			name:  "several denied: longest retry binds when first",
			parts: []sluice.Decision{deniedPart(10, 9, 1_000, 1_000), deniedPart(10, 0, 1_000, 999)},
			bind:  0, allowed: false, deniedBy: 0,
		},
		{
			name:  "several denied: retry tie goes to the least remaining",
			parts: []sluice.Decision{deniedPart(10, 3, 1_000, 500), deniedPart(20, 1, 2_000, 500), deniedPart(30, 2, 3_000, 500)},
			bind:  1, allowed: false, deniedBy: 1,
		},
		{
			name:  "several denied: retry and remaining tie goes to the lowest index",
			parts: []sluice.Decision{allowedPart(10, 0, 1_000), deniedPart(10, 2, 1_000, 500), deniedPart(20, 2, 2_000, 500), deniedPart(30, 2, 3_000, 500)},
			bind:  1, allowed: false, deniedBy: 1,
		},
		{
			name:  "denied part binds although an allowed part has less remaining",
			parts: []sluice.Decision{allowedPart(10, 0, 1_000), deniedPart(10, 3, 1_000, 10)},
			bind:  1, allowed: false, deniedBy: 1,
		},
		{
			name:  "no parts: allowed",
			parts: nil,
			bind:  -1, allowed: true, deniedBy: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]sluice.Decision(nil), tt.parts...)
			got := sluice.Combine(in)
			if got.Allowed != tt.allowed {
				t.Errorf("Allowed = %v, want %v", got.Allowed, tt.allowed)
			}
			if got.DeniedBy != tt.deniedBy {
				t.Errorf("DeniedBy = %d, want %d", got.DeniedBy, tt.deniedBy)
			}
			if tt.bind >= 0 {
				b := tt.parts[tt.bind]
				if got.Limit != b.Limit || got.Remaining != b.Remaining || got.ResetAt != b.ResetAt || got.RetryAfterMs != b.RetryAfterMs {
					t.Errorf("result {limit %d remaining %d resetAt %d retry %d}, want part %d's {limit %d remaining %d resetAt %d retry %d}",
						got.Limit, got.Remaining, got.ResetAt, got.RetryAfterMs, tt.bind, b.Limit, b.Remaining, b.ResetAt, b.RetryAfterMs)
				}
			}
			if tt.allowed && got.RetryAfterMs != 0 {
				t.Errorf("RetryAfterMs = %d on an allowed result", got.RetryAfterMs)
			}
			// Parts is the slice passed in, untouched.
			if len(got.Parts) != len(tt.parts) {
				t.Fatalf("len(Parts) = %d, want %d", len(got.Parts), len(tt.parts))
			}
			if len(in) > 0 && &got.Parts[0] != &in[0] {
				t.Errorf("Parts is a copy, want the slice passed in")
			}
			if !reflect.DeepEqual(in, tt.parts) {
				t.Errorf("Combine changed its input: %+v, want %+v", in, tt.parts)
			}
		})
	}
}

// A part that is itself a composite (a CheckAll item with a composite policy) keeps its own parts
// in the input, while the result's Parts are the items.
func TestCombineNested(t *testing.T) {
	inner := sluice.Combine([]sluice.Decision{allowedPart(2, 1, 61_000), deniedPart(1000, 400, 37_000, 6_000)})
	outer := sluice.Combine([]sluice.Decision{allowedPart(50, 49, 900_000), inner})
	if outer.Allowed || outer.DeniedBy != 1 {
		t.Fatalf("Allowed %v DeniedBy %d, want false 1", outer.Allowed, outer.DeniedBy)
	}
	if outer.RetryAfterMs != 6_000 || outer.Remaining != 400 {
		t.Errorf("retry %d remaining %d, want 6000 400", outer.RetryAfterMs, outer.Remaining)
	}
	if len(outer.Parts) != 2 || len(outer.Parts[1].Parts) != 2 || outer.Parts[1].DeniedBy != 1 {
		t.Errorf("nested parts lost: %+v", outer.Parts)
	}
}

func TestDecisionTimes(t *testing.T) {
	d := sluice.Decision{RetryAfterMs: 1_500, ResetAt: 1_700_000_000_250}
	if got, want := d.RetryAfter(), 1500*time.Millisecond; got != want {
		t.Errorf("RetryAfter() = %v, want %v", got, want)
	}
	if got, want := d.Reset(), time.UnixMilli(1_700_000_000_250); !got.Equal(want) {
		t.Errorf("Reset() = %v, want %v", got, want)
	}
}

func TestDecisionJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{
			name: "single",
			v:    sluice.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAt: 1000, DeniedBy: -1},
			want: `{"allowed":true,"limit":10,"remaining":9,"resetAt":1000,"retryAfterMs":0,"deniedBy":-1}`,
		},
		{
			name: "with parts",
			v:    sluice.Combine([]sluice.Decision{deniedPart(2, 0, 5, 7)}),
			want: `{"allowed":false,"limit":2,"remaining":0,"resetAt":5,"retryAfterMs":7,"deniedBy":0,` +
				`"parts":[{"allowed":false,"limit":2,"remaining":0,"resetAt":5,"retryAfterMs":7,"deniedBy":0}]}`,
		},
		{
			name: "forecast",
			v:    sluice.Forecast{SpendableNow: 3, NextReplenishAt: 4, FullAt: 5},
			want: `{"spendableNow":3,"nextReplenishAt":4,"fullAt":5}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("JSON = %s, want %s", b, tt.want)
			}
		})
	}
}

func TestVerdictDecision(t *testing.T) {
	tests := []struct {
		name string
		v    sluice.Verdict
		want sluice.Decision
	}{
		{"allowed", sluice.Verdict{Allowed: true, Remaining: 4, ResetAt: 1000}, allowedPart(10, 4, 1000)},
		{"denied", sluice.Verdict{Remaining: 0, ResetAt: 2000, RetryAfterMs: 300}, deniedPart(10, 0, 2000, 300)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.Decision(10); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decision(10) = %+v, want %+v", got, tt.want)
			}
		})
	}
}
