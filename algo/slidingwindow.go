package algo

import (
	"math"
	"slices"

	"github.com/sluicehq/sluice"
)

// SlidingWindow decides for sluice.SlidingWindow. The window of windowMs is cut into S buckets of
// w = windowMs/S; a key counts what it spent in the S most recent buckets (the current one
// included) plus the oldest bucket weighted by the part of it still inside the trailing window.
type SlidingWindow struct {
	limit, window, w float64
	s                int64
}

// SlidingWindowState is a key's bucket counts: S+1 slots, bucket j in slot j mod (S+1). Nil is a
// fresh key.
type SlidingWindowState struct{ Buckets []Bucket }

// Bucket is the count of sub-window Index.
type Bucket struct {
	Index int64
	Count float64
}

// NewSlidingWindow prepares a validated sluice.SlidingWindow.
func NewSlidingWindow(s sluice.SlidingWindow) *SlidingWindow {
	return &SlidingWindow{limit: s.Limit, window: s.WindowMs, w: s.WindowMs / float64(s.Buckets), s: int64(s.Buckets)}
}

func (sw *SlidingWindow) slot(j int64) int64 {
	m := j % (sw.s + 1)
	if m < 0 {
		m += sw.s + 1
	}
	return m
}

func (sw *SlidingWindow) get(st SlidingWindowState, j int64) float64 {
	if st.Buckets == nil {
		return 0
	}
	if b := st.Buckets[sw.slot(j)]; b.Index == j {
		return b.Count
	}
	return 0
}

// view is the window as seen at an instant.
type view struct {
	c                int64   // the current bucket
	weight           float64 // share of the oldest bucket still inside the window
	oldest, estimate float64
}

func (sw *SlidingWindow) view(st SlidingWindowState, n float64) view {
	c := int64(math.Floor(n / sw.w))
	elapsed := atLeast(n-float64(float64(c)*sw.w), 0)
	weight := atMost(atLeast((sw.w-elapsed)/sw.w, 0), 1)
	var full float64
	for j := c - sw.s + 1; j <= c; j++ {
		full += sw.get(st, j)
	}
	oldest := sw.get(st, c-sw.s)
	return view{c: c, weight: weight, oldest: oldest, estimate: full + float64(oldest*weight)}
}

// resetAt is when the window is empty again if bucket j is the newest that counts.
func (sw *SlidingWindow) resetAt(j int64) int64 {
	return ceil(float64(float64(j+1)*sw.w) + sw.window)
}

// retryAfter is how long until a check of cost could pass.
func (sw *SlidingWindow) retryAfter(v view, n, cost float64) int64 {
	d := v.estimate + cost - sw.limit
	var r int64
	if v.oldest > 0 && d <= float64(v.oldest*v.weight) {
		r = ceil(d * sw.w / v.oldest)
	} else {
		r = ceil(float64(float64(v.c+1)*sw.w) - n)
	}
	return max(r, 1)
}

// Check spends cost at now if the estimated count leaves room for it.
// The returned state may share memory with st.
func (sw *SlidingWindow) Check(st SlidingWindowState, now, cost int64) (SlidingWindowState, sluice.Decision) {
	st, v := sw.Decide(st, now, cost)
	return st, v.Decision(int64(sw.limit))
}

// Decide is Check deciding a Verdict, which a store's hot path passes on in registers.
func (sw *SlidingWindow) Decide(st SlidingWindowState, now, cost int64) (SlidingWindowState, sluice.Verdict) {
	n, c := float64(now), float64(cost)
	v := sw.view(st, n)
	if projected := v.estimate + c; projected <= sw.limit {
		if st.Buckets == nil {
			st.Buckets = make([]Bucket, sw.s+1)
		}
		st.Buckets[sw.slot(v.c)] = Bucket{Index: v.c, Count: sw.get(st, v.c) + c}
		return st, allow(whole(sw.limit-projected), sw.resetAt(v.c))
	}
	return st, deny(whole(sw.limit-v.estimate), sw.resetAt(v.c), sw.retryAfter(v, n, c))
}

// newest is the newest bucket with a count that still counts at v (or later), or false if none.
func (sw *SlidingWindow) newest(st SlidingWindowState, v view) (int64, bool) {
	j, ok := int64(0), false
	for _, b := range st.Buckets {
		if b.Count > 0 && b.Index >= v.c-sw.s && (!ok || b.Index > j) {
			j, ok = b.Index, true
		}
	}
	return j, ok
}

func (sw *SlidingWindow) fullAt(st SlidingWindowState, v view, now int64) int64 {
	if j, ok := sw.newest(st, v); ok {
		return sw.resetAt(j)
	}
	return now
}

// Peek reports the state at now without changing it.
func (sw *SlidingWindow) Peek(st SlidingWindowState, now int64) sluice.Decision {
	n := float64(now)
	v := sw.view(st, n)
	return peek(v.estimate+1 <= sw.limit, int64(sw.limit), whole(sw.limit-v.estimate), sw.fullAt(st, v, now), sw.retryAfter(v, n, 1))
}

// Forecast projects the state at now for checks of cost. The next replenishment is found by
// following the estimate bucket by bucket as the oldest counts slide out of the window.
func (sw *SlidingWindow) Forecast(st SlidingWindowState, now, cost int64) sluice.Forecast {
	n := float64(now)
	v := sw.view(st, n)
	f := sluice.Forecast{SpendableNow: spendable(sw.limit-v.estimate, cost), NextReplenishAt: now, FullAt: sw.fullAt(st, v, now)}
	if f.FullAt == now {
		return f
	}
	// The estimate must fall to target for one more whole unit to be available.
	target := sw.limit - float64(floor(sw.limit-v.estimate)+1)
	full := v.estimate - float64(v.oldest*v.weight)
	oldest, end := v.oldest, float64(float64(v.c+1)*sw.w)
	for j := v.c; j <= v.c+sw.s; j++ {
		// Within bucket j the estimate is full + oldest*(end-t)/w, falling linearly to full at end.
		if full <= target {
			if oldest <= 0 {
				f.NextReplenishAt = now
			} else {
				f.NextReplenishAt = max(ceil(end-float64((target-full)*sw.w/oldest)), now)
			}
			return f
		}
		oldest = sw.get(st, j-sw.s+1)
		full -= oldest
		end += sw.w
	}
	f.NextReplenishAt = f.FullAt
	return f
}

// Refund takes cost back from the newest buckets still inside the window, down to zero. The
// returned state may share memory with st.
func (sw *SlidingWindow) Refund(st SlidingWindowState, now, cost int64) SlidingWindowState {
	if st.Buckets == nil {
		return st
	}
	left := float64(cost)
	c := int64(math.Floor(float64(now) / sw.w))
	for j := c; j >= c-sw.s && left > 0; j-- {
		b := &st.Buckets[sw.slot(j)]
		if b.Index == j && b.Count > 0 {
			take := min(b.Count, left)
			b.Count -= take
			left -= take
		}
	}
	return st
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant: no
// bucket with a count is inside the window or ahead of it.
func (sw *SlidingWindow) Idle(st SlidingWindowState, now int64) bool {
	c := int64(math.Floor(float64(now) / sw.w))
	for _, b := range st.Buckets {
		if b.Count > 0 && b.Index >= c-sw.s {
			return false
		}
	}
	return true
}

// Clone copies a state.
func (sw *SlidingWindow) Clone(st SlidingWindowState) SlidingWindowState {
	return SlidingWindowState{Buckets: slices.Clone(st.Buckets)}
}
