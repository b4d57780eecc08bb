package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memory"
)

// guard is the store as the Server's limiter sees it: every call is bounded by the store timeout,
// and a check the store cannot answer is decided by its policy's fail mode. A fail-open decision
// is allowed with every number zero and FailOpen set; a fail-closed one is an error matching
// ErrUnavailable that FailedClosed recognizes. Operations other than checks report ErrUnavailable
// whatever the mode. Failures are counted in the metrics on every call and logged sampled (see
// failLog).
type guard struct {
	inner sluice.Store
	srv   *Server
	fails failLog
}

// bound gives ctx the store timeout; its cancel func records the call's time in
// sluice_store_seconds. A local store never waits, so it is spared the timer and the clock.
func (g *guard) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.srv.opts.Local {
		return ctx, func() {}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.srv.StoreTimeout())
	return ctx, func() {
		cancel()
		g.srv.metrics.storeLatency.Observe(time.Since(start).Seconds())
	}
}

// failed counts a store failure and reports whether err is one: not bad input, which the store
// never sees, not an unknown policy, and not the caller giving up (parent is the caller's context,
// ctx the one bounded by the store timeout). A call that succeeds ends a run of failures.
func (g *guard) failed(parent, ctx context.Context, err error) bool {
	if err == nil {
		g.fails.answered(g.srv.log)
		return false
	}
	if errors.Is(err, sluice.ErrInvalid) || errors.Is(err, sluice.ErrUnknownPolicy) ||
		errors.Is(err, sluice.ErrUnsupported) || parent.Err() != nil {
		return false
	}
	if errors.Is(err, memory.ErrFull) {
		return true // the key cap refused a new key: counted as a refusal, not a store failure
	}
	kind := "error"
	if timedOut(ctx, err) {
		kind = "timeout"
	}
	g.srv.metrics.storeErrors.WithLabelValues(kind).Inc()
	g.fails.failure(kind == "timeout", err)
	return true
}

// timedOut reports whether a store failure is a timeout: the guard's bounded ctx is done, or err
// says so itself. The second matters because a batched check (internal/batch) shares the
// deadline of its batch, the earliest of its callers', and a store may time out on its own socket
// deadline: both fail before this caller's ctx is done.
func timedOut(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// net.Error's Timeout alone: drivers' timeout errors do not all implement Temporary too.
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// decide answers a check the store failed, by the fail mode of policies: open only if all fail open.
func (g *guard) decide(err error, policies ...*sluice.Policy) (sluice.Decision, error) {
	cfg := g.srv.cfg.Load()
	mode := config.FailOpen
	for _, p := range policies {
		if cfg.FailModeOf(p.Name()) == config.FailClosed {
			mode = config.FailClosed
		}
	}
	for _, p := range policies {
		g.srv.metrics.failDecision.WithLabelValues(p.Name(), string(mode)).Inc()
	}
	g.fails.decided(g.srv.log, mode == config.FailClosed)
	if mode == config.FailClosed {
		return sluice.Decision{}, &failClosedError{unavailable(err)}
	}
	return sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}, nil
}

// refuse is the error of a failed call that has no fail mode: ErrUnavailable.
func (g *guard) refuse(err error) error {
	g.fails.flush(g.srv.log)
	return unavailable(err)
}

// failClosedError is a check a fail-closed policy refused because the store could not answer.
type failClosedError struct{ err error }

func (e *failClosedError) Error() string { return e.err.Error() }
func (e *failClosedError) Unwrap() error { return e.err }

// FailedClosed reports whether err is a check refused by its policy's fail mode (failMode: closed)
// because the store could not answer in time, as opposed to an operation that has no fail mode
// failing (Peek, Refund, …). Such an error also matches sluice.ErrUnavailable; front ends use
// FailedClosed to say so on the wire.
func FailedClosed(err error) bool {
	var fc *failClosedError
	return errors.As(err, &fc)
}

// logInterval is the least time between two lines of failLog.
const logInterval = time.Second

// failLog samples the log of store failures: a busy service would otherwise write a line per
// failed call, thousands a second in an outage. It writes at most one line per logInterval,
// carrying the counts since the previous line, from whichever call finds the interval has passed:
// no goroutine or timer. The zero value is ready to use and safe for concurrent use.
type failLog struct {
	now func() time.Time // the clock; nil means time.Now. Tests set it before any call.

	// failing and last let answered, on every successful store call, skip the lock unless a
	// recovery is due. Both are written under mu only.
	failing atomic.Bool  // a failure came after the last recovery line
	last    atomic.Int64 // when the last line was written, in Unix ns; 0 before the first

	mu       sync.Mutex // guards the counts below and since
	since    time.Time  // the first failure of the current run
	failures int64      // store calls failed since the last line, as are the counts below
	timeouts int64      // of which timed out
	open     int64      // decisions by the fail mode, open and closed
	closed   int64
	lastErr  error
}

func (l *failLog) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// due reports whether logInterval has passed since the last line at now.
func (l *failLog) due(now time.Time) bool {
	last := l.last.Load()
	return last == 0 || now.Sub(time.Unix(0, last)) >= logInterval
}

// failure counts one failed store call.
func (l *failLog) failure(timeout bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.failing.Load() {
		l.since = l.clock()
		l.failing.Store(true)
	}
	l.failures++
	if timeout {
		l.timeouts++
	}
	l.lastErr = err
}

// decided counts one decision by the fail mode, then flushes.
func (l *failLog) decided(log *slog.Logger, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if closed {
		l.closed++
	} else {
		l.open++
	}
	l.flushLocked(log)
}

// flush writes a WARN line of the counts if any are pending and logInterval has passed since the
// last line.
func (l *failLog) flush(log *slog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(log)
}

// flushLocked is flush for a caller that holds mu.
func (l *failLog) flushLocked(log *slog.Logger) {
	now := l.clock()
	if l.failures+l.open+l.closed == 0 || !l.due(now) {
		return
	}
	log.Warn("sluice: store failing", l.attrs()...)
	l.reset(now)
}

// answered notes a store call that succeeded: the first after a run of failures writes an INFO
// line, with the counts not yet logged, once logInterval has passed since the last line (until
// then, later successes try again).
func (l *failLog) answered(log *slog.Logger) {
	if !l.failing.Load() || !l.due(l.clock()) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if !l.failing.Load() || !l.due(now) {
		return // another call logged first
	}
	l.failing.Store(false)
	log.Info("sluice: store answering again", append(l.attrs(), "failingFor", now.Sub(l.since).Round(time.Millisecond))...)
	l.reset(now)
}

// attrs are the counts since the last line. The caller holds mu.
func (l *failLog) attrs() []any {
	errMsg := ""
	if l.lastErr != nil {
		errMsg = l.lastErr.Error()
	}
	return []any{"failures", l.failures, "timeouts", l.timeouts, "errors", l.failures - l.timeouts,
		"failOpen", l.open, "failClosed", l.closed, "lastErr", errMsg}
}

// reset starts the counts of the next line at now. The caller holds mu.
func (l *failLog) reset(now time.Time) {
	l.last.Store(now.UnixNano())
	l.failures, l.timeouts, l.open, l.closed, l.lastErr = 0, 0, 0, 0, nil
}

// unavailable marks a store failure as ErrUnavailable. Unlike internal/storeerr it keeps only the
// cause's text: a store timeout (the guard's own context.DeadlineExceeded) must not read as the
// caller's deadline to the front ends, which answer that one differently.
func unavailable(err error) error {
	if errors.Is(err, sluice.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %v", sluice.ErrUnavailable, err)
}

// leasing marks the context of a check taking a lease (Server.Check): a store failure is then
// returned as ErrUnavailable, not decided by the fail mode, since an allowed answer would be taken
// for units the store granted. The server applies the fail mode to the check itself.
type leasing struct{}

func (g *guard) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	d, err := g.inner.Check(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		if ctx.Value(leasing{}) != nil {
			return sluice.Decision{}, g.refuse(err)
		}
		return g.decide(err, p)
	}
	return d, err
}

func (g *guard) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.CheckMany(bounded, now, p, keys, cost, out)
	if g.failed(ctx, bounded, err) {
		var full *memory.FullError
		refused := errors.As(err, &full)
		d, err := g.decide(err, p)
		if refused && err == nil {
			// Only the keys the memory store's cap refused are the fail mode's: the others were
			// decided, and a denial among them must stand.
			for _, i := range full.Refused {
				out[i] = d
			}
			return nil
		}
		for i := range out {
			out[i] = d
		}
		return err
	}
	return err
}

func (g *guard) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.CheckAll(bounded, now, ps, items, out)
	if g.failed(ctx, bounded, err) {
		d, err := g.decide(err, ps...)
		for i := range out {
			out[i] = d
		}
		return err
	}
	return err
}

func (g *guard) Peek(ctx context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	d, err := g.inner.Peek(bounded, now, p, key)
	if g.failed(ctx, bounded, err) {
		return d, g.refuse(err)
	}
	return d, err
}

func (g *guard) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	f, err := g.inner.Forecast(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return f, g.refuse(err)
	}
	return f, err
}

func (g *guard) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.Refund(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return g.refuse(err)
	}
	return err
}

// check counts a store failure of a call that has no fail mode (concurrency limits): it is
// ErrUnavailable, and anything else, a holder not holding its slot included, is as it was.
func (g *guard) check(parent, ctx context.Context, err error) error {
	if errors.Is(err, concurrency.ErrNotHeld) || !g.failed(parent, ctx, err) {
		return err
	}
	return g.refuse(err)
}

func (g *guard) Debit(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.Debit(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return g.refuse(err)
	}
	return err
}

func (g *guard) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.Reset(bounded, p, key)
	if g.failed(ctx, bounded, err) {
		return g.refuse(err)
	}
	return err
}
