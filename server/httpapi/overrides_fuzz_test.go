package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
)

// FuzzOverrideBody feeds any body to the PUT decoder, and what it accepts to a Table. Neither may
// panic; whatever the decoder accepts, encoding/json reads the same way; and the Table stores it
// as decoded, or refuses it as bad input, storing nothing.
func FuzzOverrideBody(f *testing.F) {
	for _, seed := range []string{
		`{"plan":"pro"}`,
		`{"plan":"pro","ttlMs":3600000,"reason":"trial"}`,
		`{"plan":"pro","expiresAt":4102444800000}`,
		`{"limits":[{"strategy":"gcra","limit":10,"periodMs":1000,"burst":5,"name":"n","unit":"request"}]}`,
		`{"limits":[{"strategy":"tokenBucket","capacity":-1,"refillPerSec":1}]}`,
		`{"limits":[{"strategy":"fixedWindow","limit":5,"calendar":"month","timezone":"Europe/Paris"}]}`,
		`{"limits":[{"strategy":"slidingWindow","limit":5,"windowMs":60000,"buckets":6}]}`,
		`{"limits":[]}`, `{"limits":[1]}`, `{"limits":null}`, `{"plan":"pro","limits":[{"strategy":"gcra"}]}`,
		`{"plan":"pro","ttlMs":0}`, `{"plan":"pro","ttlMs":1,"expiresAt":1}`, `{"plan":"pro","ttlMs":1e3}`,
		`{"policy":"p","key":"k","plan":"pro"}`, `{"Plan":"pro"}`, `{"plan":"pro"} x`, `{"plan":"\ud800"}`,
		`[`, ``, `{}`,
	} {
		f.Add([]byte(seed))
	}
	const now = 1_700_000_000_000
	pro, err := sluice.NewPolicy("tiers", sluice.Limit{Strategy: sluice.GCRA{Limit: 600, PeriodMs: 60_000, Burst: 50}})
	if err != nil {
		f.Fatal(err)
	}
	plans := overrides.Plans{"tiers": {"": pro.WithPlan("free"), "free": pro.WithPlan("free"), "pro": pro.WithPlan("pro")}}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := decodeOverride(data, "tiers", "k", now)
		if err != nil {
			return
		}
		var want struct {
			Plan      string            `json:"plan"`
			Limits    []overrides.Limit `json:"limits"`
			TTLMs     *int64            `json:"ttlMs"`
			ExpiresAt int64             `json:"expiresAt"`
			Reason    string            `json:"reason"`
		}
		if json.Unmarshal(data, &want) != nil {
			t.Fatalf("decodeOverride accepted %q, which encoding/json refuses", data)
		}
		if want.TTLMs != nil {
			want.ExpiresAt = now + *want.TTLMs
		}
		if o.Policy != "tiers" || o.Key != "k" || o.Plan != want.Plan || o.Reason != want.Reason ||
			o.ExpiresAt != want.ExpiresAt || !sameLimits(o.Limits, want.Limits) {
			t.Fatalf("decodeOverride(%q) = %+v, encoding/json reads %+v", data, o, want)
		}
		table, err := overrides.New(overrides.Config{Resolve: plans.Resolve, Now: func() int64 { return now }})
		if err != nil {
			t.Fatal(err)
		}
		defer table.Close()
		if err := table.Set(context.Background(), o); err != nil {
			if !errors.Is(err, sluice.ErrInvalid) || table.Len() != 0 {
				t.Fatalf("Set(%+v) = %v with %d stored, want bad input storing nothing", o, err, table.Len())
			}
			return
		}
		got, ok := table.Get("tiers", "k")
		o.UpdatedAt = now
		if !ok || got.Plan != o.Plan || got.ExpiresAt != o.ExpiresAt || got.Reason != o.Reason || !sameLimits(got.Limits, o.Limits) {
			t.Fatalf("Set(%+v) stored %+v", o, got)
		}
	})
}

// sameLimits is reflect.DeepEqual with no limits, nil or empty, all the same.
func sameLimits(a, b []overrides.Limit) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}
