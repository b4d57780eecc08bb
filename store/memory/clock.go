package memory

import (
	"sync"
	"sync/atomic"
	"time"
)

// clock serves epoch milliseconds for the store's decisions. Reading the OS clock costs about as
// much as a whole check, and decisions only need milliseconds, so while checks are flowing a ticker
// refreshes a cached reading every millisecond and a check just loads it. After a second with no
// reader the ticker stops, and the next read takes the OS clock itself and starts it again: an idle
// store costs nothing.
//
// The wall clock is read once, at start; time then advances with the monotonic clock, so readings
// never run backwards, whatever happens to the wall clock.
type clock struct {
	ms    atomic.Int64 // the latest reading
	state atomic.Int32 // clockStopped, clockUnread or clockRead

	start time.Time
	base  int64

	mu     sync.Mutex // guards starting and stopping the ticker, closed and stop
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// A clock's state: whether its ticker runs and, if so, whether ms was read since the last tick.
// One word that a read loads, so that the read inlines into a check.
const (
	clockStopped = iota
	clockUnread
	clockRead
)

// idleTicks is how many ticks without a reader stop the ticker.
const idleTicks = 1000

func newClock() *clock {
	start := time.Now()
	c := &clock{start: start, base: start.UnixMilli(), stop: make(chan struct{})}
	c.ms.Store(c.base)
	return c
}

func (c *clock) now() int64 {
	if c.state.Load() == clockRead {
		return c.ms.Load()
	}
	return c.mark()
}

// mark is now for the first read since a tick: it tells the ticker a reader came, or wakes it.
func (c *clock) mark() int64 {
	if c.state.CompareAndSwap(clockUnread, clockRead) || c.state.Load() == clockRead {
		return c.ms.Load()
	}
	return c.wake()
}

// advance refreshes the reading, never backwards.
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

// wake reads the OS clock and starts the ticker unless the clock is closed.
func (c *clock) wake() int64 {
	t := c.advance()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && c.state.Load() == clockStopped {
		c.state.Store(clockRead)
		c.wg.Add(1)
		go c.tick()
	}
	return t
}

func (c *clock) tick() {
	defer c.wg.Done()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for idle := 0; ; {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.advance()
		if c.state.CompareAndSwap(clockRead, clockUnread) {
			idle = 0
			continue
		}
		if idle++; idle >= idleTicks {
			c.mu.Lock()
			stopped := c.state.CompareAndSwap(clockUnread, clockStopped)
			c.mu.Unlock()
			if stopped {
				return
			}
			idle = 0 // a reader came in the meantime
		}
	}
}

// close stops the ticker; later reads take the OS clock. It is idempotent.
func (c *clock) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.state.Store(clockStopped)
		close(c.stop)
	}
	c.mu.Unlock()
	c.wg.Wait()
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
