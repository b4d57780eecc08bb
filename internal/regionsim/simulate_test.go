package regionsim_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/regionsim"
	"github.com/sluicehq/sluice/region"
)

func TestSimulate(t *testing.T) {
	regions := []string{"mumbai", "frankfurt", "virginia"}
	demand := map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100}
	sim, err := regionsim.Simulate(regionsim.Config{Limit: 900, Regions: regions, Demand: demand, Floor: region.DefaultFloor})
	if err != nil {
		t.Fatal(err)
	}
	if len(sim.Minutes) != regionsim.HourMinutes || sim.Floor != region.DefaultFloor || sim.Every != 1 {
		t.Fatalf("%d minutes, floor %v, every %d: want %d, %v, 1", len(sim.Minutes), sim.Floor, sim.Every, regionsim.HourMinutes, region.DefaultFloor)
	}
	first, last := sim.Minutes[0], sim.Minutes[regionsim.HourMinutes-1]
	if !maps.Equal(first.Demand, demand) {
		t.Errorf("minute 0 demand %v, want %v", first.Demand, demand)
	}
	if want := map[string]int64{"mumbai": 100, "frankfurt": 600, "virginia": 200}; !maps.Equal(last.Demand, want) {
		t.Errorf("minute 59 demand %v, want each region at its predecessor's start %v", last.Demand, want)
	}
	if !maps.Equal(first.Rebalanced, first.Even) {
		t.Errorf("minute 0 rebalanced %v, want the even split %v before any demand is seen", first.Rebalanced, first.Even)
	}
	for i, m := range sim.Minutes {
		if m.ServedEven != region.Served(m.Even, m.Demand) || m.ServedRebalanced != region.Served(m.Rebalanced, m.Demand) {
			t.Fatalf("minute %d: served %d/%d disagrees with the shares", i, m.ServedEven, m.ServedRebalanced)
		}
		if i > 0 {
			want, _ := region.Rebalance(900, sim.Minutes[i-1].Demand, region.DefaultFloor)
			if !maps.Equal(m.Rebalanced, want) {
				t.Fatalf("minute %d: shares %v, want those from the minute before's demand %v", i, m.Rebalanced, want)
			}
		}
		if i > 0 && m.ServedRebalanced < m.ServedEven {
			t.Errorf("minute %d: rebalanced served %d, less than even %d", i, m.ServedRebalanced, m.ServedEven)
		}
	}
	tot := sim.Totals()
	// Steady minutes serve everything; each shifting minute loses only the growth since the minute before.
	if tot.Rebalanced*100 < tot.Servable*97 || tot.Even*100 > tot.Servable*75 {
		t.Errorf("hour: %+v; want rebalanced >= 97%% and even <= 75%% of servable", tot)
	}
	// The regions' hours add up to the fleet's.
	var sum regionsim.Totals
	for i, rt := range sim.RegionTotals() {
		if rt.Region != regions[i] || rt.ServedEven > rt.EvenShare || rt.ServedRebalanced > rt.RebalancedShare {
			t.Errorf("region %d: %+v", i, rt)
		}
		sum.Demand += rt.Demand
		sum.Even += rt.ServedEven
		sum.Rebalanced += rt.ServedRebalanced
	}
	if sum.Demand != tot.Demand || sum.Even != tot.Even || sum.Rebalanced != tot.Rebalanced {
		t.Errorf("the regions sum to %+v, the fleet's hour is %+v", sum, tot)
	}
	t.Logf("hour: %+v (even %.1f%%, rebalanced %.1f%%)", tot, 100*float64(tot.Even)/float64(tot.Servable), 100*float64(tot.Rebalanced)/float64(tot.Servable))

	// Rebalancing every 5 minutes holds shares for 5 minutes, from the average of the 5 before.
	sim5, err := regionsim.Simulate(regionsim.Config{Limit: 900, Regions: regions, Demand: demand, Every: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < regionsim.HourMinutes; i++ {
		changed := !maps.Equal(sim5.Minutes[i].Rebalanced, sim5.Minutes[i-1].Rebalanced)
		if changed && i%5 != 0 {
			t.Fatalf("every 5: shares changed at minute %d", i)
		}
	}
	if t5 := sim5.Totals(); t5.Rebalanced >= tot.Rebalanced {
		t.Errorf("rebalancing every 5 minutes served %d, want less than every minute's %d", t5.Rebalanced, tot.Rebalanced)
	}
}

func TestSimulateInvalid(t *testing.T) {
	regions := []string{"a", "b"}
	tests := []struct {
		name  string
		cfg   regionsim.Config
		field string
	}{
		{"zero limit", regionsim.Config{Regions: regions}, "limit"},
		{"limit above 2^53", regionsim.Config{Limit: 1<<53 + 1, Regions: regions}, "limit"},
		{"no regions", regionsim.Config{Limit: 10}, "regions"},
		{"floor of 1", regionsim.Config{Limit: 10, Regions: regions, Floor: 1}, "floor"},
		{"negative floor", regionsim.Config{Limit: 10, Regions: regions, Floor: -1}, "floor"},
		{"negative demand", regionsim.Config{Limit: 10, Regions: regions, Demand: map[string]int64{"b": -1}}, "demand[b]"},
		{"demand of an unlisted region", regionsim.Config{Limit: 10, Regions: regions, Demand: map[string]int64{"c": 1}}, "demand[c]"},
		{"total demand above 2^53", regionsim.Config{Limit: 10, Regions: regions, Demand: map[string]int64{"a": 1 << 53, "b": 1}}, "demand"},
		{"more regions than the plot holds", regionsim.Config{Limit: 10, Regions: manyRegions(regionsim.MaxRegions + 1)}, "regions"},
		{"every above an hour", regionsim.Config{Limit: 10, Regions: regions, Every: 61}, "every"},
		{"negative every", regionsim.Config{Limit: 10, Regions: regions, Every: -1}, "every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := regionsim.Simulate(tt.cfg)
			wantInvalid(t, err, tt.field)
		})
	}
	// The caller's slice is not kept.
	rs := []string{"a", "b"}
	sim, err := regionsim.Simulate(regionsim.Config{Limit: 10, Regions: rs})
	if err != nil {
		t.Fatal(err)
	}
	rs[0] = "z"
	if !slices.Equal(sim.Regions, []string{"a", "b"}) || sim.Floor != 0 {
		t.Fatalf("regions %q, floor %v", sim.Regions, sim.Floor)
	}
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var inv *sluice.InvalidError
	if !errors.As(err, &inv) || inv.Field != field {
		t.Fatalf("err = %v, want an InvalidError naming %q", err, field)
	}
}

func manyRegions(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d", i)
	}
	return out
}
