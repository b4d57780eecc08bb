package streamtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/stream"
)

// windowsAndDecisions appends to two streams, retries an append, processes in small batches
// across a restart, and checks the windows, the decision, late events, Stats and a reset.
func windowsAndDecisions(t *testing.T, h Harness) {
	var b stream.Backend = h.Backend
	ctx := context.Background()
	q := stream.Query{Name: "rl", Stream: "req", WindowMs: 1000, IdleFlushMs: 500, Quota: 3}
	if err := b.Register(ctx, q); err != nil {
		t.Fatal(err)
	}
	var evs []stream.Event
	for i := range 5 {
		evs = append(evs, stream.Event{Stream: "req", Key: "noisy", At: T0 + int64(i)*100, ID: fmt.Sprint("n", i)})
	}
	evs = append(evs, stream.Event{Stream: "req", Key: "quiet", At: T0 + 10, Cost: 4, ID: "q0"},
		stream.Event{Stream: "other", Key: "noisy", At: T0})
	if err := b.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	// A retried append adds nothing.
	if err := b.Append(ctx, evs[:3]); err != nil {
		t.Fatal(err)
	}
	if n := ProcessAll(t, b, q, T0, 2); n != 6 {
		t.Fatalf("processed %d events, want 6", n)
	}
	if ws, _ := b.Windows(ctx, "req", 0, 0); len(ws) != 0 {
		t.Fatalf("windows before any closed: %+v", ws)
	}
	// A restart resumes from the stored state; the idle flush closes both windows.
	b = h.Reopen()
	if _, err := b.Process(ctx, q, T0+1500, 0); err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(ctx, "req", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].Key != "noisy" || ws[0].Count != 5 || ws[1].Key != "quiet" || ws[1].Sum != 4 || ws[0].Offset >= ws[1].Offset {
		t.Fatalf("windows %+v", ws)
	}
	if more, _ := b.Windows(ctx, "req", ws[0].Offset, 0); len(more) != 1 || more[0] != ws[1] {
		t.Fatalf("windows after %d: %+v", ws[0].Offset, more)
	}
	ds, err := b.Decisions(ctx, "req", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := stream.Decision{Query: "rl", Stream: "req", Key: "noisy", WindowStart: T0, WindowEnd: T0 + 1000, Count: 5, Quota: 3, OverBy: 2}
	if len(ds) != 1 || ds[0].Offset == 0 {
		t.Fatalf("decisions %+v", ds)
	}
	ds[0].Offset = 0
	if ds[0] != want {
		t.Fatalf("decision %+v, want %+v", ds[0], want)
	}
	// A late event is counted as late, not dropped, and emits nothing.
	if err := b.Append(ctx, []stream.Event{{Stream: "req", Key: "noisy", At: T0 + 1}}); err != nil {
		t.Fatal(err)
	}
	ProcessAll(t, b, q, T0+1500, 0)
	st, err := b.Stats(ctx, "rl")
	if err != nil {
		t.Fatal(err)
	}
	// Another stream's event took an offset too: Events counts only this stream's.
	if st.Late != 1 || st.LateSum != 1 || st.Open != 0 || st.Events != 7 || st.Offset <= 7 {
		t.Fatalf("stats %+v", st)
	}
	// A changed definition is refused until reset; the reset run starts over the log.
	q2 := q
	q2.Quota = 4
	if _, err := b.Process(ctx, q2, T0, 0); !errors.Is(err, stream.ErrQueryChanged) {
		t.Fatalf("changed query: %v", err)
	}
	if err := b.Reset(ctx, "rl"); err != nil {
		t.Fatal(err)
	}
	if n := ProcessAll(t, b, q2, T0+5000, 0); n != 7 {
		t.Fatalf("after reset processed %d, want 7", n)
	}
	// The reset run's window over quota was decided already: no second decision for it.
	if ds, _ := b.Decisions(ctx, "req", 0, 0); len(ds) != 1 || ds[0].Quota != 3 || ds[0].Count != 5 {
		t.Fatalf("decisions after reset %+v", ds)
	}
}

// invalid sends bad events and queries, which name their field, and calls after Close.
func invalid(t *testing.T, h Harness) {
	b := h.Backend
	ctx := context.Background()
	for _, tc := range []struct {
		field string
		e     stream.Event
	}{
		{"events[1].stream", stream.Event{Key: "k"}},
		{"events[1].key", stream.Event{Stream: "s"}},
		{"events[1].cost", stream.Event{Stream: "s", Key: "k", Cost: -1}},
		{"events[1].key", stream.Event{Stream: "s", Key: "a\x00b"}},
		{"events[1].key", stream.Event{Stream: "s", Key: "\xff"}},
		{"events[1].key", stream.Event{Stream: "s", Key: strings.Repeat("k", sluice.MaxKeyLen+1)}},
		{"events[1].id", stream.Event{Stream: "s", Key: "k", ID: "\xfe"}},
	} {
		err := b.Append(ctx, []stream.Event{{Stream: "s", Key: "k"}, tc.e})
		var ie *sluice.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
	if _, err := b.Process(ctx, stream.Query{Name: "q", Stream: "s"}, 0, 0); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("invalid query: %v", err)
	}
	if n, err := b.Process(ctx, stream.Query{Name: "q", Stream: "s", WindowMs: 1}, 0, 0); err != nil || n != 0 {
		t.Errorf("nothing appended: %d %v", n, err)
	}
	b.Close()
	if err := b.Append(ctx, []stream.Event{{Stream: "s", Key: "k"}}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

// resetPublishesNoSecondDecision resets a query and runs it again over the same log under a
// new definition: (query, key, windowStart) identifies a decision, so a window already decided
// keeps its first decision, while the run's other windows over quota are decided as usual and
// all its windows are emitted.
func resetPublishesNoSecondDecision(t *testing.T, open Open) {
	type dec struct {
		key          string
		start, quota int64 // start relative to T0
	}
	first := stream.Query{Name: "rl", Stream: "req", WindowMs: 1000, IdleFlushMs: 1, Quota: 3}
	for _, tc := range []struct {
		name          string
		windowMs      int64
		quota         int64
		want          []dec // every decision after the reset run, by key and start
		windowsOfRun2 int
	}{
		{name: "quota raised", windowMs: 1000, quota: 5, want: []dec{{"a", 0, 3}}, windowsOfRun2: 2},
		{name: "quota lowered", windowMs: 1000, quota: 2, want: []dec{{"a", 0, 3}, {"b", 0, 2}}, windowsOfRun2: 2},
		{name: "same definition", windowMs: 1000, quota: 3, want: []dec{{"a", 0, 3}}, windowsOfRun2: 2},
		{name: "shorter windows", windowMs: 500, quota: 1, want: []dec{{"a", 0, 3}, {"a", 500, 1}, {"b", 0, 1}}, windowsOfRun2: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t).Backend
			ctx := context.Background()
			// b first: a's later events raise the watermark past b's shorter windows.
			var evs []stream.Event
			for _, at := range []int64{0, 100, 200} {
				evs = append(evs, stream.Event{Stream: "req", Key: "b", At: T0 + at})
			}
			for _, at := range []int64{0, 100, 200, 300, 400, 600, 700} {
				evs = append(evs, stream.Event{Stream: "req", Key: "a", At: T0 + at})
			}
			if err := b.Append(ctx, evs); err != nil {
				t.Fatal(err)
			}
			ProcessAll(t, b, first, T0+10_000, 0)
			before, err := b.Windows(ctx, "req", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Reset(ctx, first.Name); err != nil {
				t.Fatal(err)
			}
			second := first
			second.WindowMs, second.Quota = tc.windowMs, tc.quota
			ProcessAll(t, b, second, T0+10_000, 0)

			ws, err := b.Windows(ctx, "req", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(ws) - len(before); got != tc.windowsOfRun2 {
				t.Errorf("the reset run emitted %d windows, want %d: %+v", got, tc.windowsOfRun2, ws)
			}
			ds, err := b.Decisions(ctx, "req", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []dec
			for _, d := range ds {
				got = append(got, dec{d.Key, d.WindowStart - T0, d.Quota})
			}
			slices.SortFunc(got, func(x, y dec) int {
				return cmp.Or(strings.Compare(x.key, y.key), cmp.Compare(x.start, y.start))
			})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("decisions %v, want %v", got, tc.want)
			}
		})
	}
}
