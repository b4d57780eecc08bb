package region_test

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
)

// wantInvalid fails t unless err is a *sluice.InvalidError for field that matches ErrInvalid.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *sluice.InvalidError
	if !errors.As(err, &ie) || !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("error %v, want an *InvalidError for %q", err, field)
	}
	if ie.Field != field {
		t.Fatalf("error names %q (%v), want %q", ie.Field, err, field)
	}
}

func TestEven(t *testing.T) {
	tests := []struct {
		name    string
		limit   int64
		regions []string
		want    map[string]int64
		field   string // the InvalidError's field, when an error is wanted
	}{
		{name: "divides", limit: 900, regions: []string{"mumbai", "frankfurt", "virginia"},
			want: map[string]int64{"mumbai": 300, "frankfurt": 300, "virginia": 300}},
		{name: "remainder to the first in name order", limit: 11, regions: []string{"virginia", "mumbai", "frankfurt"},
			want: map[string]int64{"frankfurt": 4, "mumbai": 4, "virginia": 3}},
		{name: "fewer units than regions", limit: 1, regions: []string{"b", "a"},
			want: map[string]int64{"a": 1, "b": 0}},
		{name: "one region", limit: math.MaxInt64, regions: []string{"x"}, want: map[string]int64{"x": math.MaxInt64}},
		{name: "zero limit", limit: 0, regions: []string{"a"}, field: "limit"},
		{name: "negative limit", limit: -5, regions: []string{"a"}, field: "limit"},
		{name: "no regions", limit: 10, field: "regions"},
		{name: "empty name", limit: 10, regions: []string{"a", ""}, field: "regions[1]"},
		{name: "duplicate", limit: 10, regions: []string{"a", "b", "a"}, field: "regions[2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := region.Even(tt.limit, tt.regions)
			if tt.field != "" {
				wantInvalid(t, err, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Even(%d, %q) = %v, want %v", tt.limit, tt.regions, got, tt.want)
			}
		})
	}
}

func TestServed(t *testing.T) {
	demand := map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100}
	tests := []struct {
		name   string
		shares map[string]int64
		demand map[string]int64
		want   int64
	}{
		{name: "even split", shares: map[string]int64{"mumbai": 300, "frankfurt": 300, "virginia": 300}, demand: demand, want: 600},
		{name: "proportional split", shares: map[string]int64{"mumbai": 570, "frankfurt": 210, "virginia": 120}, demand: demand, want: 870},
		{name: "exact", shares: demand, demand: demand, want: 900},
		{name: "region without a share", shares: map[string]int64{"mumbai": 900}, demand: demand, want: 600},
		{name: "share of a region without demand is lost", shares: map[string]int64{"mumbai": 100, "paris": 800}, demand: demand, want: 100},
		{name: "negative counts as 0", shares: map[string]int64{"mumbai": -5}, demand: map[string]int64{"mumbai": 10, "frankfurt": -3}, want: 0},
		{name: "nothing", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := region.Served(tt.shares, tt.demand); got != tt.want {
				t.Fatalf("Served = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRegionRebalance(t *testing.T) {
	tests := []struct {
		name   string
		limit  int64
		demand map[string]int64
		floor  float64
		want   map[string]int64
		served int64 // Served(want, demand), as a cross-check of the case
		field  string
	}{
		{
			// docs/regions.md's example: a proportional split of the whole limit gives 570/210/120 and
			// serves 870.
			name: "docs/regions.md's example", limit: 900, floor: 0.1,
			demand: map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100},
			want:   map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100}, served: 900,
		},
		{
			// Base 30 each; demand above it (270 + 70) leaves 470, spread 157/157/156.
			name: "spare capacity spread evenly", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 300, "b": 100, "c": 0},
			want:   map[string]int64{"a": 457, "b": 257, "c": 186}, served: 400,
		},
		{
			// Demand above the limit leaves no slack, so no floor: in proportion, 450 each.
			name: "over the limit: in proportion, no floor", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 1000, "b": 1000, "c": 0},
			want:   map[string]int64{"a": 450, "b": 450, "c": 0}, served: 900,
		},
		{
			name: "over the limit: proportions kept", limit: 1000, floor: 0.1,
			demand: map[string]int64{"a": 3050, "b": 1050, "c": 50},
			// 734.94, 253.01, 12.05 -> 734, 253, 12, and the last unit to a, the largest remainder.
			want: map[string]int64{"a": 735, "b": 253, "c": 12}, served: 1000,
		},
		{
			name: "over the limit: a small demand is not raised to the base", limit: 900, floor: 0.3,
			demand: map[string]int64{"a": 2000, "b": 10},
			// 895.52 and 4.48: the last unit to a.
			want: map[string]int64{"a": 896, "b": 4}, served: 900,
		},
		{
			name: "largest remainder, ties in name order", limit: 10, floor: 0,
			demand: map[string]int64{"c": 5, "b": 5, "a": 5},
			want:   map[string]int64{"a": 4, "b": 3, "c": 3}, served: 10,
		},
		{
			name: "no demand anywhere is the even split", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 0, "b": 0, "c": 0},
			want:   map[string]int64{"a": 300, "b": 300, "c": 300},
		},
		{
			name: "no floor: an idle region gets its part of the leftover", limit: 900, floor: 0,
			demand: map[string]int64{"a": 800, "b": 0},
			want:   map[string]int64{"a": 850, "b": 50}, served: 800,
		},
		{
			// Issue 21: this gave 821/49/30, the idle region's floor taken from busy ones.
			name: "demand that fills the limit leaves no room for the floor", limit: 900, floor: 0.1,
			demand: map[string]int64{"mumbai": 850, "frankfurt": 50, "virginia": 0},
			want:   map[string]int64{"mumbai": 850, "frankfurt": 50, "virginia": 0}, served: 900,
		},
		{
			// Base 45 from the slack of 100; the other 55 spread 28/27.
			name: "the floor from the slack", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 800, "b": 0},
			want:   map[string]int64{"a": 828, "b": 72}, served: 800,
		},
		{
			// Base 30 each, but only 20 of slack: 10 each, in proportion to the 30 each lacks.
			name: "slack short of the floors", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 880, "b": 0, "c": 0},
			want:   map[string]int64{"a": 880, "b": 10, "c": 10}, served: 880,
		},
		{
			name: "slack short of the floors: in proportion to what each lacks", limit: 900, floor: 0.1,
			demand: map[string]int64{"a": 860, "b": 0, "c": 20},
			// lacks 30 and 10, slack 20: 15 and 5.
			want: map[string]int64{"a": 860, "b": 15, "c": 25}, served: 880,
		},
		{
			name: "limit below the number of regions", limit: 2, floor: 0.1,
			demand: map[string]int64{"a": 1, "b": 1, "c": 1},
			want:   map[string]int64{"a": 1, "b": 1, "c": 0}, served: 2,
		},
		{
			name: "huge values stay exact", limit: math.MaxInt64, floor: 0.5,
			demand: map[string]int64{"a": math.MaxInt64 - 1, "b": 1},
			want:   map[string]int64{"a": math.MaxInt64 - 1, "b": 1}, served: math.MaxInt64,
		},
		{
			name: "huge values: the floor from a huge slack", limit: math.MaxInt64, floor: 0.5,
			demand: map[string]int64{"a": 1 << 61, "b": 0},
			// base 2^61 (the float64 product rounds to 2^62); the rest of the slack spread evenly.
			want: map[string]int64{"a": 1<<61 + (math.MaxInt64-1<<62)/2 + 1, "b": 1<<61 + (math.MaxInt64-1<<62)/2}, served: 1 << 61,
		},
		{name: "zero limit", limit: 0, demand: map[string]int64{"a": 1}, field: "limit"},
		{name: "negative floor", limit: 10, floor: -0.1, demand: map[string]int64{"a": 1}, field: "floor"},
		{name: "floor of 1", limit: 10, floor: 1, demand: map[string]int64{"a": 1}, field: "floor"},
		{name: "NaN floor", limit: 10, floor: math.NaN(), demand: map[string]int64{"a": 1}, field: "floor"},
		{name: "no regions", limit: 10, floor: 0.1, field: "demand"},
		{name: "empty region name", limit: 10, floor: 0.1, demand: map[string]int64{"": 1}, field: "demand"},
		{name: "negative demand", limit: 10, floor: 0.1, demand: map[string]int64{"a": 1, "b": -1}, field: "demand[b]"},
		{name: "total overflows", limit: 10, floor: 0.1, demand: map[string]int64{"a": math.MaxInt64, "b": 1}, field: "demand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := region.Rebalance(tt.limit, tt.demand, tt.floor)
			if tt.field != "" {
				wantInvalid(t, err, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Rebalance(%d, %v, %v) = %v, want %v", tt.limit, tt.demand, tt.floor, got, tt.want)
			}
			if s := region.Served(got, tt.demand); s != tt.served && tt.served != 0 {
				t.Fatalf("serves %d, want %d", s, tt.served)
			}
			checkShares(t, tt.limit, tt.demand, tt.floor, got)
		})
	}
}

// proportional is the textbook rule Rebalance improves on: the base, and the rest of the limit
// in proportion to raw demand.
func proportional(limit int64, demand map[string]int64, floor float64) map[string]int64 {
	n := int64(len(demand))
	base := int64(float64(limit)*floor) / n
	var total float64
	for _, d := range demand {
		total += float64(d)
	}
	out := map[string]int64{}
	for r, d := range demand {
		out[r] = base
		if total > 0 {
			out[r] += int64(float64(limit-base*n) * float64(d) / total)
		}
	}
	return out
}

// checkShares checks what Rebalance promises for any input: the whole limit handed out and
// min(demand, limit) served; when demand fits, every region at least its demand, and the base
// when the slack covers it (else the slack all spent on floors); when it does not fit, no region
// above its demand.
func checkShares(t *testing.T, limit int64, demand map[string]int64, floor float64, got map[string]int64) {
	t.Helper()
	if len(got) != len(demand) {
		t.Fatalf("shares for %d regions, want %d", len(got), len(demand))
	}
	n := int64(len(demand))
	var reserve int64 = limit
	if f := float64(limit) * floor; f < float64(limit) {
		reserve = int64(f)
	}
	base := reserve / n
	var sum, total, lacking int64
	for r, s := range got {
		if s < 0 {
			t.Fatalf("%s got %d", r, s)
		}
		sum += s
		total += demand[r]
		lacking += max(0, base-demand[r])
	}
	if sum != limit {
		t.Fatalf("shares sum to %d, want the limit %d (shares %v)", sum, limit, got)
	}
	if served := region.Served(got, demand); served != min(total, limit) {
		t.Fatalf("serves %d of demand %d at limit %d, want all it can (shares %v)", served, total, limit, got)
	}
	lo, hi := int64(math.MaxInt64), int64(0) // the leftover each region got beyond demand and base
	for r, s := range got {
		d := demand[r]
		switch {
		case total > limit && s > d:
			t.Fatalf("%s got %d above its demand %d while demand %d exceeds the limit %d", r, s, d, total, limit)
		case total <= limit && s < d:
			t.Fatalf("%s got %d below its demand %d though demand %d fits in the limit %d", r, s, d, total, limit)
		case total <= limit && lacking <= limit-total && s < base:
			t.Fatalf("%s got %d below the base %d though the slack %d covers the floors (%d)", r, s, base, limit-total, lacking)
		case total <= limit && lacking > limit-total && s > max(d, base):
			t.Fatalf("%s got %d above max(demand %d, base %d) while floors are short", r, s, d, base)
		}
		lo, hi = min(lo, s-max(d, base)), max(hi, s-max(d, base))
	}
	if total <= limit && lacking <= limit-total && hi-lo > 1 {
		t.Fatalf("the leftover is spread unevenly: %d to %d extra (shares %v)", lo, hi, got)
	}
	if limit <= 1<<40 && total <= 1<<40 { // the float64 oracle is exact here
		if p := region.Served(proportional(limit, demand, floor), demand); region.Served(got, demand) < p {
			t.Fatalf("serves less than the proportional rule's %d", p)
		}
	}
	again, _ := region.Rebalance(limit, demand, floor)
	if !maps.Equal(got, again) {
		t.Fatalf("not deterministic: %v then %v", got, again)
	}
}

// TestRegionRebalanceProperties checks checkShares' promises over random limits, floors and
// demands, a third of them with total demand at most the limit, where floors compete for slack.
func TestRegionRebalanceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	for i := range 20000 {
		limit := 1 + rng.Int64N([]int64{10, 1000, 1 << 40, math.MaxInt64}[rng.IntN(4)])
		floor := []float64{0, 0.1, rng.Float64(), 0.999}[rng.IntN(4)]
		n := 1 + rng.IntN(len(names))
		scale := max(1, limit/int64(n)) // demand of the order of an even share
		if rng.IntN(3) == 0 {
			scale = max(1, scale/2)
		}
		demand := map[string]int64{}
		for _, r := range names[:n] {
			switch rng.IntN(4) {
			case 0: // idle
				demand[r] = 0
			default:
				demand[r] = rng.Int64N(2 * min(scale, math.MaxInt64/16)) // the total fits in an int64
			}
		}
		got, err := region.Rebalance(limit, demand, floor)
		if err != nil {
			t.Fatalf("case %d: Rebalance(%d, %v, %v): %v", i, limit, demand, floor, err)
		}
		checkShares(t, limit, demand, floor, got)
	}
}

func FuzzRebalance(f *testing.F) {
	f.Add(int64(900), int64(600), int64(200), int64(100), uint8(3), 0.1)
	f.Add(int64(7), int64(0), int64(0), int64(5), uint8(2), 0.0)
	f.Add(int64(1), int64(1), int64(1), int64(1), uint8(3), 0.9)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64/3), int64(5), int64(0), uint8(3), 0.5)
	f.Fuzz(func(t *testing.T, limit, a, b, c int64, n uint8, floor float64) {
		names := []string{"a", "b", "c"}[:1+int(n)%3]
		demand := map[string]int64{}
		for i, d := range []int64{a, b, c}[:len(names)] {
			demand[names[i]] = d
		}
		got, err := region.Rebalance(limit, demand, floor)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		checkShares(t, limit, demand, floor, got)
	})
}
