package batch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/batch"
)

var p = sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})

// keys is a call of the fake store: the keys of its checks, in order.
type keys []string

// fake runs calls after a delay, counting them, and replies with each check's index.
type fake struct {
	delay time.Duration
	runs  atomic.Int64
	gate  chan struct{} // when set, each run waits for it

	overlaps atomic.Int64 // checks sent while a call holding their key was in flight
	mu       sync.Mutex   // guards running
	running  map[string]int
}

func (f *fake) batcher(max, lanes int) *batch.Batcher[keys, int] {
	return batch.New(batch.Config[keys, int]{
		Max:     max,
		Lanes:   lanes,
		NewCall: func(int64, int) keys { return nil },
		Run: func(ctx context.Context, c keys) ([]int, error) {
			f.runs.Add(1)
			distinct := map[string]bool{}
			for _, k := range c {
				distinct[k] = true
			}
			for k := range distinct {
				if n := f.inFlight(k, 1); n > 1 {
					f.overlaps.Add(1)
				}
			}
			defer func() {
				for k := range distinct {
					f.inFlight(k, -1)
				}
			}()
			if f.gate != nil {
				select {
				case <-f.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			time.Sleep(f.delay)
			out := make([]int, len(c))
			for i := range out {
				out[i] = i
			}
			return out, nil
		},
	})
}

// inFlight adds d to the calls in flight holding key, and returns the new count.
func (f *fake) inFlight(key string, d int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == nil {
		f.running = map[string]int{}
	}
	f.running[key] += d
	return f.running[key]
}

func TestConcurrentChecksShareCalls(t *testing.T) {
	f := &fake{delay: 2 * time.Millisecond}
	b := f.batcher(32, 2)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				reply, i, err := check(b, context.Background(), "k")
				if err != nil || reply[i] != i {
					t.Errorf("reply %v, index %d, error %v", reply, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if runs := f.runs.Load(); runs > 64*20/4 {
		t.Errorf("%d calls for %d concurrent checks: they did not share calls", runs, 64*20)
	}
}

// Groups of several steps share calls, and each group's index in its call finds its own steps,
// whatever the groups it shared the call with.
func TestGroupsShareCalls(t *testing.T) {
	tests := []struct {
		name  string
		steps int
	}{
		{"oneStep", 1},
		{"twoSteps", 2},
		{"fiveSteps", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			b := batch.New(batch.Config[[]string, string]{
				Lanes:   2,
				NewCall: func(int64, int) []string { return nil },
				Run: func(ctx context.Context, c []string) ([]string, error) {
					runs.Add(1)
					time.Sleep(time.Millisecond)
					return c, nil // each step replies its own name
				},
			})
			const callers, each = 64, 10
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for j := range each {
						id := fmt.Sprint(g, "/", j)
						reply, i, err := b.Group(context.Background(), 0, tt.steps, p, "k", func(c []string) []string {
							for k := range tt.steps {
								c = append(c, fmt.Sprint(id, "#", k))
							}
							return c
						})
						if err != nil {
							t.Error(err)
							return
						}
						for k := range tt.steps {
							if got, want := reply[tt.steps*i+k], fmt.Sprint(id, "#", k); got != want {
								t.Errorf("group %s, step %d: reply %q", id, k, got)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			if n := runs.Load(); n > callers*each/4 {
				t.Errorf("%d calls for %d concurrent groups: they did not share calls", n, callers*each)
			}
		})
	}
}

// Checks of one key never reach the store in two calls at once, however many lanes there are;
// checks of keys in other lanes do not wait for them.
func TestHotKeyOneCallInFlight(t *testing.T) {
	f := &fake{delay: time.Millisecond}
	b := f.batcher(32, 4)
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Go(func() {
			key := "hot"
			if c%4 == 0 {
				key = fmt.Sprint("cold", c)
			}
			for range 20 {
				if _, _, err := check(b, context.Background(), key); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := f.overlaps.Load(); n != 0 {
		t.Errorf("%d calls were sent while another call of the same key was in flight", n)
	}
}

// Slots bound the calls in flight across lanes.
func TestSlotsBoundCallsInFlight(t *testing.T) {
	var inFlight, most atomic.Int64
	slots := make(chan struct{}, 2)
	b := batch.New(batch.Config[keys, int]{
		Lanes:   8,
		Slots:   slots,
		NewCall: func(int64, int) keys { return nil },
		Run: func(ctx context.Context, c keys) ([]int, error) {
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			return make([]int, len(c)), nil
		},
	})
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for range 10 {
				if _, _, err := check(b, context.Background(), fmt.Sprint("k", c)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("%d calls in flight at once, want at most 2 (the slots)", m)
	}
}

func TestLoneCheckRunsAtOnce(t *testing.T) {
	f := &fake{}
	b := f.batcher(32, 2)
	for range 10 {
		if _, _, err := check(b, context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if runs := f.runs.Load(); runs != 10 {
		t.Errorf("%d calls for 10 checks one after another, want 10", runs)
	}
}

// A batch gives up with its first caller: the check of a caller who gave up is never sent later.
func TestBatchGivesUpWithItsFirstCaller(t *testing.T) {
	f := &fake{gate: make(chan struct{})}
	b := f.batcher(32, 1)
	// Hold the only slot with a call that waits at the gate.
	held := make(chan struct{})
	go func() {
		check(b, context.Background(), "holder")
		close(held)
	}()
	for f.runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	errs := make(chan error, 2)
	go func() { _, _, err := check(b, short, "short"); errs <- err }()
	time.Sleep(5 * time.Millisecond)
	go func() { _, _, err := check(b, long, "long"); errs <- err }()
	for range 2 {
		if err := <-errs; !errors.Is(err, sluice.ErrUnavailable) {
			t.Errorf("error %v, want ErrUnavailable for both checks of the batch", err)
		}
		if err := short.Err(); err == nil {
			t.Error("a check returned before the first caller's deadline")
		}
	}
	close(f.gate)
	<-held
	if runs := f.runs.Load(); runs != 1 {
		t.Errorf("%d calls ran, want only the holder's: the batch whose caller gave up was sent", runs)
	}
}

// A caller's several groups (a CheckMany) join one call together, in order, beside other callers'
// groups; more groups than Max go out as one call of their own.
func TestManyGroupsOfOneCaller(t *testing.T) {
	tests := []struct {
		name  string
		count int
	}{
		{"one", 1},
		{"three", 3},
		{"moreThanMax", 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{delay: time.Millisecond}
			b := f.batcher(32, 1)
			const callers, each = 16, 10
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for j := range each {
						id := fmt.Sprint(g, "/", j)
						reply, first, err := b.Groups(context.Background(), 0, 1, tt.count, p, "k", func(c keys) keys {
							for k := range tt.count {
								c = append(c, fmt.Sprint(id, "#", k))
							}
							return c
						})
						if err != nil {
							t.Error(err)
							return
						}
						if len(reply) < first+tt.count {
							t.Errorf("%s: reply of %d for groups %d..%d", id, len(reply), first, first+tt.count-1)
							return
						}
						for k := range tt.count {
							if reply[first+k] != first+k {
								t.Errorf("%s: group %d answered %d", id, first+k, reply[first+k])
							}
						}
					}
				})
			}
			wg.Wait()
			if tt.count <= 32 && f.runs.Load() >= callers*each {
				t.Errorf("%d calls for %d concurrent callers: they did not share calls", f.runs.Load(), callers*each)
			}
		})
	}
}

// check decides one check of key, a group of one step, in a batch of b.
func check(b *batch.Batcher[keys, int], ctx context.Context, key string) ([]int, int, error) {
	return b.Group(ctx, 0, 1, p, key, func(c keys) keys { return append(c, key) })
}
