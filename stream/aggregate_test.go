package stream

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
)

const t0 int64 = 1_700_000_000_000 // a multiple of 1000: window boundaries fall on it

func TestQueryValidate(t *testing.T) {
	ok := Query{Name: "q", Stream: "s", WindowMs: 1000}
	for _, tc := range []struct {
		field string
		edit  func(*Query)
	}{
		{"name", func(q *Query) { q.Name = "" }},
		{"stream", func(q *Query) { q.Stream = "" }},
		{"windowMs", func(q *Query) { q.WindowMs = 0 }},
		{"graceMs", func(q *Query) { q.GraceMs = -1 }},
		{"idleFlushMs", func(q *Query) { q.IdleFlushMs = -1 }},
		{"quota", func(q *Query) { q.Quota = -1 }},
	} {
		q := ok
		tc.edit(&q)
		err := q.Validate()
		var ie *sluice.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAggregator(t *testing.T) {
	ev := func(key string, at int64) Event { return Event{Key: key, At: t0 + at} }
	win := func(key string, start, count int64) Window {
		return Window{Query: "q", Stream: "s", Key: key, Start: t0 + start, End: t0 + start + 1000, Count: count, Sum: count}
	}
	type step struct {
		events []Event
		now    int64 // relative to t0
		closed []Window
	}
	for _, tc := range []struct {
		name          string
		grace, idle   int64
		steps         []step
		late, lateSum int64
	}{
		{name: "watermark closes a window when it reaches the end",
			steps: []step{
				{events: []Event{ev("a", 0), ev("a", 999), ev("b", 500)}},
				{events: []Event{ev("a", 1000)}, closed: []Window{win("a", 0, 2), win("b", 0, 1)}},
			}},
		{name: "grace holds the window open for stragglers",
			grace: 300,
			steps: []step{
				{events: []Event{ev("a", 100), ev("a", 1200), ev("a", 900)}},
				{events: []Event{ev("a", 1299)}},
				{events: []Event{ev("a", 1300)}, closed: []Window{win("a", 0, 2)}},
			}},
		{name: "late events are counted, not dropped",
			steps: []step{
				{events: []Event{ev("a", 0), ev("a", 2000), ev("a", 10), Event{Key: "b", At: t0 + 5, Cost: 7}},
					closed: []Window{win("a", 0, 1)}},
			}, late: 2, lateSum: 8},
		{name: "idle flush closes a quiet key's window",
			idle: 800,
			steps: []step{
				{events: []Event{ev("a", 100)}, now: 1799},
				{now: 1800, closed: []Window{win("a", 0, 1)}},
				{events: []Event{ev("a", 900)}, now: 1800},
			}, late: 1, lateSum: 1},
		{name: "a clock running backwards reopens nothing",
			idle: 100,
			steps: []step{
				{events: []Event{ev("a", 0)}, now: 5000, closed: []Window{win("a", 0, 1)}},
				{events: []Event{ev("a", 4000)}, now: 1000},
				{now: 5099},
				{now: 5100, closed: []Window{win("a", 4000, 1)}},
			}},
		{name: "no idle flush without IdleFlushMs",
			steps: []step{{events: []Event{ev("a", 0)}, now: 1 << 40}}},
		{name: "closed windows come out ordered by end, then key",
			steps: []step{
				{events: []Event{ev("z", 0), ev("m", 0), ev("a", 0), ev("a", 1000), ev("a", 2500)},
					closed: []Window{win("a", 0, 1), win("m", 0, 1), win("z", 0, 1), win("a", 1000, 1)}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAggregator(Query{Name: "q", Stream: "s", WindowMs: 1000, GraceMs: tc.grace, IdleFlushMs: tc.idle})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				for _, e := range s.events {
					a.Add(e)
				}
				got := a.Close(t0 + s.now)
				if len(got) != 0 || len(s.closed) != 0 {
					if !reflect.DeepEqual(got, s.closed) {
						t.Fatalf("step %d: closed\n got %+v\nwant %+v", i, got, s.closed)
					}
				}
			}
			if st := a.Stats(); st.Late != tc.late || st.LateSum != tc.lateSum {
				t.Fatalf("late %d (sum %d), want %d (%d)", st.Late, st.LateSum, tc.late, tc.lateSum)
			}
		})
	}
}

func TestWindowStartNegative(t *testing.T) {
	for _, tc := range []struct{ at, want int64 }{{0, 0}, {999, 0}, {1000, 1000}, {-1, -1000}, {-1000, -1000}} {
		if got := windowStart(tc.at, 1000); got != tc.want {
			t.Errorf("windowStart(%d) = %d, want %d", tc.at, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	w := Window{Key: "k", Start: 0, End: 10, Count: 6}
	q := func(quota int64) Query { return Query{Name: "q", Stream: "s", WindowMs: 10, Quota: quota} }
	if d, ok := q(5).Decide(w); !ok || d.OverBy != 1 || d.Count != 6 || d.Quota != 5 || d.WindowEnd != 10 {
		t.Fatalf("gate over quota: %+v %v", d, ok)
	}
	if _, ok := q(6).Decide(w); ok {
		t.Fatal("a window at quota is not throttled")
	}
	if _, ok := q(0).Decide(w); ok {
		t.Fatal("quota 0 gates nothing")
	}
}

// TestRestore folds one batch on an aggregator restored from stored state holding only the open
// windows HorizonAfter says the batch may touch, as a backend storing windows does, and checks
// that it closes and changes what one aggregator folding everything in memory does.
func TestRestore(t *testing.T) {
	q := Query{Name: "q", Stream: "s", WindowMs: 1000, GraceMs: 200, IdleFlushMs: 5000}
	ev := func(key string, at int64) Event { return Event{Key: key, At: t0 + at} }
	// e's second window is stored and open, and the batch neither closes it nor lands in it.
	first := []Event{ev("a", 100), ev("b", 300), ev("c", 900), ev("a", 1100), ev("e", 2050)}
	batch := []Event{ev("a", 1500), ev("b", 2300), ev("a", 1800), ev("c", 100)}
	const now = t0 + 2000

	whole, _ := NewAggregator(q)
	for _, e := range slices.Concat(first, batch) {
		whole.Add(e)
	}
	wantClosed := whole.Close(now)

	// The stored state after the first events: its stats and all its open windows.
	stored, _ := NewAggregator(q)
	for _, e := range first {
		stored.Add(e)
	}
	st := stored.Stats()
	open := stored.Changed()
	if len(open) != 5 {
		t.Fatalf("stored open windows %+v", open)
	}

	a, _ := NewAggregator(q)
	a.Restore(st, nil)
	before := a.Stats()
	bound := a.HorizonAfter(batch, now)
	if want := t0 + 2300 - q.GraceMs; bound != want {
		t.Fatalf("HorizonAfter = %d, want %d", bound-t0, want-t0)
	}
	if a.Stats() != before {
		t.Fatalf("HorizonAfter changed the state: %+v, was %+v", a.Stats(), before)
	}
	keys := map[string]bool{}
	for _, e := range batch {
		keys[e.Key] = true
	}
	var load []Window
	for _, w := range open {
		if w.End <= bound || (keys[w.Key] && w.End > st.Horizon) {
			w.Query, w.Stream = "", "" // a store need not keep them: Restore sets them
			load = append(load, w)
		}
	}
	if len(load) != 4 {
		t.Fatalf("loaded %+v, want all but e's", load)
	}
	a.Restore(st, load)
	if len(a.Changed()) != 0 {
		t.Fatalf("changed right after Restore: %+v", a.Changed())
	}
	for _, e := range batch {
		a.Add(e)
	}
	if got := a.Close(now); !reflect.DeepEqual(got, wantClosed) {
		t.Fatalf("closed\n got %+v\nwant %+v", got, wantClosed)
	}
	if got, want := a.Stats(), whole.Stats(); got.Horizon != want.Horizon || got.MaxAt != want.MaxAt || got.Late != want.Late || got.LateSum != want.LateSum {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	changed := a.Changed()
	slices.SortFunc(changed, func(x, y Window) int { return cmp.Or(cmp.Compare(x.Key, y.Key), cmp.Compare(x.Start, y.Start)) })
	want := []Window{{Query: "q", Stream: "s", Key: "b", Start: t0 + 2000, End: t0 + 3000, Count: 1, Sum: 1}}
	if !reflect.DeepEqual(changed, want) {
		t.Fatalf("changed %+v, want %+v", changed, want)
	}
}
