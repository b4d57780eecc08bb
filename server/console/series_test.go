package console

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sluicehq/sluice/server"
)

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004}
	for _, tc := range []struct {
		name string
		q    float64
		cum  []uint64
		want float64
	}{
		{"no calls", 0.5, []uint64{0, 0, 0, 0}, 0},
		{"all in the first bucket: linear from 0", 0.5, []uint64{10, 10, 10, 10}, 0.0005},
		{"rank in the second bucket", 0.5, []uint64{2, 10, 10, 10}, 0.001 + 0.001*(5-2)/8.0},
		{"p99 in the third bucket", 0.99, []uint64{0, 0, 100, 100}, 0.002 + 0.002*99/100},
		{"past the last bound answers the last bound", 0.99, []uint64{0, 0, 0, 10}, 0.004},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.q, bounds, tc.cum); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	prev := server.Totals{
		Policies:    map[string]server.PolicyTotals{"api": {Allowed: 10, Denied: 1}, "idle": {Allowed: 4}},
		StoreBounds: []float64{0.001, 0.01}, StoreCalls: []uint64{5, 9, 10},
		StoreErrors: 1, ReloadsOK: 1,
	}
	cur := server.Totals{
		Policies:    map[string]server.PolicyTotals{"api": {Allowed: 15, Denied: 4, FailOpen: 2}, "idle": {Allowed: 4}, "new": {Denied: 3}},
		StoreBounds: []float64{0.001, 0.01}, StoreCalls: []uint64{9, 13, 14},
		StoreErrors: 2, StoreTimeouts: 3, ReloadsOK: 1, ReloadsFailed: 1,
	}
	p := diff(42_000, prev, cur)
	want := map[string]server.PolicyTotals{"api": {Allowed: 5, Denied: 3, FailOpen: 2}, "new": {Denied: 3}}
	if len(p.policies) != len(want) || p.policies["api"] != want["api"] || p.policies["new"] != want["new"] {
		t.Errorf("policies %+v, want %+v (a policy with nothing to count left out)", p.policies, want)
	}
	if p.t != 42_000 || p.calls != 4 || p.errors != 1 || p.timeouts != 3 || p.reloads != [2]uint64{0, 1} {
		t.Errorf("point %+v", p)
	}
	if p.p50 != 0.5 || p.p99 != 0.99 { // the 4 calls of the second all took at most 1 ms
		t.Errorf("p50 %v p99 %v ms, want 0.5 and 0.99", p.p50, p.p99)
	}
	if q := diff(0, server.Totals{}, cur); q.calls != 14 || q.p50 != 0 {
		t.Errorf("a first reading: %d calls, p50 %v; want all 14 counted and no quantile", q.calls, q.p50)
	}
}

func TestHistory(t *testing.T) {
	var h history
	for i := range historyLen + 10 {
		h.add(point{t: int64(i)})
	}
	ps := h.points()
	if len(ps) != historyLen || ps[0].t != 10 || ps[len(ps)-1].t != historyLen+9 {
		t.Fatalf("%d points from %d to %d, want %d from 10", len(ps), ps[0].t, ps[len(ps)-1].t, historyLen)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].t != ps[i-1].t+1 {
			t.Fatalf("points out of order at %d: %d after %d", i, ps[i].t, ps[i-1].t)
		}
	}
}

func TestFill(t *testing.T) {
	c := &Console{}
	c.hist.add(point{t: 1000})
	c.fill(4000) // seconds 2000 and 3000 were missed
	c.hist.add(point{t: 4000})
	var got []int64
	for _, p := range c.hist.points() {
		got = append(got, p.t)
	}
	if want := []int64{1000, 2000, 3000, 4000}; len(got) != 4 || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("instants %v, want %v", got, want)
	}
}

func TestEncodeHistory(t *testing.T) {
	ps := []point{
		{t: 1000, policies: map[string]server.PolicyTotals{"api": {Allowed: 2}}, p50: 0.5, calls: 2},
		{t: 2000},
		{t: 3000, policies: map[string]server.PolicyTotals{"api": {Denied: 1}, "b": {Errors: 1}}, reloads: [2]uint64{1, 0}},
	}
	data, err := encodeHistory(ps, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Start    int64                          `json:"start"`
		StepMs   int64                          `json:"stepMs"`
		Policies map[string]map[string][]uint64 `json:"policies"`
		Store    map[string][]float64           `json:"store"`
		Reloads  map[string][]uint64            `json:"reloads"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatal(err)
	}
	if h.Start != 1000 || h.StepMs != 1000 || len(h.Policies) != 2 {
		t.Fatalf("history %s", data)
	}
	if a := h.Policies["api"]; len(a["allowed"]) != 3 || a["allowed"][0] != 2 || a["denied"][2] != 1 || h.Policies["b"]["errors"][2] != 1 {
		t.Errorf("policy columns %v", h.Policies)
	}
	if _, ok := h.Policies["api"]["failOpen"]; ok || len(h.Policies["b"]) != 1 {
		t.Errorf("series of zeros sent: %v", h.Policies)
	}
	if h.Store["p50Ms"][0] != 0.5 || h.Store["calls"][0] != 2 || h.Reloads["ok"][2] != 1 {
		t.Errorf("store %v reloads %v", h.Store, h.Reloads)
	}
}
