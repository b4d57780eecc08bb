package lease

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// slow validates, then spends from the key's leases or takes a new one under the key's lock.
func (l *Leaser) slow(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error) {
	t, in := l.resolve(policy)
	if in == nil || cost < 1 || cost > in.policy.MaxCost() || key == "" || len(key) > sluice.MaxKeyLen {
		// Bad input: the Limiter answers it with its typed error, before its store.
		return l.lim.Check(ctx, policy, key, cost)
	}
	if l.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if !in.leasable {
		l.storeChecks.Add(1)
		return l.lim.Check(ctx, policy, key, cost)
	}
	for {
		s := t.keys.load(key)
		if s == nil {
			s = t.keys.loadOrStore(t, strings.Clone(key))
		}
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			continue
		}
		d, err := l.take(ctx, in, s, cost, l.instant(ctx))
		s.mu.Unlock()
		return d, err
	}
}

// take serves a check that its key's lease could not: from the lease if another check renewed it
// meanwhile, from the lease taken ahead, or from a new lease. It runs under s.mu.
func (l *Leaser) take(ctx context.Context, in *info, s *slot, cost, now int64) (sluice.Decision, error) {
	if l.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	policy, key := s.t.name, s.key
	prev := s.cur.Load()
	if prev != nil && !prev.ended {
		if now >= prev.deadline {
			l.end(ctx, policy, key, prev)
		} else {
			for r := prev.units.Load(); r >= cost; r = prev.units.Load() {
				if prev.units.CompareAndSwap(r, r-cost) {
					if r-cost < prev.low {
						l.askAhead(s, prev)
					}
					return prev.decision(r - cost), nil
				}
			}
		}
	}
	next := s.next
	if next != nil && now >= next.deadline {
		s.next = nil
		l.giveBack(ctx, policy, key, next.info, next.start) // never published: all of it is left
		next = nil
	}

	// What the current lease has left, fewer units than cost, this check spends first.
	var carried int64
	if prev != nil && !prev.ended {
		carried = prev.units.Swap(0)
	}
	if next != nil {
		s.next = nil
		if carried+next.start >= cost {
			// The lease taken ahead covers the rest: it becomes the current one, no store call.
			s.pending += prev.used(carried) + cost
			prev.finish(carried)
			local := carried + next.start - cost
			next.start = local
			next.units.Store(local)
			s.cur.Store(next)
			return next.decision(local), nil
		}
	}
	// The store is asked for what the leases lack, and the next lease. If it grants that, this check
	// spends the units carried (from next too): they are not kept beyond it.
	fromNext := int64(0)
	if next != nil {
		fromNext = next.start
	}
	left := carried
	if prev != nil && prev.ended {
		left = prev.left
	}
	rate := s.estimate(prev, left, now, l.target)
	size := l.size(s, in, rate, now, cost)
	have := carried + fromNext
	ask, floor := max(size-have, cost-have), cost-have
	var d sluice.Decision
	var err error
	for first := true; ; first = false {
		d, err = l.storeCheck(ctx, policy, key, ask)
		if err != nil || d.Allowed || ask == floor {
			break
		}
		nextAsk := floor
		if first && d.Remaining >= floor && d.Remaining < ask {
			nextAsk = d.Remaining // what the denial says is left, if it covers the check
		}
		ask = nextAsk
	}
	if err != nil || !d.Allowed {
		if carried > 0 {
			prev.units.Add(carried)
		}
		s.next = next
		if err == nil {
			s.deniedUntil = now + max(d.RetryAfterMs, 1)
		}
		return d, err
	}
	l.leases.Add(1)
	prev.finish(carried)
	s.rate = rate
	s.seen, s.pending = true, cost
	s.last.Store(now)
	local := have + ask - cost
	if local == 0 {
		s.cur.Store(nil) // nothing to spend locally: no lease to keep
		if have == 0 {
			return d, nil // a check of its cost alone: the store's decision
		}
		return sluice.Decision{Allowed: true, Limit: d.Limit, Remaining: d.Remaining, ResetAt: d.ResetAt, DeniedBy: -1}, nil
	}
	ls := l.newLease(in, d, now, local, rate)
	s.cur.Store(ls)
	return ls.decision(local), nil
}

// newLease returns a lease of units granted with d at now, not yet published, for a key spending
// rate units a second.
func (l *Leaser) newLease(in *info, d sluice.Decision, now, units int64, rate float64) *lease {
	ls := &lease{deadline: l.deadline(in, d, now), limit: d.Limit, resetAt: d.ResetAt, start: units, info: in, plan: d.Plan, override: d.Override}
	ls.beside.Store(d.Remaining)
	if units >= minAhead && l.ahead > 0 {
		// The next lease is asked for when a share Ahead of this one is left, or earlier if the
		// key would spend what is left before two store calls of the recent latency.
		soon := rate * 2 * float64(l.latency.Load()) / 1e9
		ls.low = min(int64(math.Ceil(max(float64(units)*l.ahead, soon))), units)
	}
	ls.units.Store(units)
	return ls
}

// storeCheck is a Limiter.Check of the store, counted and timed.
func (l *Leaser) storeCheck(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error) {
	l.storeChecks.Add(1)
	start := time.Now()
	d, err := l.lim.Check(ctx, policy, key, cost)
	if err == nil {
		// An exponentially weighted average of the latency, in ns, weighing each call ⅛.
		took, old := int64(time.Since(start)), l.latency.Load()
		l.latency.CompareAndSwap(old, old+(took-old)/8)
	}
	return d, err
}

// used is what was spent of ls, which holds left units: 0 for no lease.
func (ls *lease) used(left int64) int64 {
	if ls == nil {
		return 0
	}
	if ls.ended {
		left = ls.left
	}
	return ls.start - left
}

// finish marks ls ended with left units (its units were taken away already), unless it was.
func (ls *lease) finish(left int64) {
	if ls != nil && !ls.ended {
		ls.ended, ls.left = true, left
	}
}

// estimate returns s.rate with what this process admitted for the key since its previous lease
// folded in: pending, and what was spent of prev, which holds (or held when it ended) left units.
func (s *slot) estimate(prev *lease, left, now int64, target float64) float64 {
	if !s.seen {
		return s.rate
	}
	used := s.pending + prev.used(left)
	dt := float64(max(now-s.last.Load(), 1))
	w := max(1-math.Exp(-dt/target), 0.5)
	return s.rate + w*(float64(used)*1000/dt-s.rate)
}

// size is how many units to ask for: the check's cost plus what the key is expected to spend
// locally over the lease's life.
func (l *Leaser) size(s *slot, in *info, rate float64, now, cost int64) int64 {
	n := cost
	if s.seen && now >= s.deniedUntil {
		want := math.Ceil(rate * min(l.target, float64(l.life(in, now))) / 1000)
		n = int64(min(max(want, float64(l.minLease)), float64(l.maxLease)))
	}
	return max(min(n, in.policy.MaxCost()), cost)
}

// life is how long, in ms, a lease taken at now could live, judged on the local clock.
func (l *Leaser) life(in *info, now int64) int64 {
	life := int64(math.MaxInt64)
	for _, lim := range in.policy.Limits() {
		switch st := lim.Strategy.(type) {
		case sluice.GCRA, sluice.TokenBucket:
			life = min(life, l.ttl)
		case sluice.FixedWindow:
			_, end := st.Bounds(now)
			life = min(life, max(int64(end)-now, 1))
		case sluice.SlidingWindow:
			life = min(life, int64(st.WindowMs))
		case sluice.SlidingWindowLog:
			life = min(life, int64(st.WindowMs))
		}
	}
	return life
}

// deadline is the first instant a lease granted with d at now may not be spent at.
func (l *Leaser) deadline(in *info, d sluice.Decision, now int64) int64 {
	dl := int64(math.MaxInt64)
	for i, lim := range in.policy.Limits() {
		switch st := lim.Strategy.(type) {
		case sluice.GCRA, sluice.TokenBucket:
			dl = min(dl, now+l.ttl)
		case sluice.FixedWindow:
			end := d.ResetAt // the store's end of the window the lease was taken in
			if i < len(d.Parts) {
				end = d.Parts[i].ResetAt
			}
			dl = min(dl, end)
		case sluice.SlidingWindow:
			dl = min(dl, now+int64(st.WindowMs))
		case sluice.SlidingWindowLog:
			dl = min(dl, now+int64(st.WindowMs))
		}
	}
	return dl
}

// end takes a published lease's units away and gives them back to the store where that is sound.
// It runs under the slot's mu.
func (l *Leaser) end(ctx context.Context, policy, key string, ls *lease) error {
	left := ls.units.Swap(0)
	ls.finish(left)
	return l.giveBack(ctx, policy, key, ls.info, left)
}

// giveBack refunds n unspent units of a lease taken under in, or counts them dropped.
func (l *Leaser) giveBack(ctx context.Context, policy, key string, in *info, n int64) error {
	if n <= 0 {
		return nil
	}
	if cur, ok := l.lim.Policy(policy); !in.refundable || !ok || !cur.Equal(in.policy) {
		l.dropped.Add(uint64(n))
		return nil
	}
	if err := l.lim.Refund(ctx, policy, key, n); err != nil {
		l.returnErrors.Add(1)
		l.dropped.Add(uint64(n))
		return err
	}
	l.returned.Add(uint64(n))
	return nil
}
