// Package topkeys counts, per policy, the keys checked most and the keys denied most over the last
// minute and the last hour, for the operator console's "Top keys", in memory bounded whatever the
// keys.
//
// # Model
//
// The service tells a Tracker of every check: its policy, its key, and whether it was denied.
// Every check counts in the policy's checked list, a denial in its denied list too. Each list is
// kept per bucket of time, a Space-Saving sketch of Config.Capacity (k) counters per bucket: the
// minute in 6 buckets of 10 s, the hour in 12 buckets of 5 min, both aligned to the Unix epoch.
// Top merges the buckets of a window into one list.
//
// # What the last minute covers
//
// A window is the bucket now falls in, partial, and the buckets before it: Minute covers from the
// start of the bucket 50 s before now's to now, the last 50 to 60 s depending on how far now is
// into its bucket. An event 50 s old or newer is always counted, one 60 s old or older never;
// between the two, while its bucket is one of the six (59 s ago: when now is at least 9 s into its
// bucket). Hour likewise covers the last 55 to 60 min: an event 55 min old or newer is counted,
// one 60 min old or older (61 min, say) is in no window. An event's instant is that of the drain
// that counts it, up to 100 ms after Observe.
//
// # Accuracy
//
// For a list whose window holds N events (Result.Total):
//   - Count is never below the key's true count, and at most Error above it;
//   - Error ≤ ErrorBound ≤ N/k (ErrorBound is the sum of the buckets' smallest counts);
//   - a key with more than N/k events in the window is among the k largest, so listed when n
//     allows (always with n = k);
//   - while no bucket of the window has seen more than k distinct keys, counts are exact and
//     ErrorBound is 0.
//
// Events Observe dropped (Dropped) count nowhere: N is then below the true number of checks.
//
// # Memory
//
// A policy holds at most (6+12) × 2 sketches of k counters, made at their bucket's first event
// (a denied list at its first denial). A counter takes 67 bytes and its key (BenchmarkMemory, on
// amd64, the key rounded up to Go's size classes), so with the default k of 128 a policy holds at
// most 4608 counters: 302 KiB and their keys, 446 KiB with keys of 32 bytes, 4.8 MiB with keys of
// sluice.MaxKeyLen (1 KiB); a flood of distinct keys changes what the counters hold, not how many
// there are. A policy with no event left in the hour is deleted, so a renamed or removed policy's
// memory goes within 61 min; a Tracker holds at most 4096 policies (a new one's events are dropped
// past that). Besides, the stripes buffer at most 64 × 512 events of 40 bytes (1.3 MiB) and the
// strings they name, and Top takes a few hundred KiB while it merges.
//
// # Cost
//
// Observe locks one of 64 stripes (the one of the caller's stack; another, at random, if it is
// locked or full), appends the event to its buffer and unlocks: two atomic operations, no
// allocation (BenchmarkObserve). A drain goroutine swaps each stripe's buffer for an empty one
// every 100 ms, or sooner when a stripe is half full, and feeds the events to the sketches: a
// few hundred ns an event when every key is new (BenchmarkDrain), less when keys repeat, and once
// for a run of one key's events, as a goroutine checking a hot key leaves. No goroutine or timer
// is made per key or per policy.
//
// # Concurrency
//
// Every method of Tracker is safe for concurrent use. Observe never waits: it drops the event
// instead. Top, Policies and Flush wait for the drain in progress.
package topkeys

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// DefaultCapacity is the counters per sketch of a Config that sets none.
const DefaultCapacity = 128

// maxCapacity bounds Config.Capacity: a query merges up to 12 sketches of that many counters.
const maxCapacity = 4096

// Config configures a Tracker; its zero value is usable.
type Config struct {
	// Capacity is the counters per sketch (Space-Saving's k): a list is exact while a bucket sees
	// at most this many distinct keys, and overstates a count by at most its window's events /
	// Capacity past that. 0 means DefaultCapacity; at most 4096.
	Capacity int
}

// Window is a span of time ending now that Top and Policies summarise, at the granularity of its
// buckets (see "What the last minute covers" above).
type Window int

const (
	Minute Window = iota // the last 50 to 60 s: six buckets of 10 s, the current one partial
	Hour                 // the last 55 to 60 min: twelve buckets of 5 min, the current one partial
)

// Count is one key's estimate: Count never understates the key's true count in the window, and
// overstates it by at most Error.
type Count struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Error int64  `json:"error"`
}

// Result is one list of a policy in a window. Total is the window's events of the list (checks,
// or denials); ErrorBound the most any Count of the list overstates its key's true count: the sum
// of the window's buckets' smallest counts, at most Total/Capacity. Keys are by Count descending,
// then key, and never nil (JSON [], not null).
type Result struct {
	Total      int64   `json:"total"`
	ErrorBound int64   `json:"errorBound"`
	Keys       []Count `json:"keys"`
}

const (
	stripesLog   = 6
	stripes      = 1 << stripesLog
	stripeEvents = 512 // events a stripe buffers between drains
	drainEvery   = 100 * time.Millisecond
)

// event is one Observe, buffered until the drain.
type event struct {
	policy, key     string
	checks, denials uint32 // a run of one key's checks, as a goroutine on a hot key leaves, is one event
}

// stripe is one lock's buffer of events, padded so that neighbouring stripes' locks and counts do
// not share a cache line.
type stripe struct {
	stripeState
	_ [128 - unsafe.Sizeof(stripeState{})%128]byte
}

type stripeState struct {
	mu  sync.Mutex // guards n and buf: Observe appends, the drain swaps buf for an empty one
	n   int        // events in buf
	buf []event
	// dropped counts the events dropped here, the second stripe tried. It is added to without mu,
	// whose TryLock may just have failed.
	dropped atomic.Uint64
}

// Tracker counts the events Observe is told of. Observe is safe to call from any goroutine at any
// rate: it buffers the event in one of a fixed set of stripes, or drops it when that would wait,
// and a single background goroutine drains the stripes into the sketches every 100 ms. Top,
// Policies, Flush, Dropped and Close are safe for concurrent use too. Make one with New (the zero
// Tracker is not usable) and Close it when done, which stops the goroutine.
type Tracker struct {
	// Read by Observe, never written (closed: once, by Close), so apart from the stripes' lines.
	stripes *[stripes]stripe
	closed  atomic.Bool
	wake    chan struct{} // Observe asks for an early drain when a stripe is half full

	mu        sync.Mutex // guards win, spare and swept: the sketches change and are read only under it
	win       *windows
	spare     []event       // an empty buffer, swapped with a stripe's by the drain
	swept     int64         // the minute bucket of the last sweep
	overflow  atomic.Uint64 // events of policies past maxPolicies; read by Dropped without mu
	start     time.Time     // its monotonic reading is the clock: the drain's instants never go back
	startMs   int64
	closeOnce sync.Once
	done      chan struct{} // closed by Close
	exited    chan struct{} // closed by the drain goroutine as it returns
}

// knobs are the internals tests shrink.
type knobs struct {
	events int  // per stripe
	manual bool // no drain goroutine: only Flush, Top and Policies drain
}

// New returns a running Tracker. It starts one goroutine, which Close stops.
func New(cfg Config) (*Tracker, error) {
	return newTracker(cfg, knobs{events: stripeEvents})
}

func newTracker(cfg Config, kn knobs) (*Tracker, error) {
	k := cfg.Capacity
	switch {
	case k == 0:
		k = DefaultCapacity
	case k < 0 || k > maxCapacity:
		return nil, &sluice.InvalidError{Field: "Capacity",
			Reason: fmt.Sprintf("must be 1 to %d (0 for %d), got %d", maxCapacity, DefaultCapacity, k)}
	}
	t := &Tracker{
		stripes: new([stripes]stripe),
		wake:    make(chan struct{}, 1),
		win:     newWindows(k),
		spare:   make([]event, kn.events),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
		start:   time.Now(),
	}
	t.startMs = t.start.UnixMilli()
	for i := range t.stripes {
		t.stripes[i].buf = make([]event, kn.events)
	}
	if kn.manual {
		close(t.exited)
	} else {
		go t.run()
	}
	return t, nil
}

// Observe counts one check of key under policy, and one denial too if denied. It never blocks and
// never allocates: when two stripes are locked or full, it drops the event and counts it in
// Dropped. It keeps policy and key until the next drain, so they must be ordinary strings, not
// views of a buffer that is reused. After Close it does nothing.
func (t *Tracker) Observe(policy, key string, denied bool) {
	// The stripe of the caller's stack, not of the key: callers of one hot key must not all queue
	// on one lock, and concurrent callers run on different stacks. rand.Uint32 would spread them
	// as well, and made Observe a third dearer (BenchmarkObserve: about 32 cpu-ns against 24).
	var onStack byte
	i := stripeOf(uintptr(unsafe.Pointer(&onStack)))
	e := event{policy: policy, key: key, checks: 1}
	if denied {
		e.denials = 1
	}
	if !t.stripes[i].add(e, t.wake) {
		t.observeElsewhere(i, e)
	}
}

// stripeOf is the stripe of a caller whose stack is at addr: a Fibonacci hash of its 2 KiB block
// (the smallest stack), which gives neighbouring stacks different stripes.
func stripeOf(addr uintptr) uint32 {
	return uint32(uint64(addr) >> 11 * 0x9e3779b97f4a7c15 >> (64 - stripesLog))
}

// observeElsewhere tries a random other stripe for an event whose own stripe was locked or full:
// one goroutine's events may then fill every stripe, not just its own, before the drain.
func (t *Tracker) observeElsewhere(i uint32, e event) {
	s := &t.stripes[(i+1+rand.Uint32N(stripes-1))%stripes]
	if !s.add(e, t.wake) && !t.closed.Load() { // checked here only: Close leaves no room
		s.dropped.Add(1)
	}
}

// add appends e, or counts it in the last event when that is of the same key, unless s is locked
// or full, and asks for a drain when s is half full. Counting a hot key's run in place keeps its
// stripe from filling, so the drain wakes for it no more often than its tick.
func (s *stripe) add(e event, wake chan<- struct{}) bool {
	if !s.mu.TryLock() {
		return false
	}
	n := s.n
	if n > 0 {
		if last := &s.buf[n-1]; last.key == e.key && last.policy == e.policy && last.checks < math.MaxUint32 {
			last.checks++
			last.denials += e.denials
			s.mu.Unlock()
			return true
		}
	}
	if n >= len(s.buf) {
		s.mu.Unlock()
		return false
	}
	s.buf[n] = e
	s.n = n + 1
	half := n+1 == len(s.buf)/2
	s.mu.Unlock()
	if half {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return true
}

// Top returns the n keys checked most and the n denied most under policy in window w (at most
// Capacity each), after draining what Observe buffered. An unknown policy or Window gives Results
// with no events.
func (t *Tracker) Top(policy string, w Window, n int) (checked, denied Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.drain(false)
	return t.win.top(now, policy, w, n)
}

// Policies returns the policies with an event in window w, sorted, after draining what Observe
// buffered.
func (t *Tracker) Policies(w Window) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.drain(false)
	return t.win.names(now, w)
}

// Capacity is the counters per sketch (Config.Capacity): a list's error is at most its Total over it.
func (t *Tracker) Capacity() int { return t.win.k }

// Dropped returns how many events Observe dropped (the stripes full or locked), and the drain after
// it (beyond 4096 policies in the hour).
func (t *Tracker) Dropped() uint64 {
	n := t.overflow.Load()
	for i := range t.stripes {
		n += t.stripes[i].dropped.Load()
	}
	return n
}

// Flush drains every event Observe has buffered into the sketches now, instead of at the next
// tick.
func (t *Tracker) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drain(false)
}

// Close stops the drain goroutine, drains what Observe buffered and makes Observe a no-op. What
// was counted stays readable. Calling it again does nothing.
func (t *Tracker) Close() {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		close(t.done)
		<-t.exited
		t.mu.Lock()
		defer t.mu.Unlock()
		t.drain(true)
	})
}

func (t *Tracker) run() {
	defer close(t.exited)
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		case <-t.wake:
		}
		t.Flush()
	}
}

// drain moves every stripe's events into the sketches, stamped with the instant of the drain,
// which it returns. Closing, it leaves the stripes no buffer. t.mu must be held.
func (t *Tracker) drain(closing bool) int64 {
	now := t.startMs + time.Since(t.start).Milliseconds()
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		buf, n := s.buf, s.n
		switch {
		case closing:
			s.buf = nil
		case n > 0:
			s.buf = t.spare
		}
		s.n = 0
		s.mu.Unlock()
		if n == 0 {
			continue
		}
		// Outside the stripe's lock: Observe fills the new buffer meanwhile. A run of one key's
		// events, as one goroutine checking a hot key leaves, updates the sketches once.
		evs := buf[:n]
		for j := 0; j < len(evs); {
			e := &evs[j]
			var checks, denials int64
			for ; j < len(evs) && evs[j].key == e.key && evs[j].policy == e.policy; j++ {
				checks += int64(evs[j].checks)
				denials += int64(evs[j].denials)
			}
			if !t.win.addN(now, e.policy, e.key, checks, denials) {
				t.overflow.Add(uint64(checks))
			}
		}
		clear(buf[:n]) // let the keys go
		t.spare = buf
	}
	if b := now / minuteBucketMs; b != t.swept {
		t.swept = b
		t.win.sweep(now)
	}
	return now
}
