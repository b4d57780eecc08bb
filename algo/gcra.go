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
	n := float64(now)
	tat := atLeast(s.TAT, n)
	newTAT := tat + float64(g.t*float64(cost))
	allowAt := newTAT - g.tau
	if n < allowAt {
		return s, deny(whole((g.tau-(tat-n))/g.t), ceil(tat), ceil(allowAt-n))
	}
	return GCRAState{TAT: newTAT}, allow(whole((g.tau-(newTAT-n))/g.t), ceil(newTAT))
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
