// Package enforce applies a sluice stream's throttle decisions locally, so that an API or a
// gateway enforces them without a call to the service per request. An Enforcer subscribes,
// through a *client.Client, to a stream's decisions (the server's
// GET /v1/streams/{stream}/decisions/watch, as Server-Sent Events) in one goroutine and keeps,
// per key, the instant its block ends; asking about a key is a map lookup.
//
// # The blocking rule
//
// A decision for key K over window [start, end) blocks K until end + (end − start): through the
// window after the one that went over. A decision arrives once its window has closed, so when
// decisions arrive promptly a key over quota in one window is throttled for the rest of the next.
// A decision applied after that instant is stale and blocks nothing, so an Enforcer may start from
// any offset (After 0 replays a stream's history without blocking anyone for it); a caller that
// restarts can still store Offset and start After it to skip the replay. Windows are in the
// server's event time and now is Config.Now, so the two clocks should agree. Two decisions for
// one key (from two queries on the stream, say) block it until the later end.
//
// # Failures
//
// When the connection drops or the server reports an error, the enforcer reconnects with
// backoff and resumes after the last decision it applied (Last-Event-ID), so none is missed or
// applied twice. Meanwhile the blocks already known stay until they end, and new decisions take
// effect once it is back. It never blocks a key it has no decision for: an enforcer that cannot
// reach the server fails open by construction. The failures are *client.Error values, as the
// client's calls return.
package enforce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// Defaults of Config.
const (
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
	DefaultIdleTimeout = time.Minute // four of the server's 15 s keep-alives
)

// Config configures an Enforcer. The zero value is ready to use.
type Config struct {
	// After is the decision offset to start after, such as one a previous Enforcer's Offset
	// returned and the caller stored; 0 starts at the stream's first decision.
	After int64
	// Now is the clock blocks are computed and checked against; nil means time.Now. Tests pin
	// it. It is called from every goroutine that calls Blocked, so it must be safe for that.
	Now func() time.Time
	// MinBackoff and MaxBackoff bound the wait before a reconnection: it starts at MinBackoff,
	// doubles after each failed attempt up to MaxBackoff, and is jittered so that a fleet of
	// enforcers does not reconnect in step. 0 means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout is how long a connection may stay silent before the enforcer takes it for dead
	// and reconnects: the server sends a keep-alive after 15 s of quiet, but a half-open
	// connection (a NAT that forgot it, a host that vanished) never reports its end. 0 means
	// DefaultIdleTimeout, a negative value no limit.
	IdleTimeout time.Duration
	// OnError, if set, is told of every failure of the subscription (a dropped connection, a
	// refusal, an error event, a decision that does not parse), from the enforcer's goroutine:
	// until it reconnects the enforcer learns of no new decision, so an outage should not be
	// silent. It must not call Close, which waits for that goroutine.
	OnError func(error)
}

// Enforcer holds the blocks of one stream's decisions, kept current by a goroutine of its own
// until Close (see the package documentation for the rule). Make one with New; the zero value
// is not usable.
//
// All methods are safe for concurrent use. Blocked and Allow cost a map lookup under a read lock
// and allocate nothing; ended blocks are dropped by the enforcer's goroutine as decisions come,
// not by a timer per key.
type Enforcer struct {
	c    *client.Client
	path string // the watch route, without its query
	cfg  Config

	mu      sync.RWMutex
	until   map[string]int64 // mu guards until: key → end of its block (epoch ms), ended ones included until a sweep
	sweepAt int              // mu guards sweepAt: the size of until at which apply sweeps it next

	offset atomic.Int64 // the last decision offset applied; written by the goroutine only

	ctx     context.Context // ends with Close
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine returns
	closing sync.Once
}

// minSweep is the size below which until is never swept: a sweep then costs more than it saves.
const minSweep = 1024

// New subscribes to stream's decisions on c's server and returns an Enforcer of them, once the
// server has accepted the subscription; ctx (or, without a deadline, c's Options.Timeout) bounds
// that first connection only. Its errors are those of the client's calls: a server that cannot
// be reached matches sluice.ErrUnavailable, a refused token client.ErrUnauthorized, and a server
// without stream mode is a *client.Error of Code "not_found". After that, the Enforcer
// reconnects on its own until Close.
func New(ctx context.Context, c *client.Client, stream string, cfg Config) (*Enforcer, error) {
	if c == nil {
		return nil, errors.New("enforce: the client is nil")
	}
	if stream == "" {
		return nil, errors.New("enforce: stream is empty")
	}
	if cfg.After < 0 {
		return nil, fmt.Errorf("enforce: After must not be negative, got %d", cfg.After)
	}
	e := newEnforcer(cfg)
	e.c = c
	e.path = "/v1/streams/" + url.PathEscape(stream) + "/decisions/watch"
	e.ctx, e.cancel = context.WithCancel(context.Background())
	conn, err := e.connect(ctx)
	if err != nil {
		e.cancel()
		return nil, err
	}
	go e.run(conn)
	return e, nil
}

// newEnforcer returns an Enforcer with cfg's defaults filled, not yet subscribed.
func newEnforcer(cfg Config) *Enforcer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	e := &Enforcer{cfg: cfg, until: map[string]int64{}, sweepAt: minSweep, done: make(chan struct{})}
	e.offset.Store(cfg.After)
	return e
}

// Blocked reports whether key is blocked now and, if so, until when. It does not allocate.
func (e *Enforcer) Blocked(key string) (until time.Time, blocked bool) {
	e.mu.RLock()
	u, ok := e.until[key]
	e.mu.RUnlock()
	// Most keys are not in the map: only those read the clock.
	if !ok || e.cfg.Now().UnixMilli() >= u {
		return time.Time{}, false
	}
	return time.UnixMilli(u), true
}

// Allow reports whether key may proceed: it is not blocked.
func (e *Enforcer) Allow(key string) bool {
	_, blocked := e.Blocked(key)
	return !blocked
}

// Offset is the offset of the last decision applied (Config.After before the first).
// A caller that stores it can start a later Enforcer after it instead of replaying the stream.
func (e *Enforcer) Offset() int64 { return e.offset.Load() }

// Close ends the subscription and waits for the enforcer's goroutine to return. The blocks
// already known still answer Blocked. Close is idempotent and always returns nil.
func (e *Enforcer) Close() error {
	e.closing.Do(e.cancel)
	<-e.done
	return nil
}

// conn is one subscription: its answer, and the cancellation of its request.
type conn struct {
	resp   *http.Response
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// connect opens a subscription after the current offset. start bounds the wait for the answer
// (or the client's Options.Timeout when it has no deadline); the body lives until Close or the
// connection ends.
func (e *Enforcer) connect(start context.Context) (*conn, error) {
	ctx, cancel := context.WithCancelCause(e.ctx)
	after := strconv.FormatInt(e.offset.Load(), 10)
	h := make(http.Header, 3)
	h.Set("Accept", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// The server resumes from Last-Event-ID; ?after says the same to a proxy that drops it.
	h.Set("Last-Event-ID", after)
	resp, err := e.c.Stream(ctx, start, e.path+"?after="+after, h)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		// A proxy's page, say: nothing to subscribe to.
		resp.Body.Close()
		cancel(nil)
		return nil, &client.Error{Path: e.path, Status: resp.StatusCode, Code: "unavailable",
			Message: fmt.Sprintf("answered Content-Type %q, want text/event-stream", resp.Header.Get("Content-Type")),
			Err:     sluice.ErrUnavailable}
	}
	return &conn{resp: resp, ctx: ctx, cancel: cancel}, nil
}

// run is the enforcer's goroutine: it reads c until it ends, then reconnects with backoff, until
// Close.
func (e *Enforcer) run(c *conn) {
	defer close(e.done)
	backoff := e.cfg.MinBackoff
	for {
		healthy, err := e.consume(c)
		if e.ctx.Err() != nil {
			return
		}
		if healthy {
			backoff = e.cfg.MinBackoff
		}
		e.report(err)
		for {
			if !e.pause(backoff) {
				return
			}
			backoff = min(2*backoff, e.cfg.MaxBackoff)
			if c, err = e.connect(e.ctx); err == nil {
				break
			}
			if e.ctx.Err() != nil {
				return
			}
			e.report(err)
		}
	}
}

// pause waits about d (between d/2 and d, so that enforcers spread out), or until Close; it
// reports whether to go on.
func (e *Enforcer) pause(d time.Duration) bool {
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

func (e *Enforcer) report(err error) {
	if e.cfg.OnError != nil && err != nil {
		e.cfg.OnError(err)
	}
}

// errIdle is the cause of a connection cut for its silence.
var errIdle = errors.New("no data within the idle timeout")

// consume applies c's decisions until it ends, and returns why. It calls the connection healthy
// when it delivered something and did not end in an error event: only then does the backoff
// start over, so that a server (or proxy) that accepts and hangs up at once is not hammered.
func (e *Enforcer) consume(c *conn) (healthy bool, err error) {
	defer c.cancel(nil)
	defer c.resp.Body.Close()
	body := &watchedReader{r: c.resp.Body}
	if e.cfg.IdleTimeout > 0 {
		body.idle = e.cfg.IdleTimeout
		body.timer = time.AfterFunc(body.idle, func() { c.cancel(errIdle) })
		defer body.timer.Stop()
	}
	p := newSSEParser(body)
	for {
		ev, err := p.next()
		if err != nil {
			if cause := context.Cause(c.ctx); cause != nil {
				err = cause
			}
			if err == io.EOF {
				err = errors.New("the server ended the stream")
			}
			return body.n > 0, &client.Error{Path: e.path, Message: err.Error(), Err: err}
		}
		switch ev.typ {
		case "decision":
			e.applyEvent(ev)
		case "error":
			return false, e.errorEvent(ev.data)
		}
	}
}

// watchedReader counts what it reads and, when it has a timer, puts it off by idle at each read.
type watchedReader struct {
	r     io.Reader
	n     int64
	idle  time.Duration
	timer *time.Timer
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.n += int64(n)
		if w.timer != nil {
			w.timer.Reset(w.idle)
		}
	}
	return n, err
}

// errorEvent is the error an "event: error" reports: a *client.Error of Status 200 (the stream's) and
// the event's code, matching sluice.ErrUnavailable when the server could not read decisions.
func (e *Enforcer) errorEvent(data string) error {
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal([]byte(data), &body) != nil || body.Error == "" {
		body.Error = "error event " + strconv.Quote(truncate(data))
	}
	err := &client.Error{Path: e.path, Status: http.StatusOK, Code: body.Code, Message: body.Error}
	switch body.Code {
	case "unavailable", "internal", "":
		err.Err = sluice.ErrUnavailable
	}
	return err
}

// decision is what the enforcer reads of a stream.Decision (it does not import package stream,
// which would bring PostgreSQL's driver into every binary that enforces limits).
type decision struct {
	Offset      int64  `json:"offset"`
	Key         string `json:"key"`
	WindowStart int64  `json:"windowStart"`
	WindowEnd   int64  `json:"windowEnd"`
}

// applyEvent applies a decision event, skipping one at or before the offset already applied.
func (e *Enforcer) applyEvent(ev sseEvent) {
	var d decision
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		e.report(fmt.Errorf("enforce: %s: decision %s: %w", e.path, truncate(ev.data), err))
		return
	}
	if d.Offset <= e.offset.Load() {
		return // a repeat
	}
	if err := e.apply(d); err != nil {
		e.report(fmt.Errorf("enforce: %s: decision at offset %d: %w", e.path, d.Offset, err))
	}
	e.offset.Store(d.Offset)
}

// apply blocks d's key through the window after d's, unless that has ended.
func (e *Enforcer) apply(d decision) error {
	if d.Key == "" {
		return errors.New("key is empty")
	}
	now := e.cfg.Now().UnixMilli()
	until, ok := blockEnd(d.WindowStart, d.WindowEnd)
	if !ok {
		return fmt.Errorf("window [%d, %d) is not a window", d.WindowStart, d.WindowEnd)
	}
	if until <= now {
		return nil // stale
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if until > e.until[d.Key] {
		e.until[d.Key] = until
	}
	if len(e.until) >= e.sweepAt {
		e.sweep(now)
	}
	return nil
}

// sweep drops the blocks that ended by now and sets the next sweep at twice the size left, so
// that sweeps cost O(1) per decision. The caller holds mu.
func (e *Enforcer) sweep(now int64) {
	for k, u := range e.until {
		if u <= now {
			delete(e.until, k)
		}
	}
	e.sweepAt = max(2*len(e.until), minSweep)
}

// blockEnd is end + (end − start), the end of the window after [start, end) (epoch ms), or false
// when [start, end) is not a window. It saturates rather than overflow.
func blockEnd(start, end int64) (int64, bool) {
	if start < 0 || end <= start {
		return 0, false
	}
	w := end - start
	if end > math.MaxInt64-w {
		return math.MaxInt64, true
	}
	return end + w, true
}

// truncate shortens outside text quoted in an error.
func truncate(s string) string {
	const most = 200
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}
