package lease_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
)

// ledger logs, in order, every unit a store shared by several processes granted (a check
// allowed) or got back (a refund), and which process it was.
type ledger struct {
	mu      sync.Mutex
	entries []grant
}

type grant struct {
	who   int
	units int64 // taken; below 0, given back
	at    int64 // the instant the store decided at
}

func (g *ledger) add(e grant) {
	g.mu.Lock()
	g.entries = append(g.entries, e)
	g.mu.Unlock()
}

func (g *ledger) snapshot() []grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]grant(nil), g.entries...)
}

// logged is one process's view of the shared store: it writes what the store grants it to the
// ledger.
type logged struct {
	sluice.Store
	who int
	g   *ledger
}

func (s *logged) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	d, err := s.Store.Check(ctx, now, p, key, cost)
	if err == nil && d.Allowed {
		s.g.add(grant{who: s.who, units: cost, at: now})
	}
	return d, err
}

func (s *logged) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	err := s.Store.Refund(ctx, now, p, key, cost)
	if err == nil {
		s.g.add(grant{who: s.who, units: -cost, at: now})
	}
	return err
}

// takes are the indexes of the entries where process who took units from the store, from the last
// one before entry from on; -1 first if there is none.
func takes(entries []grant, who, from int) []int {
	last := -1
	for i, e := range entries[:from] {
		if e.who == who && e.units > 0 {
			last = i
		}
	}
	out := []int{last}
	for i := from; i < len(entries); i++ {
		if entries[i].who == who && entries[i].units > 0 {
			out = append(out, i)
		}
	}
	return out
}

// since is what the ledger says happened after entry take, a take of process who (-1: none): what
// the other processes took, what anyone gave back, and the instant of that take.
func since(entries []grant, who, take int) (others, returned, at int64) {
	if take >= 0 {
		at = entries[take].at
	}
	for _, e := range entries[take+1:] {
		switch {
		case e.units < 0:
			returned -= e.units
		case e.who != who:
			others += e.units
		}
	}
	return others, returned, at
}

// TestRemainingCountsTheStore checks the documented bound of a leased decision's Remaining (package
// doc, Decisions): it is what the store had left when the process last took a lease, plus the units
// its leases hold. Against what the process can still admit (the store's remaining now plus its
// own unspent units), that overstates by at most what the other processes took from the store
// since, and understates by at most what the store refilled or got back since; with nothing
// refilled or returned, it is exactly that plus what the others took.
func TestRemainingCountsTheStore(t *testing.T) {
	const limit = 1_000_000
	tests := []struct {
		name      string
		strategy  sluice.Strategy
		processes int
		ahead     float64
		stepMs    int64   // the clock moves this much after each round
		perMs     float64 // units the strategy refills per ms
	}{
		{"tokenBucket, one process", sluice.TokenBucket{Capacity: limit, RefillPerSec: 1e-6}, 1, 0, 0, 0},
		{"tokenBucket, two processes", sluice.TokenBucket{Capacity: limit, RefillPerSec: 1e-6}, 2, 0, 0, 0},
		{"tokenBucket, two processes, leases ahead", sluice.TokenBucket{Capacity: limit, RefillPerSec: 1e-6}, 2, 0.25, 0, 0},
		{"gcra, three processes", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: limit}, 3, 0, 0, 0},
		{"fixedWindow, two processes, leases ahead", sluice.FixedWindow{Limit: limit, WindowMs: 3_600_000}, 2, 0.25, 0, 0},
		{"slidingWindowLog, two processes", sluice.SlidingWindowLog{Limit: limit, WindowMs: 3_600_000}, 2, 0, 0, 0},
		{"refilling tokenBucket, two processes", sluice.TokenBucket{Capacity: limit, RefillPerSec: 1000}, 2, 0, 1, 1},
		{"refilling gcra, two processes, leases ahead", sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: limit}, 2, 0.25, 1, 1},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				clock := newClock(t0)
				store := b.open(t, clock)
				p := sluice.MustPolicy("p", sluice.Limit{Strategy: tt.strategy})
				g := &ledger{}
				ls := make([]*lease.Leaser, tt.processes)
				for i := range ls {
					ls[i], _ = newLeaser(t, &logged{Store: store, who: i, g: g}, clock, lease.Config{MaxLease: 64, Ahead: tt.ahead}, p)
				}
				peeker, err := sluice.New(store, p)
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, uint64(tt.processes)))
				shared := 0 // decisions after another process took units
				for round := range 150 {
					who := r.IntN(tt.processes)
					for range 1 + r.IntN(30) {
						ctx := clock.ctx()
						cost := 1 + r.Int64N(3)
						from := len(g.snapshot())
						d := mustCheck(t, ls[who], ctx, "p", "k", cost)
						if !d.Allowed {
							t.Fatalf("round %d: process %d denied: %+v", round, who, d)
						}
						// A lease asked for ahead moves units from the store to the process: their
						// sum, which the bound is about, stays.
						lease.Settle(ls[who])
						can := mustPeek(t, peeker, ctx, "p", "k").Remaining + lease.Held(ls[who], "p", "k")
						// The process's last lease is the last it took before this check, or one it
						// took during it: in the check, or ahead, on the background goroutine, which
						// may have taken it before or after the check read its beside.
						entries := g.snapshot()
						var fits, exactly bool
						var why []string
						for _, take := range takes(entries, who, from) {
							others, returned, at := since(entries, who, take)
							refilled := int64(math.Ceil(tt.perMs * float64(clock.now()-at)))
							fits = fits || d.Remaining <= can+others && d.Remaining >= can-refilled-returned
							exactly = exactly || d.Remaining == can+others-returned
							why = append(why, fmt.Sprintf("since entry %d: others took %d, %d came back, up to %d refilled", take, others, returned, refilled))
							if others > 0 {
								shared++
							}
						}
						if !fits || tt.perMs == 0 && !exactly {
							t.Fatalf("round %d: process %d reports remaining %d; it can admit %d (the store's and its own); %s",
								round, who, d.Remaining, can, strings.Join(why, "; "))
						}
					}
					clock.add(tt.stepMs)
				}
				if tt.processes > 1 && shared == 0 {
					t.Errorf("no decision came after another process took units: the test proves nothing")
				}
			})
		}
	}
}

// TestLocalCheckAllocatesNothing: the Remaining a local check reports is computed from the lease,
// without an allocation.
func TestLocalCheckAllocatesNothing(t *testing.T) {
	clock := newClock(t0)
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1e9, RefillPerSec: 1}})
	l, _ := newLeaser(t, newMemory(t, clock.now), clock, lease.Config{MaxLease: 100_000}, p)
	ctx := clock.ctx()
	// The key's leases grow with its rate, until one holds enough for the checks measured.
	var warm int64
	for ; lease.Held(l, "p", "k") < 2000; warm++ {
		if warm == 10_000 {
			t.Fatalf("after %d checks, a lease of %d units", warm, lease.Held(l, "p", "k"))
		}
		mustCheck(t, l, ctx, "p", "k", 1)
	}
	before := lease.Held(l, "p", "k")
	n := warm
	allocs := testing.AllocsPerRun(1000, func() {
		n++
		if d, err := l.Check(ctx, "p", "k", 1); err != nil || !d.Allowed || d.Remaining != 1e9-n {
			panic(fmt.Sprintf("check %d: %+v, %v; want remaining %d", n, d, err, int64(1e9)-n))
		}
	})
	if lease.Held(l, "p", "k") != before-1001 {
		t.Fatalf("the checks were not all local: %d units held, from %d", lease.Held(l, "p", "k"), before)
	}
	if allocs != 0 {
		t.Errorf("a local check allocates %v times", allocs)
	}
}
