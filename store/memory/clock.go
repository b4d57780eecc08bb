package memory

import (
	"sync/atomic"
	"time"
)

// processClock reads the wall clock once and advances it with the monotonic clock: epoch
// milliseconds that never run backwards, whatever happens to the wall clock.
func processClock() func() int64 {
	start := time.Now()
	base := start.UnixMilli()
	return func() int64 { return base + time.Since(start).Milliseconds() }
}

// monotonic holds a clock at the latest instant it has returned, so that a clock stepping back
// never replays time a limit has already spent.
func monotonic(now func() int64) func() int64 {
	var latest atomic.Int64
	return func() int64 {
		t := now()
		for {
			l := latest.Load()
			if t <= l {
				return l
			}
			if latest.CompareAndSwap(l, t) {
				return t
			}
		}
	}
}
