package lease

import (
	"sync/atomic"
	"time"
)

// clock is the process clock in epoch milliseconds, as the hot path reads it. Reading the OS clock
// costs more than a whole local check, so while checks read it the Leaser's goroutine refreshes a
// cached reading every millisecond and a check only loads it. After idleTicks ticks with no reader
// the refreshing stops; the next reader reads the OS clock itself and wakes the goroutine.
//
// The wall clock is read once; time then advances with the monotonic clock, so readings never run
// backwards.
type clock struct {
	ms      atomic.Int64
	ticking atomic.Bool // the goroutine refreshes ms
	read    atomic.Bool // ms was read since the last tick
	stopped bool        // the Leaser is closed: never tick again (guarded by Leaser.clockMu)
	paused  bool        // the goroutine waits on the store: read the OS (guarded by Leaser.clockMu)

	start time.Time
	base  int64
}

// idleTicks is how many ticks without a reader stop the refreshing.
const idleTicks = 1000

func (c *clock) init() {
	c.start = time.Now()
	c.base = c.start.UnixMilli()
	c.ms.Store(c.base)
}

// advance refreshes the reading, never backwards, and returns it.
func (c *clock) advance() int64 {
	t := c.base + time.Since(c.start).Milliseconds()
	for {
		old := c.ms.Load()
		if t <= old {
			return old
		}
		if c.ms.CompareAndSwap(old, t) {
			return t
		}
	}
}

// wakeClock reads the OS clock and has the goroutine refresh the reading from now on.
func (l *Leaser) wakeClock() int64 {
	t := l.clock.advance()
	l.clockMu.Lock()
	if !l.clock.stopped && !l.clock.paused && !l.clock.ticking.Load() {
		l.clock.ticking.Store(true)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	l.clockMu.Unlock()
	return t
}
