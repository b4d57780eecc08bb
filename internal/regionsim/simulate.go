// Package regionsim replays an hour of shifting demand against package region's even and
// rebalanced splits, for sluice simulate regions and the console's regions page, and draws it as
// an SVG a browser opens. It is the module's, not the library's: region holds the arithmetic and
// the coordinator.
package regionsim

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/region"
)

// HourMinutes is how long Simulate runs: an hour, a minute at a time.
const HourMinutes = 60

// MaxRegions bounds the regions of a simulation: more than this do not fit the plot's legend.
const MaxRegions = 64

// maxRegionName bounds a region's name, in bytes.
const maxRegionName = 64

// CheckRegionName refuses a region name that is empty, longer than 64 bytes, or holds anything
// but ASCII letters, digits and "._-": names go into the plot and the console's pages.
func CheckRegionName(name string) error {
	if name == "" || len(name) > maxRegionName {
		return fmt.Errorf("a region name must be 1 to %d bytes, got %.80q", maxRegionName, name)
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("region name %.80q may hold only letters, digits and ._-", name)
		}
	}
	return nil
}

// maxSimulated bounds the limit and the total demand Simulate accepts, so that an hour of
// totals, and the plot's float64 coordinates, stay exact.
const maxSimulated = 1 << 53

// Config is what Simulate replays.
type Config struct {
	// Limit is the global limit, per minute.
	Limit int64
	// Regions lists the regions; the order is the order in which demand moves (see Simulate).
	Regions []string
	// Demand is each region's demand per minute at the start of the hour. A region missing has 0.
	Demand map[string]int64
	// Floor is Rebalance's floor, from 0 to below 1. 0 reserves nothing.
	Floor float64
	// Every is how many minutes apart rebalances run. 0 means every minute.
	Every int
}

// Simulation is an hour of demand served by an even split and by rebalanced shares.
type Simulation struct {
	Limit   int64
	Floor   float64 // Rebalance's floor
	Every   int     // minutes between rebalances, after Config's defaults
	Regions []string
	Minutes []Minute // HourMinutes of them, minute 0 first
}

// Minute is one minute of a Simulation.
type Minute struct {
	Demand     map[string]int64
	Even       map[string]int64 // the even split's shares: the same every minute
	Rebalanced map[string]int64 // the shares in force this minute
	// ServedEven and ServedRebalanced are what each split admitted, over all regions.
	ServedEven, ServedRebalanced int64
}

// Totals sums a Simulation's hour: the demand, the most any split could serve (each minute's
// demand capped at the limit), and what each split served.
type Totals struct {
	Demand, Servable, Even, Rebalanced int64
}

// Simulate replays an hour of shifting demand, a minute at a time, against the even split and
// against shares rebalanced every Every minutes from the demand observed over the Every minutes
// before (the per-minute average, rounded down). The rebalanced shares start even, as a fleet
// does before anyone has reported demand.
//
// The demand follows the sun: each region keeps its starting demand for the first quarter hour,
// hands it over, in a straight line across the middle half hour, to the next region in Regions
// (the last region's to the first), and the hour ends with every region at its predecessor's
// starting demand. The total barely moves, only where it sits, which is exactly what an even
// split cannot follow and a rebalance follows one interval late.
//
// The limit must be from 1 to 2^53, the regions at most MaxRegions and the total demand at most
// 2^53; the other rules are
// Even's and Rebalance's, and errors are *sluice.InvalidError as theirs.
func Simulate(cfg Config) (*Simulation, error) {
	floor := cfg.Floor
	every := cfg.Every
	if every == 0 {
		every = 1
	}
	if every < 0 || every > HourMinutes {
		return nil, invalid("every", "must be from 1 to %d minutes, got %d", HourMinutes, every)
	}
	if cfg.Limit > maxSimulated {
		return nil, invalid("limit", "must be at most 2^53, got %d", cfg.Limit)
	}
	if len(cfg.Regions) > MaxRegions {
		return nil, invalid("regions", "at most %d regions, got %d", MaxRegions, len(cfg.Regions))
	}
	even, err := region.Even(cfg.Limit, cfg.Regions)
	if err != nil {
		return nil, err
	}
	start := make([]int64, len(cfg.Regions))
	var total int64
	for i, r := range cfg.Regions {
		start[i] = cfg.Demand[r]
		if start[i] < 0 {
			return nil, invalid("demand["+r+"]", "must be at least 0, got %d", start[i])
		}
		if start[i] > maxSimulated-total {
			return nil, invalid("demand", "the total must be at most 2^53")
		}
		total += start[i]
	}
	for r := range cfg.Demand {
		if !slices.Contains(cfg.Regions, r) {
			return nil, invalid("demand["+r+"]", "names a region not in regions")
		}
	}
	if !(floor >= 0 && floor < 1) {
		return nil, invalid("floor", "must be at least 0 and below 1, got %v", floor)
	}

	sim := &Simulation{Limit: cfg.Limit, Floor: floor, Every: every, Regions: slices.Clone(cfg.Regions)}
	shares := even
	for m := range HourMinutes {
		if m > 0 && m%every == 0 {
			observed := make(map[string]int64, len(cfg.Regions))
			for _, past := range sim.Minutes[m-every:] {
				for r, d := range past.Demand {
					observed[r] += d
				}
			}
			for r := range observed {
				observed[r] /= int64(every)
			}
			if shares, err = region.Rebalance(cfg.Limit, observed, floor); err != nil {
				return nil, fmt.Errorf("regionsim: minute %d: %w", m, err) // unreachable: inputs were checked
			}
		}
		demand := demandAt(cfg.Regions, start, m)
		sim.Minutes = append(sim.Minutes, Minute{
			Demand:           demand,
			Even:             even,
			Rebalanced:       shares,
			ServedEven:       region.Served(even, demand),
			ServedRebalanced: region.Served(shares, demand),
		})
	}
	return sim, nil
}

// The demand's schedule: steady until shiftFrom, moving until shiftTo, then steady again.
const (
	shiftFrom = 15
	shiftTo   = 45
)

// demandAt is each region's demand at minute m: regions[i] moves from start[i] to start[i-1].
func demandAt(regions []string, start []int64, m int) map[string]int64 {
	t := int64(min(max(m-shiftFrom, 0), shiftTo-shiftFrom))
	span := int64(shiftTo - shiftFrom)
	out := make(map[string]int64, len(regions))
	for i, r := range regions {
		from, to := start[i], start[(i+len(regions)-1)%len(regions)]
		out[r] = from + (to-from)*t/span // both at most 2^53: no overflow
	}
	return out
}

// Totals sums the hour.
func (s *Simulation) Totals() Totals {
	var t Totals
	for _, m := range s.Minutes {
		var d int64
		for _, v := range m.Demand {
			d += v
		}
		t.Demand += d
		t.Servable += min(d, s.Limit)
		t.Even += m.ServedEven
		t.Rebalanced += m.ServedRebalanced
	}
	return t
}

func invalid(field, format string, args ...any) *sluice.InvalidError {
	return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
