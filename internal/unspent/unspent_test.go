package unspent_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/unspent"
)

var (
	window   = sluice.FixedWindow{Limit: 10, WindowMs: 1000}
	single   = sluice.MustPolicy("single", sluice.Limit{Strategy: window})
	composed = sluice.MustPolicy("composed",
		sluice.Limit{Name: "requests", Strategy: window, Unit: sluice.UnitRequest},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 1}})
)

func allow(remaining int64) sluice.Decision {
	return sluice.Decision{Allowed: true, Remaining: remaining, DeniedBy: -1}
}

func deny(remaining int64) sluice.Decision {
	return sluice.Decision{Remaining: remaining, RetryAfterMs: 100}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		p     *sluice.Policy
		cost  int64
		parts []sluice.Decision
		want  []sluice.Decision
	}{
		{"allowed: as decided", composed, 30, []sluice.Decision{allow(4), allow(20)}, []sluice.Decision{allow(4), allow(20)}},
		{"a single limit denied: as decided", single, 3, []sluice.Decision{deny(2)}, []sluice.Decision{deny(2)}},
		{"requests allowed, tokens denied: the request back", composed, 30, []sluice.Decision{allow(4), deny(20)}, []sluice.Decision{allow(5), deny(20)}},
		{"tokens allowed, requests denied: the cost back", composed, 30, []sluice.Decision{deny(0), allow(20)}, []sluice.Decision{deny(0), allow(50)}},
		{"both denied: as decided", composed, 30, []sluice.Decision{deny(0), deny(20)}, []sluice.Decision{deny(0), deny(20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unspent.Check(tt.p, tt.cost, tt.parts)
			if !reflect.DeepEqual(tt.parts, tt.want) {
				t.Errorf("got %+v, want %+v", tt.parts, tt.want)
			}
		})
	}
}

func TestCheckAll(t *testing.T) {
	ps := []*sluice.Policy{single, composed, single}
	items := []sluice.Item{{Policy: single.Name(), Key: "a", Cost: 3}, {Policy: composed.Name(), Key: "b", Cost: 30}, {Policy: single.Name(), Key: "c", Cost: 2}}
	tests := []struct {
		name  string
		parts []sluice.Decision // one per limit of each op: 1, 2, 1
		want  []sluice.Decision
	}{
		{"allowed: as decided", []sluice.Decision{allow(7), allow(4), allow(20), allow(8)}, []sluice.Decision{allow(7), allow(4), allow(20), allow(8)}},
		{"the last item denied: every part that allowed gets its cost back", []sluice.Decision{allow(7), allow(4), allow(20), deny(1)}, []sluice.Decision{allow(10), allow(5), allow(50), deny(1)}},
		{"a composite's part denied: the others too", []sluice.Decision{allow(7), allow(4), deny(20), allow(8)}, []sluice.Decision{allow(10), allow(5), deny(20), allow(10)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unspent.CheckAll(ps, items, tt.parts)
			if !reflect.DeepEqual(tt.parts, tt.want) {
				t.Errorf("got %+v, want %+v", tt.parts, tt.want)
			}
		})
	}
}
