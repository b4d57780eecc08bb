package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice"
)

// unspentCases are the strategies DeniedGroups runs, each with a ceiling of 8 (or 8 and a fraction).
var unspentCases = []struct {
	name string
	st   sluice.Strategy
	// slack is how far a part of a denied group may read from a Peek: GCRA rounds in float64, and
	// with an emission interval that is not a binary fraction of a ms, the remaining after a check
	// plus its cost can be one unit off the remaining before it (package internal/unspent).
	slack int64
}{
	{"gcra", sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 8}, 0},
	{"gcraHalfMs", sluice.GCRA{Limit: 4, PeriodMs: 2, Burst: 8}, 0},
	{"gcraThirds", sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 8}, 1},
	{"tokenBucket", sluice.TokenBucket{Capacity: 8, RefillPerSec: 2.5}, 0},
	{"tokenBucketFractional", sluice.TokenBucket{Capacity: 8.7, RefillPerSec: 1.3}, 0},
	{"fixedWindow", sluice.FixedWindow{Limit: 8, WindowMs: 700}, 0},
	{"fixedWindowFractional", sluice.FixedWindow{Limit: 8.5, WindowMs: 333.3}, 0},
	{"slidingWindow", sluice.SlidingWindow{Limit: 8, WindowMs: 1000, Buckets: 4}, 0},
	{"slidingWindowFractional", sluice.SlidingWindow{Limit: 8.2, WindowMs: 900.5, Buckets: 7}, 0},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 8, WindowMs: 800}, 0},
}

// never is a limit that a first check spends and that then denies every check for the rest of
// the test: its window of 10⁹ ms holds all of SameAsMemory's instants.
var never = sluice.Limit{Name: "gate", Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1e9}, Unit: sluice.UnitRequest}

// DeniedGroups checks that a denied group, a composite check or a CheckAll, reports each of its
// parts as it stands: nothing was consumed, so a part that would have allowed reports the
// remaining it has (not less its cost), what a Peek at the same instant reports, as a denying part
// does. Every strategy, counting cost and counting requests, from random states at fixed instants;
// a composite allowed inside a denied CheckAll, whose own decision is then the Combine of its
// corrected parts; and a CheckAll holding one key twice, whose second item reports what is left
// after the first.
func DeniedGroups(t *testing.T, s sluice.Store) {
	t.Helper()
	ctx := context.Background()
	for ci, c := range unspentCases {
		for _, unit := range []sluice.Unit{sluice.UnitCost, sluice.UnitRequest} {
			t.Run(c.name+"/"+unit.String(), func(t *testing.T) {
				tested := sluice.Limit{Name: "tested", Strategy: c.st, Unit: unit}
				name := "unspent-" + c.name + "-" + unit.String()
				// comp is denied by its gate once a first check has passed; pair and one are
				// denied only by their own tested limit, within a CheckAll denied by no.
				comp := sluice.MustPolicy(name+"-comp", tested, never)
				// pair's second limit counts requests, so that giving the tested limit its cost
				// back can change which part binds.
				pair := sluice.MustPolicy(name+"-pair", tested, sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 6, RefillPerSec: 1}, Unit: sluice.UnitRequest})
				one := sluice.MustPolicy(name+"-one", tested)
				no := sluice.MustPolicy(name+"-no", never)
				now := t0
				mustCheck(t, s, now, no, "x", 1, true)
				r := rand.New(rand.NewPCG(uint64(ci), uint64(unit)))
				cost := func() int64 { return 1 + r.Int64N(8) }
				for round := range 12 {
					key := fmt.Sprint("k", round)
					// A random state: the gate lets one check pass, the tested limit perhaps.
					now += r.Int64N(300)
					for range 1 + r.IntN(3) {
						now += r.Int64N(200)
						for _, p := range []*sluice.Policy{one, pair, comp} {
							if _, err := s.Check(ctx, now, p, key, cost()); err != nil {
								t.Fatal(err)
							}
						}
					}
					for range 3 {
						now += r.Int64N(250)
						cc := cost()
						d, err := s.Check(ctx, now, comp, key, cc)
						if err != nil || d.Allowed || len(d.Parts) != 2 {
							t.Fatalf("round %d: Check(comp, cost %d) at %+d: %+v, %v; want a denial with 2 parts", round, cc, now-t0, d, err)
						}
						assertAsPeek(t, s, now, comp, key, d, c.slack, fmt.Sprintf("round %d: Check(comp, cost %d)", round, cc))

						ops := []Op{{Policy: one, Key: key, Cost: cost()}, {Policy: pair, Key: key, Cost: cost()}, {Policy: no, Key: "x", Cost: 1}}
						out := make([]sluice.Decision, len(ops))
						if err := CheckAll(ctx, s, now, ops, out); err != nil {
							t.Fatal(err)
						}
						if out[2].Allowed {
							t.Fatalf("round %d: CheckAll's last item was allowed: %+v", round, out[2])
						}
						what := fmt.Sprintf("round %d: CheckAll(one cost %d, pair cost %d, no)", round, ops[0].Cost, ops[1].Cost)
						assertAsPeek(t, s, now, one, key, out[0], c.slack, what+": one")
						assertAsPeek(t, s, now, pair, key, out[1], c.slack, what+": pair")
					}
				}
				if c.slack > 0 {
					return
				}
				// One key twice in a denied CheckAll: the first item reports what the key has,
				// the second what is left after the first, which was not spent either.
				key := "twice"
				mustCheck(t, s, now, one, key, 3, true)
				before := mustPeek(t, s, now, one, key).Remaining
				ops := []Op{{Policy: one, Key: key, Cost: 2}, {Policy: one, Key: key, Cost: 1}, {Policy: no, Key: "x", Cost: 1}}
				out := make([]sluice.Decision, len(ops))
				if err := CheckAll(ctx, s, now, ops, out); err != nil {
					t.Fatal(err)
				}
				first := one.Cost(0, 2)
				if !out[0].Allowed || !out[1].Allowed || out[0].Remaining != before || out[1].Remaining != before-first {
					t.Errorf("CheckAll(the key twice, then a denial): %+v; want both allowed, remaining %d and %d", out[:2], before, before-first)
				}
				if got := mustPeek(t, s, now, one, key).Remaining; got != before {
					t.Errorf("after the denied CheckAll, Peek reports %d, want %d: nothing spent", got, before)
				}
			})
		}
	}
}

// assertAsPeek fails unless d, the decision of p for key in a denied group at now, reports every
// part's remaining within slack of a Peek, and is the Combine of its parts.
func assertAsPeek(t *testing.T, s sluice.Store, now int64, p *sluice.Policy, key string, d sluice.Decision, slack int64, what string) {
	t.Helper()
	peek := mustPeek(t, s, now, p, key)
	got, want := []sluice.Decision{d}, []sluice.Decision{peek}
	if len(p.Limits()) > 1 {
		got, want = d.Parts, peek.Parts
		if c := sluice.Combine(d.Parts); c.Allowed != d.Allowed || c.Remaining != d.Remaining || c.DeniedBy != d.DeniedBy {
			t.Errorf("%s at %+d: %+v is not the Combine of its parts (%+v)", what, now-t0, d, c)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s at %+d: parts %+v, Peek's %+v", what, now-t0, got, want)
	}
	for i := range got {
		if diff := got[i].Remaining - want[i].Remaining; diff < -slack || diff > slack {
			t.Errorf("%s at %+d: part %d (allowed %v) reports remaining %d, Peek %d", what, now-t0, i, got[i].Allowed, got[i].Remaining, want[i].Remaining)
		}
	}
}

func mustCheck(t *testing.T, s sluice.Store, now int64, p *sluice.Policy, key string, cost int64, allowed bool) sluice.Decision {
	t.Helper()
	d, err := s.Check(context.Background(), now, p, key, cost)
	if err != nil || d.Allowed != allowed {
		t.Fatalf("Check(%s, %s, %d) at %+d: %+v, %v; want allowed %v", p.Name(), key, cost, now-t0, d, err, allowed)
	}
	return d
}

func mustPeek(t *testing.T, s sluice.Store, now int64, p *sluice.Policy, key string) sluice.Decision {
	t.Helper()
	d, err := s.Peek(context.Background(), now, p, key)
	if err != nil {
		t.Fatalf("Peek(%s, %s) at %+d: %v", p.Name(), key, now-t0, err)
	}
	return d
}
