package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/stream"
)

// Limits of the stream routes.
const (
	// MaxUsageEvents is the most events one POST /v1/usage may carry.
	MaxUsageEvents = 10000
	// DefaultPageLimit and MaxPageLimit bound the items of one windows or decisions page.
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// WatchPoll is how often a decisions watch looks for new decisions.
	WatchPoll = 50 * time.Millisecond
	// watchKeepAlive is how long a quiet watch goes before it sends a comment, so that proxies
	// keep the connection and a departed client is noticed.
	watchKeepAlive = 15 * time.Second
	// watchWriteTimeout bounds the wait for a watcher to take the events of one flush, and the
	// keep-alive comment after a quiet spell.
	watchWriteTimeout = watchKeepAlive + 30*time.Second
)

// streams returns the stream backend, or answers 404 and returns nil when there is none.
func (a *api) streams(w http.ResponseWriter) stream.Backend {
	if a.opts.Streams == nil {
		writeError(w, &httpError{http.StatusNotFound, CodeNotFound, "httpapi: streams are not configured (see the streams section of the config)"})
	}
	return a.opts.Streams
}

// decodeUsage reads the body of /v1/usage: {"events":[{"stream","key","cost"?,"at"?,"id"?}]}.
// The backend's Append checks the values (events[3].key: is empty).
func decodeUsage(data []byte) ([]stream.Event, error) {
	var raw []json.RawMessage
	if err := decodeObject(data, "", []field{{"events", true, "an array of objects", &raw}}); err != nil {
		return nil, err
	}
	if len(raw) > MaxUsageEvents {
		return nil, invalidf("events: %d events, at most %d per request", len(raw), MaxUsageEvents)
	}
	events := make([]stream.Event, len(raw))
	for i, r := range raw {
		e := &events[i]
		err := decodeObject(r, fmt.Sprintf("events[%d].", i), []field{
			{"stream", true, "a string", &e.Stream},
			{"key", true, "a string", &e.Key},
			{"cost", false, "an integer", &e.Cost},
			{"at", false, "an integer (epoch ms)", &e.At},
			{"id", false, "a string", &e.ID},
		})
		if err != nil {
			return nil, err
		}
	}
	return events, nil
}

// usage appends events to their streams, all or none; with PostgreSQL they are committed
// before the answer.
func (a *api) usage(w http.ResponseWriter, r *http.Request) {
	b := a.streams(w)
	if b == nil {
		return
	}
	data, err := a.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	events, err := decodeUsage(data)
	if err == nil && len(events) > 0 {
		err = b.Append(r.Context(), events)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Appended int `json:"appended"`
	}{len(events)})
}

func (a *api) windows(w http.ResponseWriter, r *http.Request) {
	pull(a, w, r, "windows", func(b stream.Backend) reader[stream.Window] { return b.Windows })
}

func (a *api) decisions(w http.ResponseWriter, r *http.Request) {
	pull(a, w, r, "decisions", func(b stream.Backend) reader[stream.Decision] { return b.Decisions })
}

// reader is Backend.Windows or Backend.Decisions.
type reader[T any] func(ctx context.Context, stream string, after int64, limit int) ([]T, error)

// pull answers one page of a stream's outputs after ?after, at most ?limit of them, as
// {name: [...]} in offset order.
func pull[T any](a *api, w http.ResponseWriter, r *http.Request, name string, of func(stream.Backend) reader[T]) {
	b := a.streams(w)
	if b == nil {
		return
	}
	q := r.URL.Query()
	after, err := afterParam(q.Get("after"), "after")
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := queryInt(q.Get("limit"), "limit", DefaultPageLimit)
	if err == nil && (limit < 1 || limit > MaxPageLimit) {
		err = invalidf("limit: must be 1 to %d, got %d", MaxPageLimit, limit)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	items, err := of(b)(r.Context(), r.PathValue("stream"), after, int(limit))
	if err != nil {
		writeError(w, err)
		return
	}
	if items == nil {
		items = []T{}
	}
	writeJSON(w, http.StatusOK, map[string][]T{name: items})
}

// afterParam reads an offset to read after: absent is 0.
func afterParam(s, name string) (int64, error) {
	after, err := queryInt(s, name, 0)
	if err == nil && after < 0 {
		err = invalidf("%s: must not be negative, got %d", name, after)
	}
	return after, err
}

func (a *api) watchDecisions(w http.ResponseWriter, r *http.Request) {
	watch(a, w, r, "decision", func(b stream.Backend) reader[stream.Decision] { return b.Decisions },
		func(d stream.Decision) int64 { return d.Offset })
}

func (a *api) watchWindows(w http.ResponseWriter, r *http.Request) {
	watch(a, w, r, "window", func(b stream.Backend) reader[stream.Window] { return b.Windows },
		func(w stream.Window) int64 { return w.Offset })
}

// watch streams a stream's decisions or windows as Server-Sent Events, each "event: <event>" with
// its offset as the id, from after the Last-Event-ID header or else ?after. It polls the backend
// every WatchPoll and ends when the client goes or the request's context ends (the server cancels
// it at shutdown). A backend error ends it with an "event: error" carrying {"error","code"}; the
// client resumes with Last-Event-ID.
func watch[T any](a *api, w http.ResponseWriter, r *http.Request, event string, of func(stream.Backend) reader[T], offset func(T) int64) {
	b := a.streams(w)
	if b == nil {
		return
	}
	after, err := afterParam(r.URL.Query().Get("after"), "after")
	if id := r.Header.Get("Last-Event-ID"); id != "" && err == nil {
		after, err = afterParam(id, "Last-Event-ID")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	name, ctx := r.PathValue("stream"), r.Context()
	rc := http.NewResponseController(w)
	// The server's read and write timeouts bound a request, and a watch is not one: the request
	// is read, so lift the read deadline (which would end the watch), and renew the write
	// deadline at each flush, so that only a client that stops reading is cut off.
	_ = rc.SetReadDeadline(time.Time{})
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
		return rc.Flush()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if flush() != nil {
		return
	}
	read := of(b)
	tick := time.NewTicker(WatchPoll)
	defer tick.Stop()
	quietSince := time.Now()
	for {
		items, err := read(ctx, name, after, MaxPageLimit)
		if err != nil {
			if ctx.Err() == nil {
				_, code, msg := statusOf(err)
				data, _ := json.Marshal(ErrorBody{Error: msg, Code: code})
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
				_ = flush()
			}
			return
		}
		for _, it := range items {
			data, _ := json.Marshal(it) // a Decision or a Window always encodes
			after = offset(it)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", after, event, data)
		}
		switch {
		case len(items) > 0:
			quietSince = time.Now()
		case time.Since(quietSince) >= watchKeepAlive:
			fmt.Fprint(w, ": keep-alive\n\n")
			quietSince = time.Now()
		}
		if flush() != nil {
			return
		}
		if len(items) == MaxPageLimit {
			continue // more are waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// decodePull reads the body of a pull: {"group","consumer","limit"?,"leaseMs"?}. The backend
// checks the values and fills the defaults.
func decodePull(data []byte) (stream.PullRequest, error) {
	var req stream.PullRequest
	err := decodeObject(data, "", []field{
		{"group", true, "a string", &req.Group},
		{"consumer", true, "a string", &req.Consumer},
		{"limit", false, "an integer", &req.Limit},
		{"leaseMs", false, "an integer (ms)", &req.LeaseMs},
	})
	return req, err
}

// decodeAck reads the body of an ack: {"group","lease","offset"}.
func decodeAck(data []byte) (stream.AckRequest, error) {
	var req stream.AckRequest
	err := decodeObject(data, "", []field{
		{"group", true, "a string", &req.Group},
		{"lease", true, "a string", &req.Lease},
		{"offset", true, "an integer", &req.Offset},
	})
	return req, err
}

// groupPull leases one partition of the stream's {kind} to the body's consumer for its group and
// answers its batch: {"partition","lease","expiresAt",kind:[...]}. With nothing to lease the
// lease is "" and the list empty; the consumer pulls again later.
func (a *api) groupPull(w http.ResponseWriter, r *http.Request) {
	b := a.streams(w)
	if b == nil {
		return
	}
	data, err := a.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodePull(data)
	if err != nil {
		writeError(w, err)
		return
	}
	req.Stream, req.Kind = r.PathValue("stream"), stream.Kind(r.PathValue("kind"))
	batch, err := b.Pull(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	out := map[string]any{"partition": batch.Partition, "lease": batch.Lease, "expiresAt": batch.ExpiresAt}
	if req.Kind == stream.KindWindows {
		out["windows"] = nonNil(batch.Windows)
	} else {
		out["decisions"] = nonNil(batch.Decisions)
	}
	writeJSON(w, http.StatusOK, out)
}

// groupAck commits a pulled batch of the stream's {kind} through the body's offset and releases
// its lease: {}. A lease that expired (or was never issued) is 409 lease_lost.
func (a *api) groupAck(w http.ResponseWriter, r *http.Request) {
	b := a.streams(w)
	if b == nil {
		return
	}
	data, err := a.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeAck(data)
	if err == nil {
		req.Stream, req.Kind = r.PathValue("stream"), stream.Kind(r.PathValue("kind"))
		err = b.Ack(r.Context(), req)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// nonNil makes an empty list encode as [], not null.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
