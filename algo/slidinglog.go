package algo

import (
	"cmp"
	"slices"

	"github.com/sluicehq/sluice"
)

// SlidingWindowLog decides for sluice.SlidingWindowLog: it logs the instant of every admitted unit
// and counts exactly those newer than now - windowMs.
type SlidingWindowLog struct {
	limit, window float64
}

// SlidingWindowLogState is a key's log: runs of units admitted at one instant, oldest first. Nil is
// a fresh key. A run per instant keeps the log as short as the number of distinct instants.
type SlidingWindowLogState struct{ Runs []Run }

// Run is N units admitted at the instant At (epoch ms).
type Run struct{ At, N int64 }

// NewSlidingWindowLog prepares a validated sluice.SlidingWindowLog.
func NewSlidingWindowLog(s sluice.SlidingWindowLog) *SlidingWindowLog {
	return &SlidingWindowLog{limit: s.Limit, window: s.WindowMs}
}

// live is the index of the first run still inside the window at n.
func (l *SlidingWindowLog) live(st SlidingWindowLogState, n float64) int {
	start := n - l.window
	i := 0
	for i < len(st.Runs) && float64(st.Runs[i].At) <= start {
		i++
	}
	return i
}

// prune drops the runs that have left the window at n and returns the count of the rest.
func (l *SlidingWindowLog) prune(st *SlidingWindowLogState, n float64) int64 {
	if i := l.live(*st, n); i > 0 {
		st.Runs = append(st.Runs[:0], st.Runs[i:]...)
	}
	var count int64
	for _, r := range st.Runs {
		count += r.N
	}
	return count
}

// at returns the instant of the k-th oldest unit (1-based).
func at(runs []Run, k int64) int64 {
	for _, r := range runs {
		if k <= r.N {
			return r.At
		}
		k -= r.N
	}
	return runs[len(runs)-1].At
}

func (l *SlidingWindowLog) resetAt(runs []Run, now int64) int64 {
	oldest := now
	if len(runs) > 0 {
		oldest = runs[0].At
	}
	return ceil(float64(oldest) + l.window)
}

// retryAfter is how long until a check of cost could pass with count units in the log.
func (l *SlidingWindowLog) retryAfter(runs []Run, n float64, count, cost int64) int64 {
	if count == 0 {
		return int64(l.window)
	}
	k := min(max(count+cost-int64(l.limit), 1), count)
	return max(ceil(float64(at(runs, k))+l.window-n), 1)
}

// Check logs cost units at now if the window has room for them, dropping the expired part of the
// log; a denied check leaves the state as it was, as the reference script writes nothing then (a
// longer window, after a limit change, may count again what this window has let go).
// The returned state may share memory with st.
func (l *SlidingWindowLog) Check(st SlidingWindowLogState, now, cost int64) (SlidingWindowLogState, sluice.Decision) {
	st, v := l.Decide(st, now, cost)
	return st, v.Decision(int64(l.limit))
}

// Decide is Check deciding a Verdict, which a store's hot path passes on in registers.
func (l *SlidingWindowLog) Decide(st SlidingWindowLogState, now, cost int64) (SlidingWindowLogState, sluice.Verdict) {
	n := float64(now)
	i := l.live(st, n)
	runs := st.Runs[i:]
	var count int64
	for _, r := range runs {
		count += r.N
	}
	if float64(count+cost) <= l.limit {
		if i > 0 {
			st.Runs = append(st.Runs[:0], runs...)
		}
		st.add(now, cost)
		return st, allow(int64(l.limit)-(count+cost), l.resetAt(st.Runs, now))
	}
	return st, deny(int64(l.limit)-count, l.resetAt(runs, now), l.retryAfter(runs, n, count, cost))
}

// add logs n units at now, keeping the runs in order of instant.
func (st *SlidingWindowLogState) add(now, n int64) {
	i, found := slices.BinarySearchFunc(st.Runs, now, func(r Run, t int64) int { return cmp.Compare(r.At, t) })
	if found {
		st.Runs[i].N += n
		return
	}
	st.Runs = slices.Insert(st.Runs, i, Run{At: now, N: n})
}

// view returns the runs inside the window at now and their count, leaving the state as it is.
func (l *SlidingWindowLog) view(st SlidingWindowLogState, now int64) ([]Run, int64) {
	runs := st.Runs[l.live(st, float64(now)):]
	var count int64
	for _, r := range runs {
		count += r.N
	}
	return runs, count
}

func (l *SlidingWindowLog) fullAt(runs []Run, now int64) int64 {
	if len(runs) == 0 {
		return now
	}
	return ceil(float64(runs[len(runs)-1].At) + l.window)
}

// Peek reports the state at now without changing it.
func (l *SlidingWindowLog) Peek(st SlidingWindowLogState, now int64) sluice.Decision {
	runs, count := l.view(st, now)
	return peek(float64(count+1) <= l.limit, int64(l.limit), int64(l.limit)-count, l.fullAt(runs, now),
		l.retryAfter(runs, float64(now), count, 1))
}

// Forecast projects the state at now for checks of cost.
func (l *SlidingWindowLog) Forecast(st SlidingWindowLogState, now, cost int64) sluice.Forecast {
	runs, count := l.view(st, now)
	next := now
	if len(runs) > 0 {
		next = ceil(float64(runs[0].At) + l.window)
	}
	return sluice.Forecast{SpendableNow: spendable(l.limit-float64(count), cost), NextReplenishAt: next, FullAt: l.fullAt(runs, now)}
}

// Refund removes the cost newest units from the log. The returned state may share memory with st.
func (l *SlidingWindowLog) Refund(st SlidingWindowLogState, now, cost int64) SlidingWindowLogState {
	l.prune(&st, float64(now))
	for cost > 0 && len(st.Runs) > 0 {
		last := &st.Runs[len(st.Runs)-1]
		take := min(last.N, cost)
		last.N -= take
		cost -= take
		if last.N == 0 {
			st.Runs = st.Runs[:len(st.Runs)-1]
		}
	}
	return st
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant: every
// logged unit has left the window.
func (l *SlidingWindowLog) Idle(st SlidingWindowLogState, now int64) bool {
	return len(st.Runs) == 0 || float64(st.Runs[len(st.Runs)-1].At) <= float64(now)-l.window
}

// Clone copies a state.
func (l *SlidingWindowLog) Clone(st SlidingWindowLogState) SlidingWindowLogState {
	return SlidingWindowLogState{Runs: slices.Clone(st.Runs)}
}
