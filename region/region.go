// Package region splits one global limit across regions that each enforce their part locally.
//
// A global limit (900 requests a minute for one partner, wherever the partner calls from) cannot
// be checked in one place without a cross-region round trip per request. Instead each region
// gets a share of the limit and enforces it on its own store, as an ordinary sluice policy; the
// shares always sum to at most the limit, so the regions together never admit more than it. The
// cost is that a region can refuse a request while another region has capacity to spare, which
// is why the shares follow demand: every interval, each region reports the demand it observed and
// one rebalance hands the limit out again.
//
// Even, Rebalance and Served are the arithmetic, with no clock and no I/O. Simulate replays an
// hour of shifting demand against the even and the rebalanced split, and Simulation.WritePNG
// draws it. Coordinator runs the rebalance across real processes through PostgreSQL, and Policy
// is how a region enforces its share. docs/regions.md has the model and its bounds.
package region

import (
	"cmp"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/sluicehq/sluice"
)

// DefaultFloor is the fraction of the limit Rebalance reserves evenly when nothing else is said.
const DefaultFloor = 0.1

// floorOf is the floor a config's Floor field asks for: 0 means DefaultFloor, negative none.
func floorOf(f float64) float64 {
	switch {
	case f == 0:
		return DefaultFloor
	case f < 0:
		return 0
	}
	return f
}

// Even splits limit evenly across regions: limit/len(regions) each, and the remainder one unit
// apiece to the first regions in sorted order, so the shares sum to exactly limit and every
// process computes the same split from the same list. It is where a fleet starts before anyone
// has observed demand, and the baseline a rebalance must beat.
//
// limit must be at least 1, and regions non-empty, with distinct, non-empty names; otherwise the
// error is a *sluice.InvalidError naming "limit" or "regions".
func Even(limit int64, regions []string) (map[string]int64, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	if len(regions) == 0 {
		return nil, invalid("regions", "at least one region is needed")
	}
	seen := make(map[string]bool, len(regions))
	for i, r := range regions {
		if r == "" {
			return nil, invalid(fmt.Sprintf("regions[%d]", i), "a region name must not be empty")
		}
		if seen[r] {
			return nil, invalid(fmt.Sprintf("regions[%d]", i), "region %q is listed twice", r)
		}
		seen[r] = true
	}
	return evenSplit(limit, slices.Sorted(slices.Values(regions))), nil
}

// evenSplit splits total across sorted, which is sorted and non-empty; the remainder goes one
// unit apiece to its first entries.
func evenSplit(total int64, sorted []string) map[string]int64 {
	n := int64(len(sorted))
	out := make(map[string]int64, n)
	for i, r := range sorted {
		out[r] = total / n
		if int64(i) < total%n {
			out[r]++
		}
	}
	return out
}

// Served is how much of demand the shares admit: the sum over the regions in demand of the
// smaller of the region's share and its demand (a region missing from shares has none). It is
// the measure a split is judged by: what a region cannot use is lost, since an idle region's
// spare share cannot serve a request that arrived elsewhere. Negative values count as 0.
func Served(shares, demand map[string]int64) int64 {
	var total int64
	for r, d := range demand {
		total += max(0, min(shares[r], d))
	}
	return total
}

// Rebalance splits limit across the regions in demand, given each region's recent demand (what
// it was asked for in one interval: admitted and refused requests alike) and the floor, the
// fraction of the limit reserved evenly. The rule, in three steps, every quantity an integer:
//
//  1. Every region gets the base, floor*limit/n rounded down (n regions), whatever its demand.
//  2. The rest of the limit meets demand above the base. If it covers all of it, each region
//     gets exactly its demand; if not, it is divided in proportion to each region's demand
//     above the base (largest remainders first, ties in name order), so no region is given more
//     than it asked for while another is short.
//  3. Whatever is still left is spread evenly (the remainder to the first regions in name
//     order): headroom for demand that grows before the next rebalance.
//
// The shares sum to exactly limit. When total demand fits in the limit every region gets at
// least its demand, and otherwise the limit is used to the last unit except what the base holds
// for regions asking for less than it: no split that gives every region the base serves more.
// (Splitting the whole limit in proportion to raw demand, the textbook rule, gives 570/210/120
// for demand 600/200/100 at limit 900 and serves 870; this rule gives 600/200/100 and serves
// 900, because it never hands a region more than its demand while another region is short.)
//
// The floor is what a quiet region keeps. A region whose demand was 0 in the last interval would
// otherwise get nothing whenever the others use the whole limit, and would refuse every request
// that arrives there until the next rebalance noticed it; where demand is measured as admitted
// requests, it would never be noticed at all. The base is the capacity with which a region sees
// new demand and serves its first requests while the shares catch up. It costs what the quiet
// regions leave of it unused: with the default 0.1, at most a tenth of the limit.
//
// limit must be at least 1, floor in [0, 1), demand non-empty with non-empty names and values of
// at least 0 whose total fits in an int64; otherwise the error is a *sluice.InvalidError naming
// "limit", "floor", "demand" or "demand[<region>]".
func Rebalance(limit int64, demand map[string]int64, floor float64) (map[string]int64, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	if !(floor >= 0 && floor < 1) {
		return nil, invalid("floor", "must be at least 0 and below 1, got %v", floor)
	}
	if len(demand) == 0 {
		return nil, invalid("demand", "at least one region is needed")
	}
	regions := make([]string, 0, len(demand))
	var total int64
	for _, r := range slices.Sorted(maps.Keys(demand)) {
		d := demand[r]
		if r == "" {
			return nil, invalid("demand", "a region name must not be empty")
		}
		if d < 0 {
			return nil, invalid("demand["+r+"]", "must be at least 0, got %d", d)
		}
		sum, carry := bits.Add64(uint64(total), uint64(d), 0)
		if carry != 0 || sum > 1<<63-1 {
			return nil, invalid("demand", "the total must fit in an int64")
		}
		total = int64(sum)
		regions = append(regions, r)
	}
	n := int64(len(regions))

	// 1. The base. float64(limit) may round up past the limit; the product is clamped below it.
	var reserve int64
	if f := float64(limit) * floor; f >= float64(limit) {
		reserve = limit
	} else {
		reserve = int64(f)
	}
	base := reserve / n
	shares := make(map[string]int64, n)
	rest := limit
	for _, r := range regions {
		shares[r] = base
		rest -= base
	}

	// 2. Demand above the base, in full or in proportion.
	var wanted int64
	for _, r := range regions {
		wanted += max(0, demand[r]-base)
	}
	if wanted <= rest {
		for _, r := range regions {
			shares[r] += max(0, demand[r]-base)
		}
		rest -= wanted
	} else {
		type part struct {
			region string
			rem    uint64 // the fractional part of the exact share, times wanted
		}
		parts := make([]part, 0, n)
		for _, r := range regions {
			need := max(0, demand[r]-base)
			// rest*need/wanted, exactly: need <= wanted, so the quotient is at most rest.
			hi, lo := bits.Mul64(uint64(rest), uint64(need))
			q, rem := bits.Div64(hi, lo, uint64(wanted))
			shares[r] += int64(q)
			parts = append(parts, part{r, rem})
		}
		var given int64
		for _, r := range regions {
			given += shares[r] - base
		}
		left := rest - given // fewer than n: each floor lost less than one
		// Largest remainder first. A region with a remainder got less than its exact share,
		// itself at most its need, so one more unit never takes it past its demand.
		slices.SortStableFunc(parts, func(a, b part) int { return cmp.Compare(b.rem, a.rem) })
		for i := int64(0); i < left; i++ {
			shares[parts[i].region]++
		}
		rest = 0
	}

	// 3. The leftover, evenly.
	if rest > 0 {
		for r, extra := range evenSplit(rest, regions) {
			shares[r] += extra
		}
	}
	return shares, nil
}

func checkLimit(limit int64) error {
	if limit < 1 {
		return invalid("limit", "must be at least 1, got %d", limit)
	}
	return nil
}

func invalid(field, format string, args ...any) *sluice.InvalidError {
	return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
