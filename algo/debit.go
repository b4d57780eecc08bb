package algo

import "math"

// Debit pushes the TAT cost emission intervals later: tat := max(TAT, now) + T×cost.
func (g *GCRA) Debit(s GCRAState, now, cost int64) GCRAState {
	return GCRAState{TAT: atLeast(s.TAT, float64(now)) + float64(g.t*float64(cost))}
}

// Debit takes cost tokens from the bucket as refilled at now; the count may go below zero.
func (b *TokenBucket) Debit(s TokenBucketState, now, cost int64) TokenBucketState {
	return TokenBucketState{Tokens: b.tokens(s, float64(now)) - float64(cost), Last: max(now, s.Last)}
}

// Debit adds cost to the count of now's window, past the limit if need be.
func (f *FixedWindow) Debit(s FixedWindowState, now, cost int64) FixedWindowState {
	start, _, count := f.count(s, now)
	return FixedWindowState{Start: start, Count: count + float64(cost)}
}

// Debit adds cost to now's bucket, past the limit if need be.
// The returned state may share memory with st.
func (sw *SlidingWindow) Debit(st SlidingWindowState, now, cost int64) SlidingWindowState {
	c := int64(math.Floor(float64(now) / sw.w))
	if st.Buckets == nil {
		st.Buckets = make([]Bucket, sw.s+1)
	}
	st.Buckets[sw.slot(c)] = Bucket{Index: c, Count: sw.get(st, c) + float64(cost)}
	return st
}

// Debit logs cost units at now, past the limit if need be.
// The returned state may share memory with st.
func (l *SlidingWindowLog) Debit(st SlidingWindowLogState, now, cost int64) SlidingWindowLogState {
	l.prune(&st, float64(now))
	st.add(now, cost)
	return st
}
