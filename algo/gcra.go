package algo

import "github.com/sluicehq/sluice"

// GCRA decides for sluice.GCRA. A key's state is its theoretical arrival time (TAT): the instant at
// which the key would be back to full headroom. Each unit of cost pushes the TAT one emission
// interval T = periodMs/limit later; a check is admitted while the pushed TAT stays within
// tau = T*burst of now.
type GCRA struct {
	t, tau float64
	limit  int64
}

// GCRAState is a key's TAT in epoch ms; the zero value is a fresh key.
type GCRAState struct{ TAT float64 }

// NewGCRA prepares a validated sluice.GCRA.
func NewGCRA(s sluice.GCRA) *GCRA {
	t := s.PeriodMs / s.Limit
	return &GCRA{t: t, tau: t * s.Burst, limit: int64(s.Burst)}
}

// Check admits cost at now if the headroom allows, moving the TAT forward.
func (g *GCRA) Check(s GCRAState, now, cost int64) (GCRAState, sluice.Decision) {
	s, v := g.Decide(s, now, cost)
	return s, v.Decision(g.limit)
}

// Decide is Check deciding a Verdict, which a store's hot path passes on in registers.
func (g *GCRA) Decide(s GCRAState, now, cost int64) (GCRAState, sluice.Verdict) {
	next, ok := g.Spend(s, now, cost)
	return next, g.Verdict(s, next, now, cost, ok)
}

// Spend is Decide's first half: the state after a check of cost at now, and whether it is
// admitted. A store that holds a key's state only from reading it to writing it back calls Spend in
// between and Verdict after, so that the verdict's divisions do not keep other checks waiting.
func (g *GCRA) Spend(s GCRAState, now, cost int64) (next GCRAState, ok bool) {
	n := float64(now)
	newTAT := atLeast(s.TAT, n) + float64(g.t*float64(cost))
	if n < newTAT-g.tau {
		return s, false
	}
	return GCRAState{TAT: newTAT}, true
}

// Verdict is Decide's second half: the verdict of the check that Spend answered with next and ok,
// from s.
func (g *GCRA) Verdict(s, next GCRAState, now, cost int64, ok bool) sluice.Verdict {
	n := float64(now)
	if !ok {
		tat := atLeast(s.TAT, n)
		allowAt := tat + float64(g.t*float64(cost)) - g.tau
		return deny(whole((g.tau-(tat-n))/g.t), ceil(tat), ceil(allowAt-n))
	}
	return allow(whole((g.tau-(next.TAT-n))/g.t), ceil(next.TAT))
}

// Peek reports the state at now without changing it.
func (g *GCRA) Peek(s GCRAState, now int64) sluice.Decision {
	n := float64(now)
	tat := atLeast(s.TAT, n)
	allowAt := tat + g.t - g.tau
	return peek(n >= allowAt, g.limit, whole((g.tau-(tat-n))/g.t), ceil(tat), ceil(allowAt-n))
}

// Forecast projects the state at now for checks of cost.
func (g *GCRA) Forecast(s GCRAState, now, cost int64) sluice.Forecast {
	n := float64(now)
	tat := atLeast(s.TAT, n)
	avail := (g.tau - (tat - n)) / g.t
	next := now
	if tat > n {
		next = min(ceil(n+float64((float64(floor(avail)+1)-avail)*g.t)), ceil(tat))
	}
	return sluice.Forecast{SpendableNow: spendable(avail, cost), NextReplenishAt: next, FullAt: ceil(tat)}
}

// Refund moves the TAT back by cost emission intervals, never before now.
func (g *GCRA) Refund(s GCRAState, now, cost int64) GCRAState {
	n := float64(now)
	return GCRAState{TAT: atLeast(atLeast(s.TAT, n)-float64(g.t*float64(cost)), n)}
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant.
func (g *GCRA) Idle(s GCRAState, now int64) bool { return s.TAT <= float64(now) }

// Clone copies a state.
func (g *GCRA) Clone(s GCRAState) GCRAState { return s }
