package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/stream"
)

// statsTimeout bounds each query's Stats call, so that one slow query (or a store that does not
// answer) costs the page a few seconds, not the request's whole life.
const statsTimeout = 2 * time.Second

// maxStatsCalls bounds the Stats calls in flight for one request: a PostgreSQL store has a pool.
const maxStatsCalls = 8

// queryView is one stream query in GET /v1/console/streams. Its progress is left out, and Error
// set, when the store could not report it.
type queryView struct {
	Name     string `json:"name"`
	Stream   string `json:"stream"`
	WindowMs int64  `json:"windowMs"`
	Quota    int64  `json:"quota"`
	*progressView
	Error string `json:"error,omitempty"`
}

// progressView is stream.Stats with the lag. Horizon, MaxAt and LagMs are null until the query
// has consumed an event (or, for Horizon, an idle flush moved it), rather than the sentinel
// -2^63 a browser cannot hold.
type progressView struct {
	Offset  int64  `json:"offset"`
	Events  int64  `json:"events"`
	Open    int64  `json:"open"`
	Late    int64  `json:"late"`
	LateSum int64  `json:"lateSum"`
	Horizon *int64 `json:"horizon"`
	MaxAt   *int64 `json:"maxAt"`
	LagMs   *int64 `json:"lagMs"`
}

// listStreams answers {"queries": [...]}: each configured query's progress, read from b with
// Stats, in the order configured. b nil is stream mode off: no queries. A query whose Stats fails
// is listed with an error, and the others still are.
func listStreams(b stream.Backend, queries []stream.Query) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if b == nil {
			writeJSON(w, http.StatusOK, map[string][]queryView{"queries": {}})
			return
		}
		out := make([]queryView, len(queries))
		var wg sync.WaitGroup
		slots := make(chan struct{}, maxStatsCalls)
		for i, q := range queries {
			out[i] = queryView{Name: q.Name, Stream: q.Stream, WindowMs: q.WindowMs, Quota: q.Quota}
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				ctx, cancel := context.WithTimeout(r.Context(), statsTimeout)
				defer cancel()
				st, err := b.Stats(ctx, q.Name)
				switch {
				case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
					out[i].Error = fmt.Sprintf("console: the streams store did not answer within %v", statsTimeout)
				case err != nil:
					// The store's own words may name hosts or schemas: keep them off the page.
					out[i].Error = "console: the streams store could not report this query's progress"
				default:
					out[i].progressView = progressOf(st, q.WindowMs)
				}
			})
		}
		wg.Wait()
		writeJSON(w, http.StatusOK, map[string][]queryView{"queries": out})
	}
}

// progressOf is st as the page shows it, with the decision lag.
//
// The decision lag is how far, in event time, the query's decisions trail the newest event it
// has consumed: MaxAt minus the end of its last closed window. A window closes, and is decided,
// once the horizon (the newest event time minus the grace, or the clock minus the idle flush)
// reaches its end, so every event before floor(horizon/window)*window is in a closed window and
// the events from there to MaxAt wait for theirs. It is at least the part of a window the newest
// event is into, plus the grace; 0 when an idle flush closed everything; null before any event.
// It does not count events appended but not yet consumed: Stats does not know the log's head,
// and Offset is a position in a log every stream shares, not a count of what is left.
func progressOf(st stream.Stats, windowMs int64) *progressView {
	p := &progressView{Offset: st.Offset, Events: st.Events, Open: st.Open, Late: st.Late, LateSum: st.LateSum}
	if st == (stream.Stats{}) {
		return p // the store has no such query yet: nothing seen
	}
	if st.Horizon != math.MinInt64 {
		p.Horizon = &st.Horizon
	}
	if st.MaxAt != math.MinInt64 {
		p.MaxAt = &st.MaxAt
	}
	if p.Horizon != nil && p.MaxAt != nil && windowMs > 0 {
		lag := max(0, st.MaxAt-floorTo(st.Horizon, windowMs))
		p.LagMs = &lag
	}
	return p
}

// floorTo is the largest multiple of size at or below v: the end of the last window, aligned to
// the epoch, that a horizon of v closed.
func floorTo(v, size int64) int64 {
	f := v - v%size
	if v%size < 0 {
		f -= size
	}
	return f
}
