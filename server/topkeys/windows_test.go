package topkeys

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// t0 starts a bucket of both windows (2025-12-02 10:40 UTC).
const t0 = 1_764_672_000_000

const (
	second = 1000
	minute = 60 * second
)

// counted returns the checks of key under policy in window w at now.
func counted(ws *windows, now int64, policy, key string, w Window) int64 {
	checked, _ := ws.top(now, policy, w, ws.k)
	for _, c := range checked.Keys {
		if c.Key == key {
			return c.Count
		}
	}
	return 0
}

// The boundaries the package doc promises: Minute counts an event for at least 50 s and less than
// 60 s, Hour for at least 55 min and less than 60 min, by where the event and now fall in their
// buckets.
func TestWindowBoundaries(t *testing.T) {
	tests := []struct {
		name         string
		at, now      int64
		minute, hour bool
	}{
		{"just now", t0, t0, true, true},
		{"an event of a later bucket than now: not yet", t0 + 5*minute, t0 + 5*minute - 1, false, false},
		{"50 s ago, the event late in its bucket", t0 + 9_999, t0 + 9_999 + 50*second, true, true},
		{"50.001 s ago, the event late in its bucket", t0 + 9_999, t0 + 10_000 + 50*second, false, true},
		{"59 s ago, now late in its bucket", t0, t0 + 59*second, true, true},
		{"59.999 s ago, the event early in its bucket", t0, t0 + 60*second - 1, true, true},
		{"59 s ago, now early in its bucket", t0 + 9*second, t0 + 68*second, false, true},
		{"60 s ago", t0, t0 + 60*second, false, true},
		{"55 min ago, the event late in its bucket", t0 + 5*minute - 1, t0 + 60*minute - 1, false, true},
		{"55 min 1 ms ago, the event late in its bucket", t0 + 5*minute - 1, t0 + 60*minute, false, false},
		{"59 min 59.999 s ago, the event early in its bucket", t0, t0 + 60*minute - 1, false, true},
		{"60 min ago", t0, t0 + 60*minute, false, false},
		{"61 min ago", t0, t0 + 61*minute, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := newWindows(8)
			ws.add(tt.at, "api", "k", false)
			if got := counted(ws, tt.now, "api", "k", Minute) == 1; got != tt.minute {
				t.Errorf("in Minute: %v, want %v", got, tt.minute)
			}
			if got := counted(ws, tt.now, "api", "k", Hour) == 1; got != tt.hour {
				t.Errorf("in Hour: %v, want %v", got, tt.hour)
			}
			if got := len(ws.names(tt.now, Minute)) == 1; got != tt.minute {
				t.Errorf("listed by names(Minute): %v, want %v", got, tt.minute)
			}
		})
	}
}

func TestWindowsLists(t *testing.T) {
	type event struct {
		at     int64
		key    string
		denied bool
	}
	tests := []struct {
		name                   string
		events                 []event
		w                      Window
		checked, denied        []Count
		checkedTotal, deniedTo int64
	}{
		{
			name:    "a denial is a check too",
			events:  []event{{t0, "a", true}, {t0, "a", false}, {t0, "b", false}},
			w:       Minute,
			checked: []Count{{"a", 2, 0}, {"b", 1, 0}}, checkedTotal: 3,
			denied: []Count{{"a", 1, 0}}, deniedTo: 1,
		},
		{
			name:    "no denials: an empty list",
			events:  []event{{t0, "a", false}},
			w:       Hour,
			checked: []Count{{"a", 1, 0}}, checkedTotal: 1,
			denied: []Count{},
		},
		{
			name:    "Minute sums its buckets",
			events:  []event{{t0, "a", true}, {t0 + 10*second, "a", true}, {t0 + 20*second, "b", false}, {t0 + 45*second, "b", false}},
			w:       Minute,
			checked: []Count{{"a", 2, 0}, {"b", 2, 0}}, checkedTotal: 4,
			denied: []Count{{"a", 2, 0}}, deniedTo: 2,
		},
		{
			name:    "Hour holds what Minute has, and what it has let go",
			events:  []event{{t0, "a", true}, {t0 + 10*minute, "b", false}, {t0 + 45*minute, "b", true}},
			w:       Hour,
			checked: []Count{{"b", 2, 0}, {"a", 1, 0}}, checkedTotal: 3,
			denied: []Count{{"a", 1, 0}, {"b", 1, 0}}, deniedTo: 2,
		},
		{
			name:    "Minute at the hour's last event",
			events:  []event{{t0, "a", true}, {t0 + 10*minute, "b", false}, {t0 + 45*minute, "b", true}},
			w:       Minute,
			checked: []Count{{"b", 1, 0}}, checkedTotal: 1,
			denied: []Count{{"b", 1, 0}}, deniedTo: 1,
		},
		{
			name:    "ties by key",
			events:  []event{{t0, "c", false}, {t0, "a", false}, {t0, "b", false}},
			w:       Minute,
			checked: []Count{{"a", 1, 0}, {"b", 1, 0}, {"c", 1, 0}}, checkedTotal: 3,
			denied: []Count{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := newWindows(8)
			var now int64
			for _, e := range tt.events {
				ws.add(e.at, "api", e.key, e.denied)
				now = e.at
			}
			checked, denied := ws.top(now, "api", tt.w, 10)
			want := Result{Total: tt.checkedTotal, Keys: tt.checked}
			if fmt.Sprint(checked) != fmt.Sprint(want) {
				t.Errorf("checked = %v, want %v", checked, want)
			}
			want = Result{Total: tt.deniedTo, Keys: tt.denied}
			if fmt.Sprint(denied) != fmt.Sprint(want) || denied.Keys == nil {
				t.Errorf("denied = %#v, want %v", denied, want)
			}
		})
	}
}

func TestWindowsTopOfNothing(t *testing.T) {
	ws := newWindows(8)
	ws.add(t0, "api", "k", true)
	tests := []struct {
		name   string
		policy string
		w      Window
		n      int
	}{
		{"unknown policy", "other", Minute, 10},
		{"unknown window", "api", Window(7), 10},
		{"n of 0", "api", Minute, 0},
		{"negative n", "api", Hour, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checked, denied := ws.top(t0, tt.policy, tt.w, tt.n)
			if checked.Keys == nil || denied.Keys == nil || len(checked.Keys)+len(denied.Keys) != 0 {
				t.Errorf("lists %#v and %#v, want empty ones", checked.Keys, denied.Keys)
			}
		})
	}
	if got := ws.names(t0, Window(-1)); got == nil || len(got) != 0 {
		t.Errorf("names of an unknown window: %#v", got)
	}
}

// An event older than a ring's span, whose slot a later bucket holds, counts nowhere: it is out of
// every window a later instant can ask about. A clock that goes back does that; the Tracker's does
// not.
func TestWindowsLateEvent(t *testing.T) {
	ws := newWindows(8)
	now := int64(t0 + 60*minute)
	ws.add(now, "api", "new", false)
	ws.add(t0, "api", "old", true) // the slot of both rings that now's bucket holds
	ws.add(now-5*minute, "api", "recent", false)
	checked, denied := ws.top(now, "api", Hour, 10)
	if got := fmt.Sprint(checked, denied); got != "{2 0 [{new 1 0} {recent 1 0}]} {0 0 []}" {
		t.Errorf("Hour = %s", got)
	}
}

// Buckets merged into a window keep the sketch's guarantees against the window's true counts.
func TestWindowsMergeBounds(t *testing.T) {
	const k = 32
	tests := []struct {
		name  string
		w     Window
		span  int64 // the events spread evenly over it, ending at now
		skew  float64
		keys  uint64
		count int
	}{
		{"Minute, skewed", Minute, 60 * second, 1.3, 5000, 30_000},
		{"Minute, flat", Minute, 60 * second, 1.01, 100_000, 30_000},
		{"Hour, skewed", Hour, 70 * minute, 1.2, 20_000, 30_000},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := newWindows(k)
			stream := zipf(uint64(100+i), tt.count, tt.skew, tt.keys)
			now := int64(t0 + 2*60*minute)
			var inWindow []string
			id, n := now/minuteBucketMs, int64(minuteBuckets)
			if tt.w == Hour {
				id, n = now/hourBucketMs, hourBuckets
			}
			for j, key := range stream {
				at := now - tt.span + tt.span*int64(j)/int64(len(stream))
				ws.add(at, "api", key, false)
				width := int64(minuteBucketMs)
				if tt.w == Hour {
					width = hourBucketMs
				}
				if at/width > id-n {
					inWindow = append(inWindow, key)
				}
			}
			checked, _ := ws.top(now, "api", tt.w, k)
			checkEstimates(t, checked.Keys, exact(inWindow), checked.Total, checked.ErrorBound, k)
			if checked.ErrorBound == 0 {
				t.Error("error bound 0: the buckets never filled, the test tests nothing")
			}
		})
	}
}

// A policy with no event left in the hour goes, so that renamed policies do not pile up.
func TestWindowsSweep(t *testing.T) {
	ws := newWindows(8)
	ws.add(t0, "old", "k", true)
	ws.add(t0+30*minute, "new", "k", false)
	tests := []struct {
		name string
		now  int64
		want []string
	}{
		{"both in the hour", t0 + 50*minute, []string{"new", "old"}},
		{"old gone", t0 + 61*minute, []string{"new"}},
		{"both gone", t0 + 91*minute, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws.sweep(tt.now)
			var got []string
			for name := range ws.policies {
				got = append(got, name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("policies held %v, want %v", got, tt.want)
			}
			if names := ws.names(tt.now, Hour); !slices.Equal(names, tt.want) {
				t.Errorf("names(Hour) = %v, want %v", names, tt.want)
			}
		})
	}
	ws.add(t0+100*minute, "old", "k", false)
	if got := counted(ws, t0+100*minute, "old", "k", Hour); got != 1 {
		t.Errorf("a policy back after its sweep counts %d, want 1", got)
	}
}

func TestWindowsMaxPolicies(t *testing.T) {
	ws := newWindows(1)
	for i := range maxPolicies {
		if !ws.add(t0, fmt.Sprint("p", i), "k", false) {
			t.Fatalf("policy %d dropped", i)
		}
	}
	if ws.add(t0, "one more", "k", false) {
		t.Error("a policy past maxPolicies counted")
	}
	if !ws.add(t0, "p0", "k2", false) {
		t.Error("an event of a held policy dropped")
	}
	ws.sweep(t0 + 61*minute)
	if !ws.add(t0+61*minute, "one more", "k", false) {
		t.Error("a new policy dropped after the sweep")
	}
}

// A flood of distinct keys, spread over the hour so that every bucket fills, keeps the heap within
// the bound of the package doc.
func TestFloodMemory(t *testing.T) {
	events := 1_000_000
	if raceEnabled {
		events = 200_000
	}
	ws := newWindows(DefaultCapacity)
	key := []byte(strings.Repeat("k", 64))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range events {
		strconv.AppendInt(key[:48], int64(i), 16) // 64 bytes, distinct
		ws.add(t0+int64(i)*(90*minute)/int64(events), "api", string(key), i%2 == 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ws)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	// (6+12) buckets × 2 sketches × 128 counters × (bytes per counter + the key's 64).
	bound := int64((minuteBuckets + hourBuckets) * 2 * DefaultCapacity * (bytesPerCounter + 64))
	t.Logf("heap grew %d bytes for %d distinct keys; bound %d", grew, events, bound)
	if grew > bound {
		t.Errorf("heap grew %d bytes, more than %d", grew, bound)
	}
}

// bytesPerCounter bounds a counter's heap, its key aside: BenchmarkMemory measures 67.
const bytesPerCounter = 80
