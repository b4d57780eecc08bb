package algo

import (
	"math"

	"github.com/sluicehq/sluice"
)

// FixedWindow decides for sluice.FixedWindow: a key may spend limit units in each window of
// windowMs, windows aligned to the epoch, and its count starts over when a new window begins.
type FixedWindow struct {
	limit, window float64
}

// FixedWindowState is a key's count in the window starting at Start (epoch ms). The zero value is a
// fresh key.
type FixedWindowState struct{ Start, Count float64 }

// NewFixedWindow prepares a validated sluice.FixedWindow.
func NewFixedWindow(s sluice.FixedWindow) *FixedWindow {
	return &FixedWindow{limit: s.Limit, window: s.WindowMs}
}

// count returns the start of now's window and what the key has spent in it.
func (f *FixedWindow) count(s FixedWindowState, n float64) (start, count float64) {
	start = math.Floor(n/f.window) * f.window
	if s.Start != start {
		return start, 0
	}
	return start, s.Count
}

// Check spends cost at now if the window has room for it.
func (f *FixedWindow) Check(s FixedWindowState, now, cost int64) (FixedWindowState, sluice.Decision) {
	n := float64(now)
	start, count := f.count(s, n)
	resetAt := start + f.window
	if c := count + float64(cost); c <= f.limit {
		return FixedWindowState{Start: start, Count: c}, allow(int64(f.limit), int64(f.limit-c), int64(resetAt))
	}
	return s, deny(int64(f.limit), int64(f.limit-count), int64(resetAt), ceil(resetAt-n))
}

// Peek reports the state at now without changing it.
func (f *FixedWindow) Peek(s FixedWindowState, now int64) sluice.Decision {
	n := float64(now)
	start, count := f.count(s, n)
	resetAt := start + f.window
	full := now
	if count > 0 {
		full = int64(resetAt)
	}
	return peek(count+1 <= f.limit, int64(f.limit), int64(f.limit-count), full, ceil(resetAt-n))
}

// Forecast projects the state at now for checks of cost.
func (f *FixedWindow) Forecast(s FixedWindowState, now, cost int64) sluice.Forecast {
	start, count := f.count(s, float64(now))
	full := now
	if count > 0 {
		full = ceil(start + f.window)
	}
	return sluice.Forecast{SpendableNow: spendable(f.limit-count, cost), NextReplenishAt: full, FullAt: full}
}

// Refund takes cost back from the current window's count, down to zero. Units spent in an earlier
// window are gone with it.
func (f *FixedWindow) Refund(s FixedWindowState, now, cost int64) FixedWindowState {
	if start, count := f.count(s, float64(now)); count > 0 {
		return FixedWindowState{Start: start, Count: atLeast(count-float64(cost), 0)}
	}
	return s
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant.
func (f *FixedWindow) Idle(s FixedWindowState, now int64) bool {
	return s.Count == 0 || s.Start < math.Floor(float64(now)/f.window)*f.window
}

// Clone copies a state.
func (f *FixedWindow) Clone(s FixedWindowState) FixedWindowState { return s }
