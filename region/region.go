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
// Even, Rebalance and Served are the arithmetic, with no clock and no I/O (sluice simulate
// regions replays them over an hour of shifting demand). Coordinator runs the rebalance across real processes through PostgreSQL, and Policy
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

// DefaultFloor is the floor sluice simulate regions uses unless told otherwise. A zero floor
// (the zero Config) reserves nothing.
const DefaultFloor = 0.1

// checkFloor refuses a floor outside [0, 1), NaN included.
func checkFloor(floor float64) error {
	if !(floor >= 0 && floor < 1) {
		return invalid("floor", "must be at least 0 and below 1, got %v", floor)
	}
	return nil
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
// it was asked for in one interval: admitted and refused requests alike) and the floor, a
// fraction of the limit held evenly for quiet regions. Every quantity is an integer:
//
//  1. Demand first. If the total demand fits in the limit, every region gets its demand. If
//     not, the limit is divided in proportion to demand (largest remainders first, ties in name
//     order), so no region gets more than it asked for while another is short.
//  2. The floor, from the slack only. The base is floor*limit/n rounded down (n regions). The
//     slack, the limit less the total demand, raises each region below the base up to it; if
//     the slack is too small for all, it is divided in proportion to how far each is below.
//  3. Whatever is still left is spread evenly (the remainder to the first regions in name
//     order): headroom for demand that grows before the next rebalance.
//
// The shares sum to exactly limit and serve min(total demand, limit): when demand fits, every
// region gets at least its demand, and otherwise no unit is given where it goes unused. Every
// region gets at least the base when the slack covers what the quiet ones lack of it. (Splitting
// the base and then the rest in proportion to raw demand, the textbook rule, gives 570/210/120
// for demand 600/200/100 at limit 900 and serves 870; this rule gives 600/200/100 and serves 900.)
//
// The floor is what a quiet region keeps when others leave room. A region whose demand was 0
// would otherwise get only its even part of the leftover, and the base guarantees it capacity
// to serve its first requests, and so show its new demand, while the shares catch up. It never
// takes from a region's demand: when the others ask for the whole limit, a quiet region can get
// nothing until a rebalance sees the demand it was refused.
//
// limit must be at least 1, floor in [0, 1), demand non-empty with non-empty names and values of
// at least 0 whose total fits in an int64; otherwise the error is a *sluice.InvalidError naming
// "limit", "floor", "demand" or "demand[<region>]".
func Rebalance(limit int64, demand map[string]int64, floor float64) (map[string]int64, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	if err := checkFloor(floor); err != nil {
		return nil, err
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

	// 1. Demand, in full or in proportion; in proportion there is no slack for steps 2 and 3.
	if total > limit {
		return apportion(limit, regions, demand), nil
	}
	shares := maps.Clone(demand)
	slack := limit - total

	// 2. The floor. float64(limit) may round up past the limit; the product is clamped below it.
	var reserve int64
	if f := float64(limit) * floor; f >= float64(limit) {
		reserve = limit
	} else {
		reserve = int64(f)
	}
	base := reserve / n
	lack := make(map[string]int64, n)
	var lacking int64 // at most n*base <= limit: no overflow
	for _, r := range regions {
		lack[r] = max(0, base-demand[r])
		lacking += lack[r]
	}
	if lacking <= slack {
		for _, r := range regions {
			shares[r] += lack[r]
		}
		slack -= lacking
	} else {
		for r, s := range apportion(slack, regions, lack) {
			shares[r] += s
		}
		slack = 0
	}

	// 3. The leftover, evenly.
	if slack > 0 {
		for r, extra := range evenSplit(slack, regions) {
			shares[r] += extra
		}
	}
	return shares, nil
}

// apportion divides amount across regions (sorted) in proportion to weight, whose total over
// regions exceeds amount, by largest remainders with ties in name order. No region gets more
// than its weight: one with a remainder got less than its exact part, itself below its weight,
// so its extra unit never takes it past it.
func apportion(amount int64, regions []string, weight map[string]int64) map[string]int64 {
	var total uint64
	for _, r := range regions {
		total += uint64(weight[r])
	}
	type part struct {
		region string
		rem    uint64 // the fractional part of the exact share, times total
	}
	out := make(map[string]int64, len(regions))
	parts := make([]part, 0, len(regions))
	left := amount
	for _, r := range regions {
		// amount*weight/total, exactly: weight <= total, so the quotient is at most amount.
		hi, lo := bits.Mul64(uint64(amount), uint64(weight[r]))
		q, rem := bits.Div64(hi, lo, total)
		out[r] = int64(q)
		left -= int64(q)
		parts = append(parts, part{r, rem})
	}
	// Fewer than len(regions) units are left: each quotient lost less than one.
	slices.SortStableFunc(parts, func(a, b part) int { return cmp.Compare(b.rem, a.rem) })
	for i := int64(0); i < left; i++ {
		out[parts[i].region]++
	}
	return out
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
