package algo

import (
	"math"

	"github.com/sluicehq/sluice"
)

// FixedWindow decides for sluice.FixedWindow: a key may spend limit units in each window (of
// windowMs aligned to the epoch, or a calendar day or month), and its count starts over when a new
// window begins.
type FixedWindow struct {
	limit, window float64 // window is 0 for a calendar window
	s             sluice.FixedWindow
}

// FixedWindowState is a key's count in the window starting at Start (epoch ms). The zero value is a
// fresh key.
type FixedWindowState struct{ Start, Count float64 }

// NewFixedWindow prepares a validated sluice.FixedWindow.
func NewFixedWindow(s sluice.FixedWindow) *FixedWindow {
	f := &FixedWindow{limit: s.Limit, s: s}
	if s.Calendar == "" {
		f.window = s.WindowMs
	}
	return f
}

// count returns the bounds of now's window and what the key has spent in it.
func (f *FixedWindow) count(s FixedWindowState, now int64) (start, end, count float64) {
	if f.window > 0 { // s.Bounds, without copying s on the hot path
		start = math.Floor(float64(now)/f.window) * f.window
		end = start + f.window
	} else {
		start, end = f.s.Bounds(now)
	}
	if s.Start != start {
		return start, end, 0
	}
	return start, end, s.Count
}

// Check spends cost at now if the window has room for it.
func (f *FixedWindow) Check(s FixedWindowState, now, cost int64) (FixedWindowState, sluice.Decision) {
	s, v := f.Decide(s, now, cost)
	return s, v.Decision(int64(f.limit))
}

// Decide is Check deciding a Verdict, which a store's hot path passes on in registers.
func (f *FixedWindow) Decide(s FixedWindowState, now, cost int64) (FixedWindowState, sluice.Verdict) {
	start, resetAt, count := f.count(s, now)
	if c := count + float64(cost); c <= f.limit {
		return FixedWindowState{Start: start, Count: c}, allow(int64(f.limit-c), int64(resetAt))
	}
	return s, deny(int64(f.limit-count), int64(resetAt), ceil(resetAt-float64(now)))
}

// Peek reports the state at now without changing it.
func (f *FixedWindow) Peek(s FixedWindowState, now int64) sluice.Decision {
	_, resetAt, count := f.count(s, now)
	full := now
	if count > 0 {
		full = int64(resetAt)
	}
	return peek(count+1 <= f.limit, int64(f.limit), int64(f.limit-count), full, ceil(resetAt-float64(now)))
}

// Forecast projects the state at now for checks of cost.
func (f *FixedWindow) Forecast(s FixedWindowState, now, cost int64) sluice.Forecast {
	_, end, count := f.count(s, now)
	full := now
	if count > 0 {
		full = ceil(end)
	}
	return sluice.Forecast{SpendableNow: spendable(f.limit-count, cost), NextReplenishAt: full, FullAt: full}
}

// Refund takes cost back from the current window's count, down to zero. Units spent in an earlier
// window are gone with it.
func (f *FixedWindow) Refund(s FixedWindowState, now, cost int64) FixedWindowState {
	if start, _, count := f.count(s, now); count > 0 {
		return FixedWindowState{Start: start, Count: atLeast(count-float64(cost), 0)}
	}
	return s
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant.
func (f *FixedWindow) Idle(s FixedWindowState, now int64) bool {
	start, _ := f.s.Bounds(now)
	return s.Count == 0 || s.Start < start
}

// Clone copies a state.
func (f *FixedWindow) Clone(s FixedWindowState) FixedWindowState { return s }
