package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// timeoutErr is a driver's error that says whether it is a timeout, without net.Error's Temporary.
type timeoutErr bool

func (e timeoutErr) Error() string { return fmt.Sprintf("driver: timeout %v", bool(e)) }
func (e timeoutErr) Timeout() bool { return bool(e) }

func TestTimedOut(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"bounded ctx done", done, errors.New("connection reset"), true},
		{"refused", live, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"plain error", live, errors.New("READONLY You can't write against a read only replica"), false},
		{"a batch's deadline, before ours", live, fmt.Errorf("%w: %w", sluice.ErrUnavailable, context.DeadlineExceeded), true},
		{"deadline, wrapped twice", live, fmt.Errorf("redis: %w", fmt.Errorf("batch: %w", context.DeadlineExceeded)), true},
		{"socket deadline", live, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"net.Error timeout", live, fmt.Errorf("pg: %w", &net.DNSError{Err: "i/o timeout", IsTimeout: true}), true},
		{"Timeout() without Temporary()", live, fmt.Errorf("pg: %w", timeoutErr(true)), true},
		{"Timeout() false", live, timeoutErr(false), false},
		{"canceled is not a timeout", live, context.Canceled, false},
		{"joined", live, errors.Join(errors.New("a"), context.DeadlineExceeded), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := timedOut(tt.ctx, tt.err); got != tt.want {
				t.Errorf("timedOut(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// flakyStore fails every check with err while down is set, and allows otherwise.
type flakyStore struct {
	sluice.Store
	down atomic.Bool
	err  error
}

func (f *flakyStore) Check(context.Context, int64, *sluice.Policy, string, int64) (sluice.Decision, error) {
	if f.down.Load() {
		return sluice.Decision{}, f.err
	}
	return sluice.Decision{Allowed: true, Limit: 3, Remaining: 2, DeniedBy: -1}, nil
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logLines decodes the JSON lines a slog.JSONHandler wrote.
func logLines(t *testing.T, buf *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(buf.bytes()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func newLogged(t *testing.T, store sluice.Store) (*Server, *syncBuffer, *fakeClock) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
storeTimeout: 1s
policies:
  open-api:   {strategy: fixedWindow, limit: 3, window: 1m}
  closed-api: {strategy: fixedWindow, limit: 3, window: 1m, failMode: closed}
`))
	if err != nil {
		t.Fatal(err)
	}
	buf := new(syncBuffer)
	srv, err := New(cfg, store, Options{Logger: slog.New(slog.NewJSONHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	srv.guard.fails.now = clock.Now
	return srv, buf, clock
}

// wantLine checks a log line's level, message and counts.
func wantLine(t *testing.T, line map[string]any, level, msg string, counts map[string]float64) {
	t.Helper()
	if line["level"] != level || line["msg"] != msg {
		t.Errorf("line %v: want %s %q", line, level, msg)
	}
	for k, want := range counts {
		if got, _ := line[k].(float64); got != want {
			t.Errorf("line %s %q: %s = %v, want %v", line["level"], line["msg"], k, line[k], want)
		}
	}
}

// TestFailureLogIsSampled sends bursts of failing checks and checks that each second writes one
// line at most, carrying what happened since the line before.
func TestFailureLogIsSampled(t *testing.T) {
	store := &flakyStore{err: fmt.Errorf("%w: %w", sluice.ErrUnavailable, context.DeadlineExceeded)}
	store.down.Store(true)
	srv, buf, clock := newLogged(t, store)
	ctx := context.Background()
	burst := func(n int, policy string) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { srv.Check(ctx, 0, policy, "k", 1) })
		}
		wg.Wait()
	}

	burst(500, "open-api")
	lines := logLines(t, buf)
	if len(lines) != 1 {
		t.Fatalf("500 failures in one instant wrote %d lines, want 1: %v", len(lines), lines)
	}
	// The first failure writes at once, with its own decision.
	wantLine(t, lines[0], "WARN", "sluice: store failing", map[string]float64{"failures": 1, "timeouts": 1, "errors": 0, "failOpen": 1, "failClosed": 0})
	if lines[0]["lastErr"] == "" {
		t.Error("the line carries no error")
	}

	clock.add(999 * time.Millisecond)
	store.err = errors.New("connection refused")
	burst(100, "closed-api")
	if n := len(logLines(t, buf)); n != 1 {
		t.Fatalf("a second line within the second: %d lines", n)
	}
	clock.add(time.Millisecond)
	burst(1, "closed-api")
	lines = logLines(t, buf)
	if len(lines) != 2 {
		t.Fatalf("%d lines after a second, want 2", len(lines))
	}
	wantLine(t, lines[1], "WARN", "sluice: store failing", map[string]float64{"failures": 600, "timeouts": 499, "errors": 101, "failOpen": 499, "failClosed": 101})
	if lines[1]["lastErr"] != "connection refused" {
		t.Errorf("lastErr %q, want the last error", lines[1]["lastErr"])
	}

	// The store comes back: once a second has passed since the last line, one INFO line.
	store.down.Store(false)
	clock.add(500 * time.Millisecond)
	burst(10, "open-api")
	if n := len(logLines(t, buf)); n != 2 {
		t.Fatalf("a recovery line within the second: %d lines", n)
	}
	clock.add(500 * time.Millisecond)
	burst(10, "open-api")
	lines = logLines(t, buf)
	if len(lines) != 3 {
		t.Fatalf("%d lines after the store came back, want 3", len(lines))
	}
	wantLine(t, lines[2], "INFO", "sluice: store answering again", map[string]float64{"failures": 0, "failOpen": 0})
	if lines[2]["failingFor"] == nil {
		t.Error("the recovery line does not say how long the store failed")
	}
	clock.add(time.Hour)
	burst(10, "open-api")
	if n := len(logLines(t, buf)); n != 3 {
		t.Errorf("%d lines while the store answers, want 3", n)
	}
}

// TestFailureLogRealClock checks a burst against the process clock: it spans a second boundary at
// most once, so it writes two lines at most.
func TestFailureLogRealClock(t *testing.T) {
	store := &flakyStore{err: errors.New("connection refused")}
	store.down.Store(true)
	srv, buf, _ := newLogged(t, store)
	srv.guard.fails.now = nil
	start := time.Now()
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() { srv.Check(context.Background(), 0, "open-api", "k", 1) })
	}
	wg.Wait()
	lines := logLines(t, buf)
	if time.Since(start) < time.Second && len(lines) > 2 || len(lines) == 0 {
		t.Errorf("1000 failures wrote %d lines", len(lines))
	}
}
