package enforce_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/enforce"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/stream"
)

// base is a second (and so a window) boundary: 2023-11-14T22:13:20Z in epoch ms.
const base int64 = 1_700_000_000_000

// quotaQuery counts requests of stream "api" per key in windows of a second and decides against
// the keys that make more than 2; a window closes 1 ms after its end.
var quotaQuery = stream.Query{Name: "api-quota", Stream: "api", WindowMs: 1000, IdleFlushMs: 1, Quota: 2}

// streamServer is `sluice serve` with stream mode over a memory backend (the real HTTP API), and
// what the tests watch of it.
type streamServer struct {
	*httptest.Server
	mem  *stream.MemoryEngine
	fail atomic.Bool  // while set, reading decisions fails, and a watch answers an error event
	sent atomic.Int64 // decision events written to watches

	mu      sync.Mutex
	resumes []string // the Last-Event-ID of every watch request, in order
}

// flaky is the memory backend with a switch that fails Decisions.
type flaky struct {
	*stream.MemoryEngine
	fail *atomic.Bool
}

func (f flaky) Decisions(ctx context.Context, s string, after int64, limit int) ([]stream.Decision, error) {
	if f.fail.Load() {
		return nil, sluice.ErrUnavailable
	}
	return f.MemoryEngine.Decisions(ctx, s, after, limit)
}

// countingWriter counts the decision events a watch writes. Unwrap lets the handler flush.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(bytes.Count(p, []byte("event: decision\n"))))
	return w.ResponseWriter.Write(p)
}

func (w countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// newClient is a Client of url, closed when the test ends.
func newClient(t testing.TB, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newServer is the handler of `sluice serve` without policies, as server/httpapi's tests build it.
func newServer(t testing.TB, opts httpapi.Options) http.Handler {
	t.Helper()
	cfg, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(cfg, store, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.New(srv, opts)
}

// startStreams serves a fresh stream server until the test ends.
func startStreams(t testing.TB, opts httpapi.Options) *streamServer {
	t.Helper()
	s := &streamServer{mem: stream.NewMemory()}
	t.Cleanup(func() { s.mem.Close() })
	opts.Streams = flaky{s.mem, &s.fail}
	h := newServer(t, opts)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/decisions/watch") {
			s.mu.Lock()
			s.resumes = append(s.resumes, r.Header.Get("Last-Event-ID"))
			s.mu.Unlock()
			w = countingWriter{w, &s.sent}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close) // after the enforcers' Close, which the tests register later
	return s
}

func (s *streamServer) watchRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.resumes...)
}

// requests appends, for each key, that many requests at the instant at (epoch ms) to stream
// "api", closes at's window with quotaQuery and returns the decisions that made, in order.
func (s *streamServer) requests(t testing.TB, at int64, counts map[string]int) []stream.Decision {
	t.Helper()
	ctx := context.Background()
	var events []stream.Event
	for key, n := range counts {
		for range n {
			events = append(events, stream.Event{Stream: "api", Key: key, At: at})
		}
	}
	if err := s.mem.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	return s.process(t, quotaQuery, at-at%quotaQuery.WindowMs+quotaQuery.WindowMs+quotaQuery.IdleFlushMs)
}

// process runs q at the instant now and returns the decisions it made.
func (s *streamServer) process(t testing.TB, q stream.Query, now int64) []stream.Decision {
	t.Helper()
	ctx := context.Background()
	before, err := s.mem.Decisions(ctx, q.Stream, 0, httpapi.MaxPageLimit)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	if len(before) > 0 {
		last = before[len(before)-1].Offset
	}
	if _, err := s.mem.Process(ctx, q, now, 0); err != nil {
		t.Fatal(err)
	}
	made, err := s.mem.Decisions(ctx, q.Stream, last, httpapi.MaxPageLimit)
	if err != nil {
		t.Fatal(err)
	}
	return made
}

// clock is a settable Config.Now.
type clock struct{ ms atomic.Int64 }

func newClock(ms int64) *clock {
	c := &clock{}
	c.ms.Store(ms)
	return c
}

func (c *clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(ms int64)   { c.ms.Store(ms) }

// subscribe subscribes to stream "api" of s, and closes the enforcer when the test ends.
func subscribe(t testing.TB, s *streamServer, cfg enforce.Config) *enforce.Enforcer {
	t.Helper()
	c := newClient(t, s.URL, client.Options{})
	e, err := enforce.New(context.Background(), c, "api", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// waitOffset waits until e applied the decision at offset off.
func waitOffset(t testing.TB, e *enforce.Enforcer, off int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Offset() < off {
		if time.Now().After(deadline) {
			t.Fatalf("offset %d after 5 s, want %d", e.Offset(), off)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantBlocked checks e's answer for key.
func wantBlocked(t testing.TB, e *enforce.Enforcer, key string, blocked bool, until int64) {
	t.Helper()
	u, b := e.Blocked(key)
	switch {
	case b != blocked:
		t.Errorf("Blocked(%q) = %v, want %v", key, b, blocked)
	case blocked && !u.Equal(time.UnixMilli(until)):
		t.Errorf("Blocked(%q) until %v, want %v (%d ms off)", key, u, time.UnixMilli(until), u.UnixMilli()-until)
	case !blocked && !u.IsZero():
		t.Errorf("Blocked(%q) = %v, false; want the zero time", key, u)
	}
	if e.Allow(key) == blocked {
		t.Errorf("Allow(%q) = %v with Blocked %v", key, !blocked, blocked)
	}
}

func TestEnforcerBlocks(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	// loud makes 3 requests in [base, base+1000), over the quota of 2; quiet makes 2, at it.
	ds := s.requests(t, base+500, map[string]int{"loud": 3, "quiet": 2})
	if len(ds) != 1 || ds[0].Key != "loud" || ds[0].WindowStart != base || ds[0].WindowEnd != base+1000 {
		t.Fatalf("decisions %+v, want one for loud over [base, base+1000)", ds)
	}
	tests := []struct {
		name       string
		appliedAt  int64 // the enforcer's clock when the decision arrives
		wantBlocks int64 // loud's block ends then; 0: the decision is stale and blocks nothing
	}{
		{"before the window ends (a clock behind the server's)", base + 999, base + 2000},
		{"at the end of the window", base + 1000, base + 2000},
		{"early in the next window", base + 1001, base + 2000},
		{"late in the next window", base + 1999, base + 2000},
		{"at the end of the next window", base + 2000, 0},
		{"an hour later", base + 3_600_000 + 250, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(tt.appliedAt)
			e := subscribe(t, s, enforce.Config{Now: clk.Now})
			waitOffset(t, e, ds[0].Offset)
			wantBlocked(t, e, "quiet", false, 0)
			wantBlocked(t, e, "unknown", false, 0)
			if tt.wantBlocks == 0 {
				wantBlocked(t, e, "loud", false, 0)
				return
			}
			wantBlocked(t, e, "loud", true, tt.wantBlocks)
			clk.set(tt.wantBlocks - 1)
			wantBlocked(t, e, "loud", true, tt.wantBlocks)
			clk.set(tt.wantBlocks)
			wantBlocked(t, e, "loud", false, 0)
			if got := e.Offset(); got != ds[0].Offset {
				t.Errorf("Offset() = %d, want %d", got, ds[0].Offset)
			}
		})
	}
}

// Two queries over one stream decide against the same key: the longer block stands, whichever
// decision comes first.
func TestEnforcerLongerBlockWins(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	minute := stream.Query{Name: "api-minute", Stream: "api", WindowMs: 60_000, IdleFlushMs: 1, Quota: 2}
	minuteEnd := base - base%60_000 + 60_000 // base is 20 s into its minute
	at := minuteEnd - 500                    // in the last second of the minute
	if err := s.mem.Append(context.Background(), []stream.Event{
		{Stream: "api", Key: "k", At: at}, {Stream: "api", Key: "k", At: at}, {Stream: "api", Key: "k", At: at},
	}); err != nil {
		t.Fatal(err)
	}
	now := minuteEnd + 1
	long := s.process(t, minute, now)      // [minuteEnd-60s, minuteEnd): blocks until minuteEnd+60s
	short := s.process(t, quotaQuery, now) // [minuteEnd-1s, minuteEnd): until minuteEnd+1s
	if len(long) != 1 || len(short) != 1 {
		t.Fatalf("decisions %+v and %+v, want one each", long, short)
	}
	e := subscribe(t, s, enforce.Config{Now: newClock(now).Now})
	waitOffset(t, e, short[0].Offset)
	wantBlocked(t, e, "k", true, minuteEnd+60_000)
}

func TestEnforcerAfter(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	first := s.requests(t, base+500, map[string]int{"a": 3})
	second := s.requests(t, base+1500, map[string]int{"b": 3})
	clk := newClock(base + 1700)
	e := subscribe(t, s, enforce.Config{Now: clk.Now, After: first[0].Offset})
	if got := e.Offset(); got != first[0].Offset && got != second[0].Offset {
		t.Fatalf("Offset() = %d, want After (%d) or the decision after it (%d)", got, first[0].Offset, second[0].Offset)
	}
	waitOffset(t, e, second[0].Offset)
	wantBlocked(t, e, "a", false, 0)
	wantBlocked(t, e, "b", true, base+3000)
	if got := s.watchRequests(); len(got) != 1 || got[0] != strconv.FormatInt(first[0].Offset, 10) {
		t.Errorf("watch requests with Last-Event-ID %q, want one with %d", got, first[0].Offset)
	}
}

// errorLog collects what OnError hears.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// wait waits until l heard an error that ok accepts, and returns it.
func (l *errorLog) wait(t testing.TB, ok func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, err := range l.all() {
			if ok(err) {
				return err
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such error in 5 s; heard %v", l.all())
		}
		time.Sleep(time.Millisecond)
	}
}

// The server drops the connection between rounds of decisions: the enforcer resumes after the
// last one it applied, so every decision crosses the wire once and each key is blocked.
func TestEnforcerReconnects(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	var errs errorLog
	clk := newClock(base)
	e := subscribe(t, s, enforce.Config{Now: clk.Now, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, OnError: errs.add})
	var (
		last    int64
		resumes = []string{"0"}
		keys    []string
	)
	for round := range 4 {
		at := base + int64(round)*1000 + 500
		k1, k2 := "r"+strconv.Itoa(round)+"a", "r"+strconv.Itoa(round)+"b"
		ds := s.requests(t, at, map[string]int{k1: 3, k2: 4, "quiet": 1})
		if len(ds) != 2 {
			t.Fatalf("round %d: decisions %+v, want 2", round, ds)
		}
		keys = append(keys, k1, k2)
		last = ds[1].Offset
		waitOffset(t, e, last)
		resumes = append(resumes, strconv.FormatInt(last, 10))
		heard := len(errs.all())
		s.CloseClientConnections()
		errs.wait(t, func(error) bool { return len(errs.all()) > heard })
	}
	for _, err := range errs.all() {
		if !errors.Is(err, sluice.ErrUnavailable) || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("OnError heard %v, want a client error matching sluice.ErrUnavailable", err)
		}
	}
	if got := s.sent.Load(); got != int64(len(keys)) {
		t.Errorf("the server sent %d decisions, want %d: each once", got, len(keys))
	}
	// Every reconnection resumed after the last decision applied; a reconnection may have
	// failed and been retried with the same offset.
	got := s.watchRequests()
	for i, j := 0, 0; i < len(got); i++ {
		for j < len(resumes) && got[i] != resumes[j] {
			j++
		}
		if j == len(resumes) {
			t.Fatalf("watch requests with Last-Event-ID %q, want %q in order (repeats allowed)", got, resumes)
		}
	}
	if e.Offset() != last {
		t.Errorf("Offset() = %d, want %d", e.Offset(), last)
	}
	// Round r's window is [base+r s, base+(r+1) s): its keys are blocked until base+(r+2) s.
	clk.set(base + 3999)
	for _, k := range keys {
		round := int64(k[1] - '0')
		wantBlocked(t, e, k, round >= 2, base+(round+2)*1000)
	}
	wantBlocked(t, e, "quiet", false, 0)
}

// A backend failure reaches the enforcer as an error event; it retries until the backend is back.
func TestEnforcerErrorEvent(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	s.fail.Store(true)
	var errs errorLog
	e := subscribe(t, s, enforce.Config{Now: newClock(base + 1200).Now, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, OnError: errs.add})
	err := errs.wait(t, func(error) bool { return true })
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "unavailable" || !errors.Is(err, sluice.ErrUnavailable) || !strings.HasPrefix(err.Error(), "client: ") {
		t.Errorf("OnError heard %v (%#v), want an *Error of code unavailable", err, err)
	}
	ds := s.requests(t, base+500, map[string]int{"k": 3})
	s.fail.Store(false)
	waitOffset(t, e, ds[0].Offset)
	wantBlocked(t, e, "k", true, base+2000)
}

// A connection that goes silent longer than IdleTimeout is taken for dead and replaced.
func TestEnforcerIdleTimeout(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	var errs errorLog
	e := subscribe(t, s, enforce.Config{Now: newClock(base + 1200).Now, IdleTimeout: 20 * time.Millisecond, MinBackoff: time.Millisecond, OnError: errs.add})
	errs.wait(t, func(err error) bool {
		return strings.Contains(err.Error(), "idle timeout") && errors.Is(err, sluice.ErrUnavailable)
	})
	ds := s.requests(t, base+500, map[string]int{"k": 3})
	waitOffset(t, e, ds[0].Offset)
	wantBlocked(t, e, "k", true, base+2000)
	if n := len(s.watchRequests()); n < 2 {
		t.Errorf("%d watch requests, want a reconnection", n)
	}
}

func TestEnforceErrors(t *testing.T) {
	streams := startStreams(t, httpapi.Options{BearerTokens: []string{"secret"}})
	without := httptest.NewServer(newServer(t, httpapi.Options{}))
	t.Cleanup(without.Close)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<h1>Welcome to the proxy</h1>"))
	}))
	t.Cleanup(html.Close)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // runs first
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	tests := []struct {
		name    string
		url     string
		opts    client.Options
		stream  string
		cfg     enforce.Config
		wantErr func(error) bool // nil: no error
	}{
		{"with the token", streams.URL, client.Options{Token: "secret"}, "api", enforce.Config{}, nil},
		{"a stream name to escape", streams.URL, client.Options{Token: "secret"}, "a/b c", enforce.Config{}, nil},
		{"without the token", streams.URL, client.Options{}, "api", enforce.Config{},
			func(err error) bool { return errors.Is(err, client.ErrUnauthorized) }},
		{"no stream mode", without.URL, client.Options{}, "api", enforce.Config{}, func(err error) bool {
			var ce *client.Error
			return errors.As(err, &ce) && ce.Status == 404 && ce.Code == "not_found"
		}},
		{"not an event stream", html.URL, client.Options{}, "api", enforce.Config{},
			func(err error) bool {
				return errors.Is(err, sluice.ErrUnavailable) && strings.Contains(err.Error(), "text/html")
			}},
		{"no answer in time", hang.URL, client.Options{Timeout: 20 * time.Millisecond}, "api", enforce.Config{},
			func(err error) bool {
				return errors.Is(err, sluice.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded)
			}},
		{"unreachable", gone.URL, client.Options{}, "api", enforce.Config{},
			func(err error) bool { return errors.Is(err, sluice.ErrUnavailable) }},
		{"empty stream", streams.URL, client.Options{Token: "secret"}, "", enforce.Config{},
			func(err error) bool { return strings.HasPrefix(err.Error(), "enforce: stream is empty") }},
		{"negative after", streams.URL, client.Options{Token: "secret"}, "api", enforce.Config{After: -1},
			func(err error) bool { return strings.HasPrefix(err.Error(), "enforce: After must not be negative") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.url, tt.opts)
			e, err := enforce.New(context.Background(), c, tt.stream, tt.cfg)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if err := e.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				return
			}
			if err == nil || e != nil {
				e.Close()
				t.Fatalf("New = %v, %v; want an error", e, err)
			}
			if !tt.wantErr(err) || !strings.HasPrefix(err.Error(), "client: ") && !strings.HasPrefix(err.Error(), "enforce: ") {
				t.Errorf("New: %v (%#v), not the error wanted", err, err)
			}
		})
	}
	if e, err := enforce.New(context.Background(), nil, "api", enforce.Config{}); e != nil || err == nil {
		t.Errorf("New without a client = %v, %v; want an error", e, err)
	}
}

// enforcerGoroutines counts the goroutines running an Enforcer's code.
func enforcerGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "enforce.(*Enforcer).") {
			n++
		}
	}
	return n
}

func TestEnforcerClose(t *testing.T) {
	s := startStreams(t, httpapi.Options{})
	ds := s.requests(t, base+500, map[string]int{"k": 3})
	before := runtime.NumGoroutine()
	c := newClient(t, s.URL, client.Options{})
	e, err := enforce.New(context.Background(), c, "api", enforce.Config{Now: newClock(base + 1200).Now})
	if err != nil {
		t.Fatal(err)
	}
	waitOffset(t, e, ds[0].Offset)
	if n := enforcerGoroutines(); n != 1 {
		t.Errorf("%d goroutines of the enforcer, want 1", n)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	// What was known still answers.
	wantBlocked(t, e, "k", true, base+2000)
	// The enforcer's goroutine ends, and so do its connection's (the transport's and the
	// server's); the goroutine Close waited for may still be returning.
	deadline := time.Now().Add(5 * time.Second)
	for enforcerGoroutines() > 0 || runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 5 s after Close, %d before New:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}
