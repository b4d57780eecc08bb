package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// backends runs f against the memory engine and the PostgreSQL engine; reopen gives a new
// handle on the same state (a restart, for PostgreSQL).
func backends(t *testing.T, f func(t *testing.T, b Backend, reopen func() Backend)) {
	t.Run("memory", func(t *testing.T) {
		m := NewMemory()
		f(t, m, func() Backend { return m })
	})
	t.Run("postgres", func(t *testing.T) {
		e, pool, schema := pgEngine(t)
		f(t, e, func() Backend {
			e2, err := New(pool, Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return e2
		})
	})
}

func mustProcessAll(t *testing.T, b Backend, q Query, now int64, batch int) int {
	t.Helper()
	total := 0
	for {
		n, err := b.Process(context.Background(), q, now, batch)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

func TestEngineWindowsAndDecisions(t *testing.T) {
	backends(t, func(t *testing.T, b Backend, reopen func() Backend) {
		ctx := context.Background()
		q := Query{Name: "rl", Stream: "req", WindowMs: 1000, IdleFlushMs: 500, Quota: 3}
		if err := b.Register(ctx, q); err != nil {
			t.Fatal(err)
		}
		var evs []Event
		for i := range 5 {
			evs = append(evs, Event{Stream: "req", Key: "noisy", At: t0 + int64(i)*100, ID: fmt.Sprint("n", i)})
		}
		evs = append(evs, Event{Stream: "req", Key: "quiet", At: t0 + 10, Cost: 4, ID: "q0"},
			Event{Stream: "other", Key: "noisy", At: t0})
		if err := b.Append(ctx, evs); err != nil {
			t.Fatal(err)
		}
		// A retried append adds nothing.
		if err := b.Append(ctx, evs[:3]); err != nil {
			t.Fatal(err)
		}
		if n := mustProcessAll(t, b, q, t0, 2); n != 6 {
			t.Fatalf("processed %d events, want 6", n)
		}
		if ws, _ := b.Windows(ctx, "req", 0, 0); len(ws) != 0 {
			t.Fatalf("windows before any closed: %+v", ws)
		}
		// A restart resumes from the stored state; the idle flush closes both windows.
		b = reopen()
		if _, err := b.Process(ctx, q, t0+1500, 0); err != nil {
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
		want := Decision{Query: "rl", Stream: "req", Key: "noisy", WindowStart: t0, WindowEnd: t0 + 1000, Count: 5, Quota: 3, OverBy: 2}
		if len(ds) != 1 || ds[0].Offset == 0 {
			t.Fatalf("decisions %+v", ds)
		}
		ds[0].Offset = 0
		if ds[0] != want {
			t.Fatalf("decision %+v, want %+v", ds[0], want)
		}
		// A late event is counted as late, not dropped, and emits nothing.
		if err := b.Append(ctx, []Event{{Stream: "req", Key: "noisy", At: t0 + 1}}); err != nil {
			t.Fatal(err)
		}
		mustProcessAll(t, b, q, t0+1500, 0)
		st, err := b.Stats(ctx, "rl")
		if err != nil {
			t.Fatal(err)
		}
		if st.Late != 1 || st.LateSum != 1 || st.Open != 0 {
			t.Fatalf("stats %+v", st)
		}
		// A changed definition is refused until reset; the reset run starts over the log.
		q2 := q
		q2.Quota = 4
		if _, err := b.Process(ctx, q2, t0, 0); !errors.Is(err, ErrQueryChanged) {
			t.Fatalf("changed query: %v", err)
		}
		if err := b.Reset(ctx, "rl"); err != nil {
			t.Fatal(err)
		}
		if n := mustProcessAll(t, b, q2, t0+5000, 0); n != 7 {
			t.Fatalf("after reset processed %d, want 7", n)
		}
		if ds, _ := b.Decisions(ctx, "req", 0, 0); len(ds) != 2 || ds[1].Quota != 4 || ds[1].Count != 6 {
			t.Fatalf("decisions after reset %+v", ds)
		}
	})
}

func TestEngineInvalid(t *testing.T) {
	backends(t, func(t *testing.T, b Backend, _ func() Backend) {
		ctx := context.Background()
		for _, tc := range []struct {
			field string
			e     Event
		}{
			{"events[1].stream", Event{Key: "k"}},
			{"events[1].key", Event{Stream: "s"}},
			{"events[1].cost", Event{Stream: "s", Key: "k", Cost: -1}},
			{"events[1].key", Event{Stream: "s", Key: "a\x00b"}},
			{"events[1].key", Event{Stream: "s", Key: "\xff"}},
			{"events[1].key", Event{Stream: "s", Key: strings.Repeat("k", sluice.MaxKeyLen+1)}},
			{"events[1].id", Event{Stream: "s", Key: "k", ID: "\xfe"}},
		} {
			err := b.Append(ctx, []Event{{Stream: "s", Key: "k"}, tc.e})
			var ie *sluice.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("%s: %v", tc.field, err)
			}
		}
		if _, err := b.Process(ctx, Query{Name: "q", Stream: "s"}, 0, 0); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("invalid query: %v", err)
		}
		if n, err := b.Process(ctx, Query{Name: "q", Stream: "s", WindowMs: 1}, 0, 0); err != nil || n != 0 {
			t.Errorf("nothing appended: %d %v", n, err)
		}
		b.Close()
		if err := b.Append(ctx, []Event{{Stream: "s", Key: "k"}}); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("after close: %v", err)
		}
	})
}
