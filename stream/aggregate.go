package stream

import (
	"cmp"
	"math"
	"slices"
)

// Aggregator is a query's window state, folded one event at a time. It holds no clock: the
// instant for idle flushing is an argument, so the same inputs always give the same windows.
//
// Closing is monotone: the horizon H is the highest of every (latest event time - GraceMs) and
// every (now - IdleFlushMs) seen, and a window is closed exactly when End <= H. So a window never
// reopens, and an event whose window has End <= H is late: it is counted in Stats.Late (and its
// cost in LateSum), never in a window, and never silently dropped.
//
// The zero value is not usable; call NewAggregator. An Aggregator is not safe for concurrent use.
type Aggregator struct {
	q     Query
	st    Stats // Offset is the caller's business; Open is len(open)
	open  map[slot]*Window
	dirty map[slot]bool // open windows changed since Restore, for backends that store them
}

type slot struct {
	key   string
	start int64
}

// NewAggregator returns an empty aggregator for q: nothing seen, nothing closed.
func NewAggregator(q Query) (*Aggregator, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return &Aggregator{q: q, st: Stats{Horizon: math.MinInt64, MaxAt: math.MinInt64},
		open: map[slot]*Window{}, dirty: map[slot]bool{}}, nil
}

// windowStart aligns at to the epoch: floor division, so negative instants align too.
func windowStart(at, size int64) int64 {
	s := at - at%size
	if at%size < 0 {
		s -= size
	}
	return s
}

// Add folds e (its Stream is not checked) and reports whether it landed in a window; false means
// it was late. Cost 0 counts as 1.
func (a *Aggregator) Add(e Event) bool {
	cost := e.Cost
	if cost == 0 {
		cost = 1
	}
	start := windowStart(e.At, a.q.WindowMs)
	end := start + a.q.WindowMs
	late := end <= a.st.Horizon
	if late {
		a.st.Late++
		a.st.LateSum += cost
	} else {
		s := slot{e.Key, start}
		w := a.open[s]
		if w == nil {
			w = &Window{Query: a.q.Name, Stream: a.q.Stream, Key: e.Key, Start: start, End: end}
			a.open[s] = w
		}
		w.Count++
		w.Sum += cost
		a.dirty[s] = true
	}
	// The watermark moves after the event is placed: the event that advances it is never late.
	if e.At > a.st.MaxAt {
		a.st.MaxAt = e.At
		a.raise(e.At - a.q.GraceMs)
	}
	return !late
}

func (a *Aggregator) raise(h int64) {
	if h > a.st.Horizon {
		a.st.Horizon = h
	}
}

// HorizonAfter is the horizon Close(now) would reach after Adding events, and a is left as it
// is. While those events fold, only windows ending at or below it may close, and the others
// change only if an event lands in them: a backend that stores open windows loads just those
// before it Restores.
func (a *Aggregator) HorizonAfter(events []Event, now int64) int64 {
	h, maxAt := a.st.Horizon, a.st.MaxAt
	for _, e := range events {
		if e.At > maxAt {
			maxAt = e.At
			h = max(h, e.At-a.q.GraceMs)
		}
	}
	if a.q.IdleFlushMs > 0 {
		h = max(h, now-a.q.IdleFlushMs)
	}
	return h
}

// Close applies idle flushing at now (epoch ms) and removes and returns every window that is
// closed, ordered by End, then Key. A now behind an earlier one changes nothing.
func (a *Aggregator) Close(now int64) []Window {
	a.st.Horizon = a.HorizonAfter(nil, now)
	var out []Window
	for s, w := range a.open {
		if w.End <= a.st.Horizon {
			out = append(out, *w)
			delete(a.open, s)
			delete(a.dirty, s)
		}
	}
	slices.SortFunc(out, func(x, y Window) int {
		return cmp.Or(cmp.Compare(x.End, y.End), cmp.Compare(x.Key, y.Key))
	})
	return out
}

// Stats returns the progress so far (Offset is 0: an Aggregator does not know offsets).
func (a *Aggregator) Stats() Stats {
	st := a.st
	st.Open = int64(len(a.open))
	return st
}

// Restore replaces a's state with a stored one, for a backend that keeps it between calls: the
// horizon, watermark and late counts of st (its Offset, Events and Open are the backend's), and
// open windows. open may be a subset of the stored ones, those that the next events or Close may
// touch (see HorizonAfter); the rest stay stored as they are.
func (a *Aggregator) Restore(st Stats, open []Window) {
	a.st = Stats{Horizon: st.Horizon, MaxAt: st.MaxAt, Late: st.Late, LateSum: st.LateSum}
	a.open = make(map[slot]*Window, len(open))
	a.dirty = map[slot]bool{}
	for _, w := range open {
		w.Query, w.Stream = a.q.Name, a.q.Stream
		a.open[slot{w.Key, w.Start}] = &w
	}
}

// Changed returns the open windows that Add changed since NewAggregator or Restore, in no
// order: what a backend that stores open windows writes back. Those Close returned are not in it.
func (a *Aggregator) Changed() []Window {
	out := make([]Window, 0, len(a.dirty))
	for s := range a.dirty {
		out = append(out, *a.open[s])
	}
	return out
}
