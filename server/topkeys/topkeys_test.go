package topkeys

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
)

func newTest(t *testing.T, cfg Config, kn knobs) *Tracker {
	t.Helper()
	tr, err := newTracker(cfg, kn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func TestNewCapacity(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		want     int // the sketches' k, or 0 for an error
	}{
		{"zero is the default", 0, DefaultCapacity},
		{"one", 1, 1},
		{"the most", 4096, 4096},
		{"negative", -1, 0},
		{"too many", 4097, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(Config{Capacity: tt.capacity})
			if tt.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "Capacity") || !errors.Is(err, sluice.ErrInvalid) {
					t.Fatalf("err = %v, want an invalid Capacity", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if tr.win.k != tt.want {
				t.Errorf("k = %d, want %d", tr.win.k, tt.want)
			}
		})
	}
}

func TestTrackerTop(t *testing.T) {
	tr := newTest(t, Config{Capacity: 4}, knobs{events: stripeEvents})
	for i := range 10 { // a run the drain counts at once
		tr.Observe("api", "hot", i < 3)
	}
	tr.Observe("login", "hot", false) // the same key under another policy ends the run
	tr.Observe("api", "cold", false)
	tr.Observe("login", "mallory", true)
	tests := []struct {
		name            string
		policy          string
		w               Window
		n               int
		checked, denied string
	}{
		{"minute", "api", Minute, 10, "{11 0 [{hot 10 0} {cold 1 0}]}", "{3 0 [{hot 3 0}]}"},
		{"hour", "api", Hour, 10, "{11 0 [{hot 10 0} {cold 1 0}]}", "{3 0 [{hot 3 0}]}"},
		{"top 1", "api", Minute, 1, "{11 0 [{hot 10 0}]}", "{3 0 [{hot 3 0}]}"},
		{"another policy", "login", Minute, 10, "{2 0 [{hot 1 0} {mallory 1 0}]}", "{1 0 [{mallory 1 0}]}"},
		{"unknown policy", "nope", Minute, 10, "{0 0 []}", "{0 0 []}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checked, denied := tr.Top(tt.policy, tt.w, tt.n)
			if got := fmt.Sprint(checked); got != tt.checked {
				t.Errorf("checked = %s, want %s", got, tt.checked)
			}
			if got := fmt.Sprint(denied); got != tt.denied {
				t.Errorf("denied = %s, want %s", got, tt.denied)
			}
		})
	}
	if got := tr.Policies(Minute); fmt.Sprint(got) != "[api login]" {
		t.Errorf("Policies = %v", got)
	}
	if tr.Dropped() != 0 {
		t.Errorf("Dropped = %d", tr.Dropped())
	}
}

func TestClose(t *testing.T) {
	tr := newTest(t, Config{}, knobs{events: stripeEvents})
	tr.Observe("api", "k", true) // buffered: Close drains it
	tr.Close()
	tr.Close()
	for range 10_000 {
		tr.Observe("api", "k", true)
	}
	tr.Flush()
	checked, denied := tr.Top("api", Minute, 10)
	if checked.Total != 1 || denied.Total != 1 {
		t.Errorf("after Close: %d checks and %d denials, want the 1 before", checked.Total, denied.Total)
	}
	if tr.Dropped() != 0 {
		t.Errorf("Observe after Close counted %d drops", tr.Dropped())
	}
	select {
	case <-tr.exited:
	default:
		t.Error("the drain goroutine runs on after Close")
	}
}

// Whatever Observe keeps reaches the sketches, and what it does not is counted in Dropped.
func TestDropped(t *testing.T) {
	tests := []struct {
		name     string
		events   int // per stripe
		observed int
	}{
		{"a buffer of one", 1, 10_000},
		{"a buffer of two", 2, 10_000},
		{"room for all", 256, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTest(t, Config{}, knobs{events: tt.events, manual: true})
			for i := range tt.observed {
				tr.Observe("api", fmt.Sprint(i%10), false)
			}
			dropped := tr.Dropped()
			checked, _ := tr.Top("api", Hour, 10)
			if checked.Total+int64(dropped) != int64(tt.observed) {
				t.Errorf("%d counted + %d dropped, want %d observed", checked.Total, dropped, tt.observed)
			}
			if tt.observed <= stripes*tt.events/4 && dropped != 0 {
				t.Errorf("%d dropped with room to spare", dropped)
			}
		})
	}
}

// A run of one key's checks is counted in its stripe's last event: a hot key never fills a buffer.
func TestHotKeyRun(t *testing.T) {
	tr := newTest(t, Config{}, knobs{events: 1, manual: true})
	for i := range 10_000 {
		tr.Observe("api", "hot", i%4 == 0)
	}
	checked, denied := tr.Top("api", Minute, 1)
	if tr.Dropped() != 0 || checked.Total != 10_000 || denied.Total != 2500 || checked.Keys[0].Count != 10_000 {
		t.Errorf("%d dropped, %d checks and %d denials counted; want 0, 10000 and 2500", tr.Dropped(), checked.Total, denied.Total)
	}
}

func TestObserveAllocs(t *testing.T) {
	tr := newTest(t, Config{}, knobs{events: stripeEvents})
	key := "tenant-42"
	if n := testing.AllocsPerRun(1000, func() { tr.Observe("api", key, true) }); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}

// Many goroutines observe while others read; run with -race. Every event is counted or dropped.
func TestConcurrent(t *testing.T) {
	tr := newTest(t, Config{Capacity: 16}, knobs{events: 64})
	const writers, each = 8, 20_000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, p := range tr.Policies(Minute) {
				tr.Top(p, Hour, 5)
			}
			tr.Dropped()
		}
	})
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tr.Observe(fmt.Sprint("p", w%3), fmt.Sprint("k", i%100), i%4 == 0)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	var total int64
	for _, p := range tr.Policies(Hour) {
		checked, _ := tr.Top(p, Hour, 5)
		total += checked.Total
	}
	if got := total + int64(tr.Dropped()); got != writers*each {
		t.Errorf("%d counted + %d dropped, want %d", total, tr.Dropped(), writers*each)
	}
}

// Goroutines started together get stacks side by side, 2 KiB apart at first: each must get a
// stripe of its own, or two of them take turns at one lock on every check.
func TestStacksSideBySideApart(t *testing.T) {
	tests := []struct {
		name string
		base uintptr
	}{
		{"heap arena", 0xc000000000},
		{"unaligned", 0xc000123800},
		{"mmap", 0x7f12_3456_7800},
		{"1 TiB", 1 << 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := make(map[uint32]bool)
			for i := range uintptr(256) {
				a := tt.base + i*2048
				if stripeOf(a) == stripeOf(a+2048) {
					t.Errorf("stacks at %#x and %#x: both stripe %d", a, a+2048, stripeOf(a))
				}
				seen[stripeOf(a)] = true
			}
			if len(seen) != stripes {
				t.Errorf("256 stacks use %d of the %d stripes", len(seen), stripes)
			}
		})
	}
}

// Past maxPolicies, a new policy's events are dropped by the drain, and counted.
func TestDroppedPastMaxPolicies(t *testing.T) {
	tr := newTest(t, Config{Capacity: 1}, knobs{events: 256, manual: true})
	for i := range maxPolicies + 3 {
		tr.Observe(fmt.Sprint("p", i), "k", false)
		if i%1000 == 0 {
			tr.Flush()
		}
	}
	if got := len(tr.Policies(Hour)); got != maxPolicies || tr.Dropped() != 3 {
		t.Errorf("%d policies held, %d events dropped; want %d and 3", got, tr.Dropped(), maxPolicies)
	}
}
