package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memory"
)

// guard is the store as the Server's limiter sees it: every call is bounded by the store timeout,
// and a check the store cannot answer is decided by its policy's fail mode. A fail-open decision
// is allowed with every number zero; a fail-closed one is ErrUnavailable. Operations other than
// checks report ErrUnavailable whatever the mode.
type guard struct {
	inner sluice.Store
	srv   *Server
}

// bound gives ctx the store timeout. The memory store never waits, so it is spared the timer.
func (g *guard) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, local := g.inner.(*memory.Store); local {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.srv.cfg.Load().StoreTimeout)
}

// failed counts a store failure and reports whether err is one: not bad input, which the store
// never sees, not an unknown policy, and not the caller giving up (parent is the caller's context,
// ctx the one bounded by the store timeout).
func (g *guard) failed(parent, ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, sluice.ErrInvalid) || errors.Is(err, sluice.ErrUnknownPolicy) ||
		errors.Is(err, sluice.ErrUnsupported) || parent.Err() != nil {
		return false
	}
	kind := "error"
	if ctx.Err() != nil {
		kind = "timeout"
	}
	g.srv.metrics.storeErrors.WithLabelValues(kind).Inc()
	g.srv.log.Warn("sluice: store failed", "kind", kind, "err", err)
	return true
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
	if mode == config.FailClosed {
		return sluice.Decision{}, unavailable(err)
	}
	return sluice.Decision{Allowed: true, DeniedBy: -1}, nil
}

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
			return sluice.Decision{}, unavailable(err)
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
		d, err := g.decide(err, p)
		for i := range out {
			out[i] = d
		}
		return err
	}
	return err
}

func (g *guard) CheckAll(ctx context.Context, now int64, ops []sluice.Op, out []sluice.Decision) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.CheckAll(bounded, now, ops, out)
	if g.failed(ctx, bounded, err) {
		policies := make([]*sluice.Policy, len(ops))
		for i, op := range ops {
			policies[i] = op.Policy
		}
		d, err := g.decide(err, policies...)
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
		return d, unavailable(err)
	}
	return d, err
}

func (g *guard) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	f, err := g.inner.Forecast(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return f, unavailable(err)
	}
	return f, err
}

func (g *guard) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.Refund(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return unavailable(err)
	}
	return err
}

// check counts a store failure of a call that has no fail mode (concurrency limits): it is
// ErrUnavailable, and anything else, a holder not holding its slot included, is as it was.
func (g *guard) check(parent, ctx context.Context, err error) error {
	if errors.Is(err, sluice.ErrNotHeld) || !g.failed(parent, ctx, err) {
		return err
	}
	return unavailable(err)
}

// Debit implements sluice.Debiter when the store does; it answers sluice.ErrUnsupported otherwise.
func (g *guard) Debit(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	d, ok := g.inner.(sluice.Debiter)
	if !ok {
		return sluice.ErrUnsupported
	}
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := d.Debit(bounded, now, p, key, cost)
	if g.failed(ctx, bounded, err) {
		return unavailable(err)
	}
	return err
}

func (g *guard) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	bounded, cancel := g.bound(ctx)
	defer cancel()
	err := g.inner.Reset(bounded, p, key)
	if g.failed(ctx, bounded, err) {
		return unavailable(err)
	}
	return err
}
