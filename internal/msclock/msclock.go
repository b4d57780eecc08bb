// Package msclock is the process clock in epoch milliseconds, cheap enough to read on every check:
// the memory store's decisions and the leases' deadlines read it.
package msclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock serves epoch milliseconds. Reading the OS clock costs about as much as a whole rate-limit
// check, and checks only need milliseconds, so while checks are flowing a ticker
// refreshes a cached reading every millisecond and a check just loads it. After a second with no
// reader the ticker stops, and the next read takes the OS clock itself and starts it again: an idle
// clock costs nothing. Close stops the ticker for good; later reads take the OS clock.
//
// The wall clock is read once, at start; time then advances with the monotonic clock, so readings
// never run backwards, whatever happens to the wall clock.
type Clock struct {
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

// New returns a Clock, its ticker not yet started. A Clock is safe for concurrent use.
func New() *Clock {
	start := time.Now()
	c := &Clock{start: start, base: start.UnixMilli(), stop: make(chan struct{})}
	c.ms.Store(c.base)
	return c
}

// Now is the time in epoch milliseconds: never less than an earlier reading.
func (c *Clock) Now() int64 {
	if c.state.Load() == clockRead {
		return c.ms.Load()
	}
	return c.mark()
}

// mark is Now for the first read since a tick: it tells the ticker a reader came, or wakes it.
func (c *Clock) mark() int64 {
	if c.state.CompareAndSwap(clockUnread, clockRead) || c.state.Load() == clockRead {
		return c.ms.Load()
	}
	return c.wake()
}

// advance refreshes the reading, never backwards.
func (c *Clock) advance() int64 {
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
func (c *Clock) wake() int64 {
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

func (c *Clock) tick() {
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

// Close stops the ticker; later reads take the OS clock. It is idempotent.
func (c *Clock) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.state.Store(clockStopped)
		close(c.stop)
	}
	c.mu.Unlock()
	c.wg.Wait()
}
