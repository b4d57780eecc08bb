package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stream"
)

// getStreams runs listStreams over b and queries and decodes its answer.
func getStreams(t *testing.T, b stream.Backend, queries []stream.Query) (raw string, out map[string]queryView) {
	t.Helper()
	w := httptest.NewRecorder()
	listStreams(b, queries)(w, httptest.NewRequest(http.MethodGet, "/v1/console/streams", nil))
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var ans struct {
		Queries []map[string]json.RawMessage `json:"queries"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || ans.Queries == nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	wire := strings.Fields("name stream windowMs quota offset events open late lateSum horizon maxAt lagMs error")
	out = map[string]queryView{}
	for i, item := range ans.Queries {
		for k := range item {
			if !slices.Contains(wire, k) {
				t.Errorf("query %d has a member %q", i, k)
			}
		}
		// queryView's embedded pointer cannot be decoded into: read the progress on its own,
		// when it is there.
		raw, _ := json.Marshal(item)
		var q queryView
		q.Name, q.Stream, q.Error = str(item["name"]), str(item["stream"]), str(item["error"])
		_ = json.Unmarshal(item["windowMs"], &q.WindowMs)
		_ = json.Unmarshal(item["quota"], &q.Quota)
		if _, ok := item["events"]; ok {
			q.progressView = &progressView{}
			if err := json.Unmarshal(raw, q.progressView); err != nil {
				t.Fatal(err)
			}
		}
		if i < len(queries) && q.Name != queries[i].Name {
			t.Errorf("query %d is %q, want the order configured (%q)", i, q.Name, queries[i].Name)
		}
		out[q.Name] = q
	}
	return w.Body.String(), out
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func TestListStreamsOff(t *testing.T) {
	w := httptest.NewRecorder()
	listStreams(nil, []stream.Query{{Name: "q", Stream: "s", WindowMs: 1000}})(w, httptest.NewRequest(http.MethodGet, "/v1/console/streams", nil))
	if w.Code != http.StatusOK || w.Body.String() != `{"queries":[]}`+"\n" {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

func TestListStreams(t *testing.T) {
	ctx := context.Background()
	b := stream.NewMemoryWith(stream.MemoryConfig{Now: func() int64 { return 1 }})
	defer b.Close()
	fast := stream.Query{Name: "fast", Stream: "api", WindowMs: 1000, Quota: 2}
	slow := stream.Query{Name: "slow", Stream: "api", WindowMs: 10_000, GraceMs: 2000}
	idle := stream.Query{Name: "idle", Stream: "api", WindowMs: 1000, IdleFlushMs: 100}
	unborn := stream.Query{Name: "unborn", Stream: "other", WindowMs: 1000}     // configured, never processed
	fresh := stream.Query{Name: "fresh", Stream: "nothing-yet", WindowMs: 1000} // processed, no events
	for _, q := range []stream.Query{fast, slow, idle, fresh} {
		if err := b.Register(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	process := func(q stream.Query, now int64) {
		t.Helper()
		if _, err := b.Process(ctx, q, now, 0); err != nil {
			t.Fatal(err)
		}
	}
	// a: 3 events in [1000, 2000), over fast's quota; b: 1; a again in [2000, 3000).
	if err := b.Append(ctx, []stream.Event{
		{Stream: "api", Key: "a", At: 1000}, {Stream: "api", Key: "a", At: 1100}, {Stream: "api", Key: "a", At: 1200},
		{Stream: "api", Key: "b", At: 1500}, {Stream: "api", Key: "a", At: 2500},
	}); err != nil {
		t.Fatal(err)
	}
	process(fast, 2500) // closes fast's [1000, 2000) windows of a and b
	// An event of a window fast has closed: late for fast, on time for slow's 10 s windows.
	if err := b.Append(ctx, []stream.Event{{Stream: "api", Key: "a", At: 900, Cost: 4}}); err != nil {
		t.Fatal(err)
	}
	process(fast, 2500)
	process(slow, 2500)
	process(idle, 5000) // the clock is past 4000 + idle flush: every window closes
	process(fresh, 5000)

	_, got := getStreams(t, b, []stream.Query{fast, slow, idle, unborn, fresh})
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name                           string
		query                          string
		events, open, late, lateSum    int64
		horizon, maxAt, lagMs          *int64
		windowMs, quota                int64
		wantStream                     string
		wantNullHorizon, wantNullMaxAt bool
	}{
		// Closed through 2000; the newest event, 2500, is half a window later.
		{name: "windows closing", query: "fast", events: 6, open: 1, late: 1, lateSum: 4,
			horizon: i64(2500), maxAt: i64(2500), lagMs: i64(500), windowMs: 1000, quota: 2, wantStream: "api"},
		// The grace holds the horizon at 500: no 10 s window has closed, so nothing since 0 is decided.
		{name: "grace", query: "slow", events: 6, open: 2, horizon: i64(500), maxAt: i64(2500), lagMs: i64(2500),
			windowMs: 10_000, wantStream: "api"},
		// The idle flush moved the horizon past every event: nothing waits. The event at 900
		// came after 2500 in the log, so it is late here too.
		{name: "idle flush", query: "idle", events: 6, open: 0, late: 1, lateSum: 4, horizon: i64(4900), maxAt: i64(2500), lagMs: i64(0),
			windowMs: 1000, wantStream: "api"},
		{name: "not yet stored", query: "unborn", wantStream: "other", windowMs: 1000, wantNullHorizon: true, wantNullMaxAt: true},
		{name: "no events yet", query: "fresh", wantStream: "nothing-yet", windowMs: 1000, wantNullHorizon: true, wantNullMaxAt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, ok := got[tt.query]
			if !ok {
				t.Fatalf("%s is not listed", tt.query)
			}
			if q.Error != "" || q.progressView == nil {
				t.Fatalf("%+v: want its progress and no error", q)
			}
			if q.Stream != tt.wantStream || q.WindowMs != tt.windowMs || q.Quota != tt.quota {
				t.Errorf("stream %q, windowMs %d, quota %d", q.Stream, q.WindowMs, q.Quota)
			}
			if q.Events != tt.events || q.Open != tt.open || q.Late != tt.late || q.LateSum != tt.lateSum {
				t.Errorf("events %d, open %d, late %d (%d), want %d, %d, %d (%d)", q.Events, q.Open, q.Late, q.LateSum, tt.events, tt.open, tt.late, tt.lateSum)
			}
			if q.Offset < tt.events {
				t.Errorf("offset %d is below the %d events consumed", q.Offset, tt.events)
			}
			wantInt(t, "horizon", q.Horizon, tt.horizon)
			wantInt(t, "maxAt", q.MaxAt, tt.maxAt)
			wantInt(t, "lagMs", q.LagMs, tt.lagMs)
		})
	}
	// The decision the lag is about: a's window over fast's quota.
	ds, err := b.Decisions(ctx, "api", 0, 0)
	if err != nil || len(ds) != 1 || ds[0].Key != "a" || ds[0].WindowEnd != 2000 {
		t.Fatalf("decisions %+v, %v", ds, err)
	}
}

func wantInt(t *testing.T, name string, got, want *int64) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Errorf("%s = %d, want null", name, *got)
	case want != nil && got == nil:
		t.Errorf("%s = null, want %d", name, *want)
	case want != nil && *got != *want:
		t.Errorf("%s = %d, want %d", name, *got, *want)
	}
}

// failingStats is the memory engine with Stats of some names failing: as the store's error does
// (with words the page must not show), or by answering only when the context ends.
type failingStats struct {
	*stream.MemoryEngine
	fail, hang string
}

func (f failingStats) Stats(ctx context.Context, name string) (stream.Stats, error) {
	switch name {
	case f.fail:
		return stream.Stats{}, errors.New("pgstream: dial tcp db.internal:5432: password authentication failed")
	case f.hang:
		<-ctx.Done()
		return stream.Stats{}, ctx.Err()
	}
	return f.MemoryEngine.Stats(ctx, name)
}

func TestListStreamsFailures(t *testing.T) {
	ctx := context.Background()
	mem := stream.NewMemory()
	ok := stream.Query{Name: "ok", Stream: "api", WindowMs: 1000}
	bad := stream.Query{Name: "bad", Stream: "api", WindowMs: 1000}
	slow := stream.Query{Name: "slow", Stream: "api", WindowMs: 1000}
	if err := mem.Append(ctx, []stream.Event{{Stream: "api", Key: "k", At: 1000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Process(ctx, ok, 1000, 0); err != nil {
		t.Fatal(err)
	}
	closed := stream.NewMemory()
	closed.Close()
	tests := []struct {
		name    string
		b       stream.Backend
		queries []stream.Query
		errors  map[string]string // query: a word of its error; absent: no error
	}{
		{"one query fails", failingStats{MemoryEngine: mem, fail: "bad"}, []stream.Query{ok, bad},
			map[string]string{"bad": "could not report"}},
		{"one query hangs", failingStats{MemoryEngine: mem, hang: "slow"}, []stream.Query{slow, ok},
			map[string]string{"slow": "within 2s"}},
		{"the store is closed", closed, []stream.Query{ok, bad},
			map[string]string{"ok": "could not report", "bad": "could not report"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			raw, got := getStreams(t, tt.b, tt.queries)
			if took := time.Since(start); took > statsTimeout+time.Second {
				t.Errorf("took %v, more than the timeout of one call", took)
			}
			for _, q := range tt.queries {
				g := got[q.Name]
				word, failed := tt.errors[q.Name]
				switch {
				case failed && (!strings.Contains(g.Error, word) || !strings.HasPrefix(g.Error, "console: ")):
					t.Errorf("%s: error %q, want one saying %q", q.Name, g.Error, word)
				case failed && g.progressView != nil:
					t.Errorf("%s: failed, yet has counts: %+v", q.Name, g)
				case !failed && (g.Error != "" || g.progressView == nil || g.Events != 1):
					t.Errorf("%s: %+v, want its progress", q.Name, g)
				}
			}
			for _, secret := range []string{"db.internal", "password", "pgstream", "closed"} {
				if strings.Contains(raw, secret) {
					t.Errorf("the answer shows the store's own words (%q): %s", secret, raw)
				}
			}
		})
	}
}
