package msclock

import (
	"sync"
	"testing"
	"time"
)

// TestCloseStopsTicker: Close stops the ticker, and a read after Close takes the OS clock without
// starting it again.
func TestCloseStopsTicker(t *testing.T) {
	c := New()
	c.Now()
	if c.state.Load() == clockStopped {
		t.Fatal("the clock is not ticking after a read")
	}
	c.Close()
	if c.state.Load() != clockStopped {
		t.Fatal("the clock still ticks after Close")
	}
	before := time.Now().UnixMilli()
	got := c.Now()
	if got < before-100 || got > time.Now().UnixMilli()+1 {
		t.Errorf("clock read after Close: %d, wall %d", got, before)
	}
	if c.state.Load() != clockStopped {
		t.Error("a read after Close started the ticker again")
	}
	c.wg.Wait() // returns at once: no ticker goroutine
	c.Close()
}

// TestClockReadings: the process clock is the wall clock in epoch ms, within a few ms, and never
// decreases across many reads from several goroutines.
func TestClockReadings(t *testing.T) {
	c := New()
	defer c.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := int64(0)
			for i := range 200_000 {
				now := c.Now()
				if now < last {
					t.Errorf("read %d: clock went back from %d to %d", i, last, now)
					return
				}
				last = now
			}
		})
	}
	wg.Wait()
	for range 50 {
		before := time.Now().UnixMilli()
		now := c.Now()
		after := time.Now().UnixMilli()
		if now > after+1 || now < before-50 {
			t.Fatalf("clock %d, wall clock between %d and %d", now, before, after)
		}
	}
}

// TestClockTickerStopsAndRestarts: after idleTicks ticks without a reader the ticker stops (its
// goroutine ends); the next read takes the OS clock and starts it again. This waits for the real
// ticker, about one second.
func TestClockTickerStopsAndRestarts(t *testing.T) {
	c := New()
	defer c.Close()
	first := c.Now()
	if c.state.Load() == clockStopped {
		t.Fatal("a read did not start the ticker")
	}
	limit := time.Duration(idleTicks)*time.Millisecond + 500*time.Millisecond
	start := time.Now()
	for c.state.Load() != clockStopped {
		if time.Since(start) > limit {
			t.Fatalf("ticker still running %v after the last read", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { c.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		t.Fatal("the ticker goroutine did not end after it stopped")
	}
	t.Logf("ticker stopped %v after the last read", time.Since(start).Round(time.Millisecond))

	before := time.Now().UnixMilli()
	now := c.Now()
	if now < first || now < before-5 || now > time.Now().UnixMilli()+1 {
		t.Fatalf("read after the ticker stopped: %d; first read %d, wall clock %d", now, first, before)
	}
	if c.state.Load() == clockStopped {
		t.Fatal("a read after the ticker stopped did not start it again")
	}
	deadline := time.Now().Add(time.Second)
	for c.Now() <= now {
		if time.Now().After(deadline) {
			t.Fatal("the restarted ticker does not advance the clock")
		}
		time.Sleep(time.Millisecond)
	}
}
