package redisstore

import (
	"testing"

	"github.com/sluicehq/sluice"
)

func TestKeyNamesEveryLimitApart(t *testing.T) {
	one := sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}}
	two := []sluice.Limit{one, {Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}}}
	type limit struct {
		policy *sluice.Policy
		key    string
		i      int
	}
	// Pairs that a plain prefix:{policy:key} would have given one Redis key.
	limits := []limit{
		{sluice.MustPolicy("login:ip", one), "1.2.3.4", 0},
		{sluice.MustPolicy("login", one), "ip:1.2.3.4", 0},
		{sluice.MustPolicy("a:b", one), "c}:1", 0},
		{sluice.MustPolicy("a", two...), "b:c}", 1},
		{sluice.MustPolicy("a:b", two...), "c", 1},
		{sluice.MustPolicy("a:b", two...), "c", 0},
		{sluice.MustPolicy("a", one), "b:c}:1:n3", 0},
		{sluice.MustPolicy("a", one), "b:c}:n3", 0},
		{sluice.MustPolicy("a::", one), "b", 0},
		{sluice.MustPolicy("a:", one), ":b", 0},
		{sluice.MustPolicy("a", one), "::b", 0},
	}
	s := &Store{prefix: "sluice"}
	seen := map[string]limit{}
	for _, l := range limits {
		k := s.key(l.policy, l.key, l.i)
		if prev, ok := seen[k]; ok {
			t.Errorf("policy %q key %q limit %d and policy %q key %q limit %d share %q",
				prev.policy.Name(), prev.key, prev.i, l.policy.Name(), l.key, l.i, k)
		}
		seen[k] = l
		if got, want := slot(k), slot(s.key(l.policy, l.key, 1-l.i)); len(l.policy.Limits()) > 1 && got != want {
			t.Errorf("%q: the limits of one policy and key are in slots %d and %d", k, got, want)
		}
	}

	// A name without ':' keeps the form earlier versions wrote, so its state is found after an
	// upgrade.
	tests := []struct {
		policy *sluice.Policy
		key    string
		i      int
		want   string
	}{
		{sluice.MustPolicy("api", one), "alice", 0, "sluice:{api:alice}"},
		{sluice.MustPolicy("model", two...), "gpt", 1, "sluice:{model:gpt}:1"},
		{sluice.MustPolicy("login:ip", one), "1.2.3.4", 0, "sluice:{login:ip:1.2.3.4}:n8"},
		{sluice.MustPolicy("m:x", two...), "k", 0, "sluice:{m:x:k}:0:n3"},
	}
	for _, tt := range tests {
		if got := s.key(tt.policy, tt.key, tt.i); got != tt.want {
			t.Errorf("key(%q, %q, %d) = %q, want %q", tt.policy.Name(), tt.key, tt.i, got, tt.want)
		}
	}
}
