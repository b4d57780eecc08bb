// Package server is sluice's service layer: the limiter that every front end (the HTTP JSON API, the
// forward-auth gate, the native gRPC API, Envoy's rate-limit API) asks, built from a config file,
// kept current by Reload, bounded by the store timeout, and measured.
//
// Front ends call the Server's operations and map its errors to their codes with Code: bad input is
// CodeInvalid, an unknown policy CodeNotFound, a store that cannot answer under a fail-closed policy
// CodeUnavailable. A denial is a decision, never an error.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store/nearcache"
)

// Options configure a Server beyond its config file.
type Options struct {
	// AllowClientTime lets a request carry its own instant (now, epoch ms) for deterministic
	// replay and tests. Off, a request that carries one is refused.
	AllowClientTime bool
	// Logger receives reloads and store failures; nil means slog.Default().
	Logger *slog.Logger
	// Local says the store decides in this process without waiting, as the memory store does:
	// the server then bounds its calls by no timeout (StoreTimeout is 0) and puts neither a near
	// cache nor leases in front of it, which would only copy what it answers at memory speed.
	Local bool
	// Overrides keeps the per-key overrides the server applies and serves (Overrides): a shared
	// store's backend, so that every process sees every change. Nil keeps them in this process: in
	// memory, or in the config's overrides.file.
	Overrides overrides.Backend
	// Keys, when set, is told the policy, key and outcome of every decided check, for the
	// console's top keys. It is called on the check's path and must return in a few ns.
	Keys KeyObserver
}

// KeyObserver sees the keys that checks decide (Options.Keys). Denied means the decision was a
// denial; a fail-open decision is allowed. Checks that failed are not observed.
type KeyObserver interface {
	Observe(policy, key string, denied bool)
}

// Server answers checks for every front end. It is safe for concurrent use.
type Server struct {
	opts    Options
	log     *slog.Logger
	lim     *sluice.Limiter
	guard   *guard
	metrics *metrics
	leaser  *lease.Leaser        // answers the checks of policies with lease: true; nil over the memory store
	table   *overrides.Table     // the per-key overrides, applied by lim on every call
	slots   *concurrency.Limiter // the store's concurrency limits; nil if it has none
	timeout time.Duration        // the store's default timeout, for a config that sets none
	// answered is set once the store has answered a Ping: until then Ready fails whatever the
	// fail modes, so that a store unreachable from the start (a typo in its URL) is never ready.
	answered atomic.Bool

	mu    sync.Mutex                  // serializes changes to the policy set, and guards extra
	extra map[string][]*sluice.Policy // policies front ends add beside the config's, by owner
	cfg   atomic.Pointer[config.Config]
}

// New returns a Server over store with cfg's policies.
//
// Over any store but a local one (Options.Local: it answers as fast as a cache would), the
// limiter asks a near cache of denials (package store/nearcache) in front of the guard: the
// policies with nearCache: true in the config in force, reloads included, answer a key's denial locally until it
// ends, counted in sluice_near_cache_answers_total. The cache sits outside the guard because what
// it answers never touches the store: a local answer costs no store timer, and when the store
// fails, the fail mode decides only what went to the store (the other keys of a CheckMany), not
// what the cache already knew to be denied.
//
// Over those stores too, the policies with lease: true answer Check from leased slices of each
// key's limit (package lease): one store call per lease, the rest decided in this process. A
// Check that carries its own instant (AllowClientTime) goes to the store. Close returns what the
// leases did not spend.
func New(cfg *config.Config, store sluice.Store, opts Options) (*Server, error) {
	s := &Server{opts: opts, log: opts.Logger, metrics: newMetrics(store), timeout: DefaultStoreTimeout}
	if st, ok := store.(interface{ DefaultTimeout() time.Duration }); ok {
		s.timeout = st.DefaultTimeout()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.guard = &guard{inner: store, srv: s}
	if c, ok := store.(concurrency.Store); ok {
		s.slots = concurrency.New(c)
	}
	s.cfg.Store(cfg)
	var front sluice.Store = s.guard
	if !opts.Local {
		front = nearcache.New(s.guard, nearcache.Config{
			Policies: func(name string) bool { return s.cfg.Load().NearCache(name) },
			OnLocal:  func(policy string) { s.metrics.nearCache.WithLabelValues(policy).Inc() },
		})
	}
	lim, err := sluice.New(front, cfg.SluicePolicies()...)
	if err != nil {
		return nil, err
	}
	s.lim = lim
	oc := overrides.Config{Backend: opts.Overrides, Refresh: cfg.Overrides.Refresh, Resolve: s.plan, Background: true}
	if opts.Overrides == nil {
		oc.File = cfg.Overrides.File
	}
	if s.table, err = overrides.New(oc); err != nil {
		return nil, err
	}
	lim.SetResolver(s.table)
	if !opts.Local {
		s.leaser = lease.New(lim, lease.Config{})
	}
	return s, nil
}

// plan resolves the overrides' plans: plan "" is any policy in force (front ends' included), and
// a plan one of the config's policy's plans.
func (s *Server) plan(policy, plan string) (*sluice.Policy, bool) {
	if plan == "" {
		return s.lim.Policy(policy)
	}
	for _, p := range s.cfg.Load().Policies {
		if p.Name() == policy {
			q, ok := p.Plans[plan]
			return q, ok
		}
	}
	return nil, false
}

// Overrides is the Server's table of per-key overrides: set, get, list and delete them through
// it. Every check applies them (decisions say so: Decision.Override, Decision.Plan).
func (s *Server) Overrides() *overrides.Table { return s.table }

// Close returns the unspent units of the policies' leases to the store (package lease) and stops
// their background work and the overrides' subscription, within ctx. It is idempotent; Checks after
// it go to the store.
func (s *Server) Close(ctx context.Context) error {
	s.table.Close()
	if s.leaser == nil {
		return nil
	}
	return s.leaser.Close(ctx)
}

// DefaultStoreTimeout bounds the calls of a store that names no default timeout of its own
// (a DefaultTimeout method), when the config sets none.
const DefaultStoreTimeout = 100 * time.Millisecond

// StoreTimeout is the bound on every store call in force: the config's storeTimeout, or the
// store's default (its DefaultTimeout method, measured for it; docs/operations.md). 0 means none:
// a local store (Options.Local) never waits.
func (s *Server) StoreTimeout() time.Duration {
	if s.opts.Local {
		return 0
	}
	if d := s.cfg.Load().StoreTimeout; d > 0 {
		return d
	}
	return s.timeout
}

// Config returns the configuration in force.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// Reload swaps in cfg's policies, fail modes and store timeout atomically; unchanged policies keep
// their state. The store and the listen addresses are read at start only: a change to them is
// logged and takes effect at the next restart.
func (s *Server) Reload(cfg *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cfg.Load()
	if err := s.install(cfg); err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	s.cfg.Store(cfg)
	s.reresolve()
	s.metrics.reloads.WithLabelValues("ok").Inc()
	if cfg.Store != old.Store || cfg.HTTP != old.HTTP || cfg.GRPC != old.GRPC {
		s.log.Warn("sluice: store and listen addresses change only at restart",
			"store", config.RedactURL(cfg.Store), "http", cfg.HTTP, "grpc", cfg.GRPC)
	}
	s.log.Info("sluice: config reloaded", "policies", len(cfg.Policies))
	return nil
}

// SetExtraPolicies installs policies a front end derives from its own files (Envoy's rate-limit
// rules) beside the config's, replacing what owner set before. They survive Reload; one whose name
// a config policy also has is an error, and changes nothing.
func (s *Server) SetExtraPolicies(owner string, policies []*sluice.Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, had := s.extra[owner]
	if s.extra == nil {
		s.extra = map[string][]*sluice.Policy{}
	}
	s.extra[owner] = policies
	if err := s.install(s.cfg.Load()); err != nil {
		if had {
			s.extra[owner] = prev
		} else {
			delete(s.extra, owner)
		}
		return err
	}
	return nil
}

// reresolve has the overrides resolve their plans against the policies now in force: an override
// keeps applying the plan it names as the plan changes, and stops when its plan is gone.
func (s *Server) reresolve() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.table.Reload(ctx); err != nil {
		s.log.Warn("sluice: overrides not reloaded after the config; the next refresh will", "err", err)
		s.table.Kick()
	}
}

// install sets the limiter's policies: cfg's and every front end's. The caller holds mu.
func (s *Server) install(cfg *config.Config) error {
	all := cfg.SluicePolicies()
	for _, ps := range s.extra {
		all = append(all, ps...)
	}
	return s.lim.SetPolicies(all...)
}

// ReloadFailed counts a configuration that could not be loaded; the old one keeps serving.
func (s *Server) ReloadFailed(err error) {
	s.metrics.reloads.WithLabelValues("error").Inc()
	s.log.Error("sluice: config rejected; the previous one keeps serving", "err", err)
}

// Limiter is the Server's limiter, for front ends that need its policies.
func (s *Server) Limiter() *sluice.Limiter { return s.lim }

// RegisterMetrics adds collectors to the metrics MetricsHandler serves, such as stream mode's.
func (s *Server) RegisterMetrics(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.metrics.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// MetricsHandler serves the Prometheus metrics.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// Ready reports whether the Server can decide checks: a config is loaded, and either the store
// answers its Ping within the store timeout (on Redis: every slot's master takes a write) or
// every policy in force fails open, once the store has answered since start (Probe or Ready). In
// that second case checks are decided by the fail mode, which is what the operator asked for: behind a load balancer, every instance would go unready at once
// over one store outage, and fail-open would become failing everything. Operations other than
// checks (Peek, Refund, Admit…) still fail while the store does; the fail-mode metrics show it.
// The error otherwise says why: no config, or the store's failure and the policies that fail
// closed.
func (s *Server) Ready(ctx context.Context) error {
	cfg := s.cfg.Load()
	if cfg == nil {
		return errors.New("server: not ready: no config loaded")
	}
	p, ok := s.guard.inner.(interface{ Ping(context.Context) error })
	if !ok {
		return nil
	}
	ctx, cancel := s.guard.bound(ctx)
	defer cancel()
	err := p.Ping(ctx)
	if err == nil {
		s.answered.Store(true)
		select {
		case <-s.table.Loaded():
		default:
			return errors.New("server: not ready: the overrides are not loaded from the store yet")
		}
		return nil
	}
	if !s.answered.Load() {
		return fmt.Errorf("server: not ready: the store has not answered since start: %w", err)
	}
	var closed []string // the policies in force, front ends' included, that fail closed
	for _, pol := range s.lim.Policies() {
		if cfg.FailModeOf(pol.Name()) == config.FailClosed {
			closed = append(closed, pol.Name())
		}
	}
	if len(closed) == 0 {
		return nil
	}
	more := ""
	if len(closed) > 5 {
		closed, more = closed[:5], fmt.Sprintf(" and %d more", len(closed)-5)
	}
	return fmt.Errorf("server: not ready: the store cannot answer, and policies %q%s fail closed: %w", closed, more, err)
}

// Probe asks the store to answer (its Ping) within ctx, not the store timeout: at start, a first
// connection may take longer than a call. Nil means it answered, and Ready then follows the fail
// modes; a store without Ping always answers.
func (s *Server) Probe(ctx context.Context) error {
	p, ok := s.guard.inner.(interface{ Ping(context.Context) error })
	if !ok {
		s.answered.Store(true)
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		return err
	}
	s.answered.Store(true)
	return nil
}

// Code classifies an error of the Server's operations for a front end to map.
type Code int

const (
	CodeOK            Code = iota
	CodeInvalid            // bad input: HTTP 400, gRPC INVALID_ARGUMENT
	CodeNotFound           // unknown policy: HTTP 404, gRPC NOT_FOUND
	CodeUnavailable        // the store could not answer and the policy fails closed: 503, UNAVAILABLE
	CodeUnimplemented      // the store does not support the operation for the strategy: 501, UNIMPLEMENTED
	CodeNotHeld            // a heartbeat of a concurrency slot not held: 409, FAILED_PRECONDITION
	CodeInternal           // anything else: 500, INTERNAL
)

// CodeOf classifies err.
func CodeOf(err error) Code {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, sluice.ErrInvalid):
		return CodeInvalid
	case errors.Is(err, sluice.ErrUnknownPolicy):
		return CodeNotFound
	case errors.Is(err, sluice.ErrUnavailable), errors.Is(err, sluice.ErrClosed):
		return CodeUnavailable
	case errors.Is(err, sluice.ErrUnsupported):
		return CodeUnimplemented
	case errors.Is(err, concurrency.ErrNotHeld):
		return CodeNotHeld
	}
	return CodeInternal
}

// at applies a client-given instant (epoch ms, 0 for none) to ctx.
func (s *Server) at(ctx context.Context, now int64) (context.Context, error) {
	switch {
	case now == 0:
		return ctx, nil
	case !s.opts.AllowClientTime:
		return nil, &sluice.InvalidError{Field: "now", Reason: "client time is refused unless the server runs with --allow-client-time"}
	case now < 0:
		return nil, &sluice.InvalidError{Field: "now", Reason: fmt.Sprintf("must be positive epoch ms, got %d", now)}
	}
	return sluice.WithNow(ctx, now), nil
}

// observe records the latency of one request of op.
func (s *Server) observe(op string, start time.Time) {
	s.metrics.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// count records the outcomes of policy's decisions, or one error.
func (s *Server) count(policy string, allowed, denied int, err error) {
	if _, known := s.lim.Policy(policy); !known {
		policy = unknownPolicy
	}
	if err != nil {
		s.metrics.decisions.WithLabelValues(policy, "error").Inc()
		return
	}
	if allowed > 0 {
		s.metrics.decisions.WithLabelValues(policy, "allowed").Add(float64(allowed))
	}
	if denied > 0 {
		s.metrics.decisions.WithLabelValues(policy, "denied").Add(float64(denied))
	}
}

// outcome is 1, 0 for an allowed decision and 0, 1 for a denied one.
func outcome(allowed bool) (int, int) {
	if allowed {
		return 1, 0
	}
	return 0, 1
}

// Check consumes cost for key under policy. now is a client-given instant, 0 for the server's.
func (s *Server) Check(ctx context.Context, now int64, policy, key string, cost int64) (sluice.Decision, error) {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	var d sluice.Decision
	switch {
	case err != nil:
	case now == 0 && s.leaser != nil && s.cfg.Load().Lease(policy) && s.table.Resolve(policy, key, 0) == nil:
		// A key with an override is checked at the store: its leases would be sized for the
		// policy, not for what applies to it.
		d, err = s.leaser.Check(context.WithValue(ctx, leasing{}, true), policy, key, cost)
		if p, ok := s.lim.Policy(policy); ok && errors.Is(err, sluice.ErrUnavailable) && ctx.Err() == nil {
			d, err = s.guard.decide(err, p) // the check, not the lease, fails open or closed
		}
	default:
		d, err = s.lim.Check(ctx, policy, key, cost)
	}
	a, n := outcome(d.Allowed)
	s.count(policy, a, n, err)
	if s.opts.Keys != nil && err == nil {
		s.opts.Keys.Observe(policy, key, !d.Allowed)
	}
	s.observe("check", start)
	return d, err
}

// CheckMany checks each key independently at one instant.
func (s *Server) CheckMany(ctx context.Context, now int64, policy string, keys []string, cost int64) ([]sluice.Decision, error) {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	var ds []sluice.Decision
	if err == nil {
		ds, err = s.lim.CheckMany(ctx, policy, keys, cost)
	}
	allowed := 0
	for i, d := range ds {
		if d.Allowed {
			allowed++
		}
		if s.opts.Keys != nil && err == nil {
			s.opts.Keys.Observe(policy, keys[i], !d.Allowed)
		}
	}
	s.count(policy, allowed, len(ds)-allowed, err)
	s.observe("check_many", start)
	return ds, err
}

// CheckAll checks items together, all or nothing.
func (s *Server) CheckAll(ctx context.Context, now int64, items []sluice.Item) (sluice.Decision, error) {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	var d sluice.Decision
	if err == nil {
		d, err = s.lim.CheckAll(ctx, items...)
	}
	a, n := outcome(d.Allowed)
	for i, it := range items {
		s.count(it.Policy, a, n, err)
		if s.opts.Keys != nil && err == nil {
			// Only the item that denied is a denial of its key; the others were not spent.
			s.opts.Keys.Observe(it.Policy, it.Key, !d.Allowed && d.DeniedBy == i)
		}
	}
	s.observe("check_all", start)
	return d, err
}

// Peek reports key's state without consuming.
func (s *Server) Peek(ctx context.Context, now int64, policy, key string) (sluice.Decision, error) {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	var d sluice.Decision
	if err == nil {
		d, err = s.lim.Peek(ctx, policy, key)
	}
	s.observe("peek", start)
	return d, err
}

// Forecast projects key's capacity for checks of cost.
func (s *Server) Forecast(ctx context.Context, now int64, policy, key string, cost int64) (sluice.Forecast, error) {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	var f sluice.Forecast
	if err == nil {
		f, err = s.lim.Forecast(ctx, policy, key, cost)
	}
	s.observe("forecast", start)
	return f, err
}

// Refund gives cost back to key.
func (s *Server) Refund(ctx context.Context, now int64, policy, key string, cost int64) error {
	start := time.Now()
	ctx, err := s.at(ctx, now)
	if err == nil {
		err = s.lim.Refund(ctx, policy, key, cost)
	}
	s.observe("refund", start)
	return err
}

// Settle ends a reservation of reserved units with what the work cost, actual: it refunds the
// difference or debits the excess (sluice.Limiter.Settle).
func (s *Server) Settle(ctx context.Context, now int64, policy, key string, reserved, actual int64) error {
	start := time.Now()
	err := s.settleBounds(reserved, actual)
	if err == nil {
		ctx, err = s.at(ctx, now)
	}
	if err == nil {
		err = s.lim.Settle(ctx, policy, key, reserved, actual)
	}
	s.observe("settle", start)
	return err
}

// settleBounds refuses a settle whose reserved or actual passes the config's maxSettle: one call
// could otherwise put a key 2^53 units into debt.
func (s *Server) settleBounds(reserved, actual int64) error {
	ceil := s.cfg.Load().MaxSettle
	if ceil == 0 {
		ceil = config.DefaultMaxSettle
	}
	for _, v := range []struct {
		field string
		n     int64
	}{{"reserved", reserved}, {"actual", actual}} {
		if v.n > ceil {
			return &sluice.InvalidError{Field: v.field, Reason: fmt.Sprintf("%d is above the server's maxSettle %d", v.n, ceil)}
		}
	}
	return nil
}

// LogAction records an operator's action on a key (a reset or refund through an admin route) and
// the reason given, for the audit trail: one INFO line.
func (s *Server) LogAction(op, policy, key, reason string, attrs ...any) {
	s.log.Info("sluice: "+op, append([]any{"policy", policy, "key", key, "reason", reason}, attrs...)...)
}

// Reset forgets key under policy.
func (s *Server) Reset(ctx context.Context, policy, key string) error {
	start := time.Now()
	err := s.lim.Reset(ctx, policy, key)
	s.observe("reset", start)
	return err
}
