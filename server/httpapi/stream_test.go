package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/stream"
)

// startStreams starts a server whose stream routes use a fresh memory backend.
func startStreams(t *testing.T) (*env, *stream.MemoryEngine) {
	t.Helper()
	mem := stream.NewMemory()
	t.Cleanup(func() { mem.Close() })
	return start(t, setup{opts: httpapi.Options{Streams: mem}}), mem
}

func errorOf(t *testing.T, r reply) httpapi.ErrorBody {
	t.Helper()
	var eb httpapi.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return eb
}

func TestUsage(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	many := func(n int) string {
		return `{"events":[` + strings.Repeat(`{"stream":"s","key":"k"},`, n-1) + `{"stream":"s","key":"k"}]}`
	}
	for _, tt := range []struct {
		name, body string
		status     int
		code, want string // want: in the error message, or the success body
	}{
		{"one", `{"events":[{"stream":"s","key":"a"}]}`, 200, "", `{"appended":1}`},
		{"every field", `{"events":[{"stream":"s","key":"a","cost":3,"at":1000,"id":"x"},{"stream":"t","key":"b"}]}`, 200, "", `{"appended":2}`},
		{"none", `{"events":[]}`, 200, "", `{"appended":0}`},
		{"the most", many(httpapi.MaxUsageEvents), 200, "", fmt.Sprintf(`{"appended":%d}`, httpapi.MaxUsageEvents)},
		{"too many", many(httpapi.MaxUsageEvents + 1), 400, "invalid_argument", "at most 10000"},
		{"too large", `{"events":[{"stream":"s","key":"` + strings.Repeat("k", httpapi.DefaultMaxBodyBytes) + `"}]}`, 400, "too_large", "larger than"},
		{"no events", `{}`, 400, "invalid_argument", "events: is missing"},
		{"not an array", `{"events":{}}`, 400, "invalid_argument", "events: must be an array"},
		{"missing key", `{"events":[{"stream":"s","key":"a"},{"stream":"s"}]}`, 400, "invalid_argument", "events[1].key: is missing"},
		{"empty key", `{"events":[{"stream":"s","key":"a"},{"stream":"s","key":"b"},{"stream":"s","key":"c"},{"stream":"s","key":""}]}`, 400, "invalid_argument", "events[3].key"},
		{"empty stream", `{"events":[{"stream":"","key":"a"}]}`, 400, "invalid_argument", "events[0].stream"},
		{"negative cost", `{"events":[{"stream":"s","key":"a","cost":-1}]}`, 400, "invalid_argument", "events[0].cost"},
		{"negative at", `{"events":[{"stream":"s","key":"a","at":-5}]}`, 400, "invalid_argument", "events[0].at"},
		{"cost not an integer", `{"events":[{"stream":"s","key":"a","cost":1.5}]}`, 400, "invalid_argument", "events[0].cost: must be an integer"},
		{"unknown field", `{"events":[{"stream":"s","key":"a","colour":1}]}`, 400, "invalid_argument", `"events[0].colour"`},
		{"cased field", `{"events":[{"Stream":"s","key":"a"}]}`, 400, "invalid_argument", `"events[0].Stream"`},
		{"null id", `{"events":[{"stream":"s","key":"a","id":null}]}`, 400, "invalid_argument", "events[0].id: must be a string, not null"},
		{"repeated", `{"events":[],"events":[]}`, 400, "invalid_argument", "appears twice"},
		{"trailing data", `{"events":[]} {}`, 400, "invalid_argument", "unexpected data"},
		{"not JSON", `{"events":[`, 400, "invalid_argument", "not complete JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.post("/v1/usage", tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status == 200 {
				if got := strings.TrimSpace(string(r.body)); got != tt.want {
					t.Errorf("body %s, want %s", got, tt.want)
				}
				return
			}
			if eb := errorOf(t, r); eb.Code != tt.code || !strings.Contains(eb.Error, tt.want) {
				t.Errorf("error %+v, want code %s and %q in it", eb, tt.code, tt.want)
			}
		})
	}
	// The refused bodies appended nothing: all or none.
	q := stream.Query{Name: "q", Stream: "s", WindowMs: 1000}
	if err := mem.Register(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	n, err := mem.Process(context.Background(), q, 0, 100_000)
	if err != nil || n != 1+1+httpapi.MaxUsageEvents {
		t.Errorf("stream s holds %d events (%v), want %d", n, err, 2+httpapi.MaxUsageEvents)
	}
}

func TestStreamsNotConfigured(t *testing.T) {
	t.Parallel()
	e := start(t, setup{})
	for _, r := range []reply{
		e.post("/v1/usage", `{"events":[]}`),
		e.do("GET", "/v1/streams/s/windows", ""),
		e.do("GET", "/v1/streams/s/decisions", ""),
		e.do("GET", "/v1/streams/s/decisions/watch", ""),
	} {
		if eb := errorOf(t, r); r.status != 404 || eb.Code != "not_found" || !strings.Contains(eb.Error, "not configured") {
			t.Errorf("status %d, %+v; want 404 not_found", r.status, eb)
		}
	}
}

func TestStreamsAuthAndMethods(t *testing.T) {
	t.Parallel()
	mem := stream.NewMemory()
	t.Cleanup(func() { mem.Close() })
	e := start(t, setup{opts: httpapi.Options{Streams: mem, BearerTokens: []string{"secret"}}})
	for _, path := range []string{"/v1/streams/s/windows", "/v1/streams/s/decisions", "/v1/streams/s/decisions/watch"} {
		if r := e.do("GET", path, ""); r.status != 401 {
			t.Errorf("GET %s without a token: %d", path, r.status)
		}
		if strings.HasSuffix(path, "watch") {
			continue // with the token, it would not end
		}
		if r := e.do("GET", path, "", "Authorization", "Bearer secret"); r.status != 200 {
			t.Errorf("GET %s with the token: %d %s", path, r.status, r.body)
		}
	}
	if r := e.post("/v1/usage", `{"events":[]}`); r.status != 401 {
		t.Errorf("POST /v1/usage without a token: %d", r.status)
	}
	if r := e.do("GET", "/v1/usage", "", "Authorization", "Bearer secret"); r.status != 405 || errorOf(t, r).Code != "method_not_allowed" {
		t.Errorf("GET /v1/usage: %d %s", r.status, r.body)
	}
}

// fill appends events at fixed instants and processes them so that stream s has windows and
// decisions: keys k0…k(n-1), key ki with i+1 events in window [0, 1000), quota 2, so
// keys k2… are over.
func fill(t *testing.T, mem *stream.MemoryEngine, n int) {
	t.Helper()
	ctx := context.Background()
	q := stream.Query{Name: "q", Stream: "s", WindowMs: 1000, IdleFlushMs: 100, Quota: 2}
	if err := mem.Register(ctx, q); err != nil {
		t.Fatal(err)
	}
	var events []stream.Event
	for i := range n {
		for range i + 1 {
			events = append(events, stream.Event{Stream: "s", Key: fmt.Sprint("k", i), At: 500})
		}
	}
	if err := mem.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Process(ctx, q, 1_000_000, 100_000); err != nil {
		t.Fatal(err)
	}
}

func TestStreamPull(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	fill(t, mem, 7)
	page := func(kind, query string) []map[string]any {
		t.Helper()
		r := e.do("GET", "/v1/streams/s/"+kind+query, "")
		if r.status != 200 {
			t.Fatalf("%s%s: %d %s", kind, query, r.status, r.body)
		}
		var out map[string][]map[string]any
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out[kind]
	}
	for _, c := range []struct {
		kind string
		want int
	}{{"windows", 7}, {"decisions", 5}} {
		if all := page(c.kind, ""); len(all) != c.want {
			t.Fatalf("%s: %d, want %d", c.kind, len(all), c.want)
		}
		// Pages of 2, each after the last offset seen, cover all of them once, in order.
		var seen []float64
		for after := 0.0; ; {
			p := page(c.kind, fmt.Sprintf("?after=%d&limit=2", int64(after)))
			if len(p) == 0 {
				break
			}
			if len(p) > 2 {
				t.Fatalf("page of %d, limit 2", len(p))
			}
			for _, item := range p {
				off := item["offset"].(float64)
				if off <= after {
					t.Fatalf("%s: offset %v after %v", c.kind, off, after)
				}
				after = off
				seen = append(seen, off)
			}
		}
		if len(seen) != c.want {
			t.Errorf("%s: paging saw %d, want %d", c.kind, len(seen), c.want)
		}
	}
	d := page("decisions", "?limit=1")[0]
	if d["key"] != "k2" || d["count"] != 3.0 || d["quota"] != 2.0 || d["overBy"] != 1.0 || d["windowStart"] != 0.0 || d["windowEnd"] != 1000.0 {
		t.Errorf("first decision %v", d)
	}
	if p := page("windows", "?after=1000000"); p == nil || len(p) != 0 {
		t.Errorf("past the end: %v, want []", p)
	}
	if p := page("windows", "?limit=1000"); len(p) != 7 {
		t.Errorf("limit 1000: %d", len(p))
	}
	for _, bad := range []struct{ query, want string }{
		{"?limit=0", "limit: must be 1 to 1000"},
		{"?limit=1001", "limit: must be 1 to 1000"},
		{"?limit=x", "limit: must be an integer"},
		{"?after=-1", "after: must not be negative"},
		{"?after=one", "after: must be an integer"},
	} {
		for _, kind := range []string{"windows", "decisions", "decisions/watch"} {
			if kind == "decisions/watch" && strings.Contains(bad.query, "limit") {
				continue // a watch takes no limit
			}
			r := e.do("GET", "/v1/streams/s/"+kind+bad.query, "")
			if eb := errorOf(t, r); r.status != 400 || eb.Code != "invalid_argument" || !strings.Contains(eb.Error, bad.want) {
				t.Errorf("%s%s: %d %+v, want 400 with %q", kind, bad.query, r.status, eb, bad.want)
			}
		}
	}
}

type sseEvent struct{ id, event, data string }

// watch opens a decisions watch of stream s and returns its events as they come; cancel ends it.
func watch(t *testing.T, e *env, query string, header ...string) (<-chan sseEvent, context.CancelFunc) {
	t.Helper()
	return watchOf(t, e, "decisions", query, header...)
}

// watchOf is watch of stream s's decisions or windows (kind).
func watchOf(t *testing.T, e *env, kind, query string, header ...string) (<-chan sseEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/streams/s/"+kind+"/watch"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan sseEvent, 100)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), ": ")
			switch name {
			case "":
				if ev != (sseEvent{}) {
					events <- ev
				}
				ev = sseEvent{}
			case "id":
				ev.id = value
			case "event":
				ev.event = value
			case "data":
				ev.data = value
			}
		}
	}()
	t.Cleanup(cancel)
	return events, cancel
}

func next(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event in 5 s")
	}
	return sseEvent{}
}

func TestStreamWatch(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	events, cancel := watch(t, e, "")
	fill(t, mem, 5) // after the watch began: it sees them as they come
	var offsets []string
	for i := range 3 {
		ev := next(t, events)
		var d stream.Decision
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil || ev.event != "decision" {
			t.Fatalf("event %+v: %v", ev, err)
		}
		if want := fmt.Sprint("k", i+2); d.Key != want || ev.id != fmt.Sprint(d.Offset) || d.OverBy != int64(i+1) {
			t.Errorf("event %d: %+v (id %s), want key %s", i, d, ev.id, want)
		}
		offsets = append(offsets, ev.id)
	}
	cancel()
	for range events { // the watch ends with its client
	}

	// Resuming: Last-Event-ID wins over after.
	resumed, _ := watch(t, e, "?after=0", "Last-Event-ID", offsets[0])
	for _, want := range offsets[1:] {
		if ev := next(t, resumed); ev.id != want {
			t.Errorf("resumed at %s, want %s", ev.id, want)
		}
	}
	fromAfter, _ := watch(t, e, "?after="+offsets[1])
	if ev := next(t, fromAfter); ev.id != offsets[2] {
		t.Errorf("after %s: %s, want %s", offsets[1], ev.id, offsets[2])
	}
	if r := e.do("GET", "/v1/streams/s/decisions/watch", "", "Last-Event-ID", "x"); r.status != 400 || !strings.Contains(errorOf(t, r).Error, "Last-Event-ID") {
		t.Errorf("bad Last-Event-ID: %d %s", r.status, r.body)
	}
}

// Windows are watched as decisions are: every closed window, in offset order, resumable.
func TestStreamWindowsWatch(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	fill(t, mem, 4)
	want, err := mem.Windows(context.Background(), "s", 0, 100)
	if err != nil || len(want) != 4 {
		t.Fatalf("windows %+v, %v", want, err)
	}
	events, _ := watchOf(t, e, "windows", "?after="+fmt.Sprint(want[0].Offset))
	for _, w := range want[1:] {
		ev := next(t, events)
		var got stream.Window
		if err := json.Unmarshal([]byte(ev.data), &got); err != nil || ev.event != "window" || ev.id != fmt.Sprint(w.Offset) || got != w {
			t.Fatalf("event %+v (%v), want window %+v", ev, err, w)
		}
	}
}
