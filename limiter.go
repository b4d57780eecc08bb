package sluice

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/namecache"
)

// Limiter is the front door: it holds named policies, validates every request, asks a Store for
// the decision and counts the outcomes per policy. Bad input gets an *InvalidError and an unknown
// policy ErrUnknownPolicy, and neither reaches the store.
//
// A Limiter is safe for concurrent use. Its policies can be replaced while it serves (SetPolicies).
type Limiter struct {
	store    Store
	verdicts VerdictStore // store, if it implements VerdictStore
	reg      atomic.Pointer[registry]
	resolver atomic.Pointer[Resolver] // nil: every key takes its policy as named
	mu       sync.Mutex               // serializes SetPolicies
}

// Resolver picks, key by key, the policy a check applies instead of the one it names: a tenant's
// plan, or limits of a key's own (package overrides' Table is one). It is asked on every call that
// names a key, so it must answer from memory, fast, and be safe for concurrent use.
type Resolver interface {
	// Resolve returns the policy that applies to key under the policy named policy at now (epoch
	// ms; 0 means the resolver's own clock), or nil when the policy as named applies. A policy it
	// returns must have that name: the store keeps a key's state by the policy's name, so the
	// key's state carries over whichever applies (docs/semantics.md, section 9).
	Resolve(policy, key string, now int64) *Policy
}

// registry is a snapshot of the policies, swapped whole on SetPolicies.
type registry struct {
	byName map[string]*entry
	// recent finds an entry without hashing its name when the caller passes the very string the
	// policy was named with; a name built at run time never hits and is never stored.
	recent namecache.Cache[*entry]
}

func (r *registry) find(name string) (*entry, bool) {
	if e, ok := r.recent.Get(name); ok {
		return e, true
	}
	e, ok := r.byName[name]
	if ok && unsafe.StringData(e.policy.name) == unsafe.StringData(name) {
		r.recent.Put(e.policy.name, e)
	}
	return e, ok
}

type entry struct {
	policy *Policy
	_      [120]byte // keeps the counts off the line every check reads policy from
	// counts are striped so that concurrent checks of one policy do not all write one cache line:
	// a check counts in the stripe of its goroutine's stack address, and concurrent checks run on
	// different stacks, which start at 2 KiB, often side by side (see stripeOf).
	counts [8]struct {
		allowed, denied atomic.Uint64
		_               [112]byte // two cache lines apart: adjacent lines are fetched in pairs
	}
}

// Stats counts a policy's decisions since it was added (kept across SetPolicies while the policy
// stays Equal). A composite policy counts one decision per check.
type Stats struct {
	Allowed uint64 `json:"allowed"`
	Denied  uint64 `json:"denied"`
}

// New returns a Limiter over store with the given policies, whose names must be distinct.
func New(store Store, policies ...*Policy) (*Limiter, error) {
	l := &Limiter{store: store}
	l.verdicts, _ = store.(VerdictStore)
	if err := l.SetPolicies(policies...); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicies replaces the policy set atomically. A policy Equal to one held before keeps its
// counts. The store keeps a policy's keys' state across a change of its numbers and reads it under
// the new ones (docs/semantics.md, section 9); a removed policy's state is dropped by the store in
// its own time. Checks already under way finish with the old set.
func (l *Limiter) SetPolicies(policies ...*Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.reg.Load()
	next := &registry{byName: make(map[string]*entry, len(policies))}
	for _, p := range policies {
		if p == nil {
			return invalid("policies", "nil policy")
		}
		if _, dup := next.byName[p.name]; dup {
			return invalid("policies", "duplicate policy %q", p.name)
		}
		e := &entry{policy: p}
		if old != nil {
			if prev, ok := old.byName[p.name]; ok && prev.policy.Equal(p) {
				e = prev
			}
		}
		next.byName[p.name] = e
	}
	l.reg.Store(next)
	return nil
}

// SetResolver has every later call resolve its key's policy with r, and report in its Decision
// which applied (Plan, Override); nil resolves none. A key's policy is resolved once per call, and
// the call is decided under it alone: a decision never mixes two definitions.
func (l *Limiter) SetResolver(r Resolver) {
	if r == nil {
		l.resolver.Store(nil)
		return
	}
	l.resolver.Store(&r)
}

// Applied returns the policy a check of key under the policy named policy would apply at now
// (epoch ms, 0 for the resolver's clock), and whether an override (the Resolver) chose it.
func (l *Limiter) Applied(policy, key string, now int64) (p *Policy, override bool, err error) {
	e, err := l.entry(policy)
	if err != nil {
		return nil, false, err
	}
	p, override = l.apply(e, key, now)
	return p, override, nil
}

// apply is the policy that applies to key under e's, and whether the Resolver chose it.
func (l *Limiter) apply(e *entry, key string, now int64) (*Policy, bool) {
	if r := l.resolver.Load(); r != nil {
		if p := (*r).Resolve(e.policy.name, key, now); p != nil {
			return p, true
		}
	}
	return e.policy, false
}

// Policy returns the policy named name.
func (l *Limiter) Policy(name string) (*Policy, bool) {
	e, ok := l.reg.Load().byName[name]
	if !ok {
		return nil, false
	}
	return e.policy, true
}

// Policies returns the policies held, in no particular order.
func (l *Limiter) Policies() []*Policy {
	reg := l.reg.Load().byName
	out := make([]*Policy, 0, len(reg))
	for _, e := range reg {
		out = append(out, e.policy)
	}
	return out
}

// Stats returns the decision counts of the policy named name.
func (l *Limiter) Stats(name string) (Stats, bool) {
	e, ok := l.reg.Load().byName[name]
	if !ok {
		return Stats{}, false
	}
	var st Stats
	for i := range e.counts {
		st.Allowed += e.counts[i].allowed.Load()
		st.Denied += e.counts[i].denied.Load()
	}
	return st, true
}

// Check consumes cost for key under the named policy, from all of its limits or from none.
func (l *Limiter) Check(ctx context.Context, policy, key string, cost int64) (Decision, error) {
	e, ok := l.reg.Load().find(policy)
	if !ok || !l.direct(e, key, cost) {
		return l.check(ctx, policy, key, cost)
	}
	now := NowFrom(ctx)
	p, over := l.apply(e, key, now)
	if over && !l.direct1(p, cost) {
		return l.check(ctx, policy, key, cost)
	}
	v, err := l.verdicts.CheckVerdict(ctx, now, p, key, cost)
	if err != nil {
		return Decision{}, err
	}
	e.count(v.Allowed)
	deniedBy := 0
	if v.Allowed {
		deniedBy = -1
	}
	// v.Decision(p.ceiling), spelled out: the inlined call costs one more copy of the Decision.
	return Decision{Allowed: v.Allowed, Limit: p.ceiling, Remaining: v.Remaining, ResetAt: v.ResetAt, RetryAfterMs: v.RetryAfterMs, DeniedBy: deniedBy, Override: over, Plan: p.plan}, nil
}

// CheckVerdict is Check for a caller that needs only the Verdict: whether the cost was admitted,
// what remains, and when to come back. It consumes exactly what Check would, and counts alike.
//
// It exists for the hot path, where returning a whole Decision costs a measurable share of a
// check of a hot key in memory (docs/benchmarks.md). The fields it leaves out are fixed by the policy for a policy of one
// limit (Limit is the ceiling of its limit, DeniedBy is -1 when allowed and 0 when denied); for a
// composite policy the Verdict is the binding limit's, as Check reports it.
func (l *Limiter) CheckVerdict(ctx context.Context, policy, key string, cost int64) (Verdict, error) {
	e, ok := l.reg.Load().find(policy)
	if ok && l.direct(e, key, cost) {
		now := NowFrom(ctx)
		if p, over := l.apply(e, key, now); !over || l.direct1(p, cost) {
			v, err := l.verdicts.CheckVerdict(ctx, now, p, key, cost)
			if err != nil {
				return Verdict{}, err
			}
			e.count(v.Allowed)
			return v, nil
		}
	}
	d, err := l.check(ctx, policy, key, cost)
	return Verdict{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfterMs}, err
}

// direct reports whether a check of the policy of e can take the fast path: it is valid, the policy
// has one limit, and the store decides in Verdicts. Anything else goes through check.
func (l *Limiter) direct(e *entry, key string, cost int64) bool {
	return e.policy.ceiling != 0 && l.verdicts != nil && cost >= 1 && cost <= e.policy.maxCost && key != "" && len(key) <= MaxKeyLen
}

// direct1 is direct for the policy an override applies, once key and store have passed direct.
func (l *Limiter) direct1(p *Policy, cost int64) bool {
	return p.ceiling != 0 && cost <= p.maxCost
}

// check is Check for everything but its fast path: bad input, composite policies, and stores that
// do not decide in Verdicts.
func (l *Limiter) check(ctx context.Context, policy, key string, cost int64) (Decision, error) {
	now := NowFrom(ctx)
	e, p, over, err := l.lookup(policy, key, cost, now)
	if err != nil {
		return Decision{}, err
	}
	d, err := l.store.Check(ctx, now, p, key, cost)
	if err != nil {
		return Decision{}, err
	}
	e.count(d.Allowed)
	d.Override, d.Plan = over, p.plan
	return d, nil
}

// CheckMany checks each key independently under the named policy, all at one instant, and returns
// one decision per key. Keys whose Resolver gives them policies of their own are decided in one
// store call per policy that applies.
func (l *Limiter) CheckMany(ctx context.Context, policy string, keys []string, cost int64) ([]Decision, error) {
	e, err := l.entry(policy)
	if err != nil {
		return nil, err
	}
	now := NowFrom(ctx)
	var applied []*Policy // the policy of each key; nil while every key takes e.policy
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			err.Field = fmt.Sprintf("keys[%d]", i)
			return nil, err
		}
		if p, over := l.apply(e, k, now); over {
			if applied == nil {
				applied = make([]*Policy, len(keys))
				for j := range i {
					applied[j] = e.policy
				}
			}
			applied[i] = p
		} else if applied != nil {
			applied[i] = e.policy
		}
	}
	out := make([]Decision, len(keys))
	if applied == nil {
		if err := checkCost(e.policy, cost); err != nil {
			return nil, err
		}
		if err := l.store.CheckMany(ctx, now, e.policy, keys, cost, out); err != nil {
			return nil, err
		}
	} else if err := l.checkEach(ctx, now, e.policy, applied, keys, cost, out); err != nil {
		return nil, err
	}
	for i := range out {
		e.count(out[i].Allowed)
		if applied == nil {
			out[i].Plan = e.policy.plan
		} else {
			out[i].Override, out[i].Plan = applied[i] != e.policy, applied[i].plan
		}
	}
	return out, nil
}

// checkEach is CheckMany's store calls when keys take different policies: one call per policy,
// in the order the policies first appear, each with its keys.
func (l *Limiter) checkEach(ctx context.Context, now int64, named *Policy, applied []*Policy, keys []string, cost int64, out []Decision) error {
	for i, p := range applied {
		if err := checkCost(p, cost); err != nil {
			if p != named {
				err.Reason += fmt.Sprintf(" under the override of keys[%d]", i)
			}
			return err
		}
	}
	done := make([]bool, len(keys))
	for i, p := range applied {
		if done[i] {
			continue
		}
		var idx []int
		var ks []string
		for j := i; j < len(keys); j++ {
			if !done[j] && applied[j] == p {
				idx, ks, done[j] = append(idx, j), append(ks, keys[j]), true
			}
		}
		part := make([]Decision, len(ks))
		if err := l.store.CheckMany(ctx, now, p, ks, cost, part); err != nil {
			return err
		}
		for n, j := range idx {
			out[j] = part[n]
		}
	}
	return nil
}

// Item is one (policy, key, cost) check of CheckAll: the policy by name. A Store's CheckAll gets
// the items with their policies resolved beside them.
type Item struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Cost   int64  `json:"cost"`
}

// CheckAll checks every item together, all or nothing: if any item is denied, nothing is consumed
// from any of them. The result is Combine of the items' decisions: DeniedBy is the index of the item
// that denied, and Parts holds one decision per item.
//
// Use it for several rules guarding one request, such as a per-IP and a per-account login limit: a
// request the account limit denies spends nothing of the IP's budget.
//
// One item is decided by the store's Check, which decides it as CheckAll would; the result is the
// same Combine of one decision.
func (l *Limiter) CheckAll(ctx context.Context, items ...Item) (Decision, error) {
	if len(items) == 0 {
		return Decision{}, invalid("items", "at least one item is needed")
	}
	now := NowFrom(ctx)
	ps := make([]*Policy, len(items))
	entries := make([]*entry, len(items))
	overs := make([]bool, len(items))
	for i, it := range items {
		e, p, over, err := l.lookup(it.Policy, it.Key, it.Cost, now)
		if err != nil {
			if ie, ok := err.(*InvalidError); ok {
				err = &InvalidError{Field: fmt.Sprintf("items[%d].%s", i, ie.Field), Reason: ie.Reason}
			}
			return Decision{}, err
		}
		entries[i], ps[i], overs[i] = e, p, over
	}
	out := make([]Decision, len(items))
	if len(items) == 1 {
		// One item is a Check, which decides alike (storetest.OneItemCheckAll) and takes the
		// store's path for one key: the memory store's lock-free one, where its CheckAll locks.
		d, err := l.store.Check(ctx, now, ps[0], items[0].Key, items[0].Cost)
		if err != nil {
			return Decision{}, err
		}
		out[0] = d
	} else if err := l.store.CheckAll(ctx, now, ps, items, out); err != nil {
		return Decision{}, err
	}
	for i := range out {
		out[i].Override, out[i].Plan = overs[i], ps[i].plan
	}
	d := Combine(out)
	for _, e := range entries {
		e.count(d.Allowed)
	}
	return d, nil
}

// Peek reports key's state under the named policy without consuming anything: Allowed says whether
// a check of cost 1 would pass now, and Remaining is what is left now.
func (l *Limiter) Peek(ctx context.Context, policy, key string) (Decision, error) {
	now := NowFrom(ctx)
	_, p, over, err := l.lookup(policy, key, 1, now)
	if err != nil {
		return Decision{}, err
	}
	d, err := l.store.Peek(ctx, now, p, key)
	d.Override, d.Plan = over, p.plan
	return d, err
}

// Forecast projects key's capacity for checks of cost without consuming anything.
func (l *Limiter) Forecast(ctx context.Context, policy, key string, cost int64) (Forecast, error) {
	now := NowFrom(ctx)
	_, p, _, err := l.lookup(policy, key, cost, now)
	if err != nil {
		return Forecast{}, err
	}
	return l.store.Forecast(ctx, now, p, key, cost)
}

// Refund gives cost units back to key under the named policy, to the limits that count cost (a
// limit counting requests keeps its count: the request happened), never past a limit's ceiling.
// Reserve an estimate with Check, then Refund what the work did not use.
func (l *Limiter) Refund(ctx context.Context, policy, key string, cost int64) error {
	e, err := l.entry(policy)
	if err != nil {
		return err
	}
	if cost < 1 {
		return invalid("cost", "must be at least 1, got %d", cost)
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := NowFrom(ctx)
	p, _ := l.apply(e, key, now)
	return l.store.Refund(ctx, now, p, key, cost)
}

// Reset forgets key under the named policy: its next check starts from a full budget.
func (l *Limiter) Reset(ctx context.Context, policy, key string) error {
	_, p, _, err := l.lookup(policy, key, 1, NowFrom(ctx))
	if err != nil {
		return err
	}
	return l.store.Reset(ctx, p, key)
}

func (l *Limiter) entry(policy string) (*entry, error) {
	e, ok := l.reg.Load().find(policy)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
	}
	return e, nil
}

// lookup resolves policy, and the policy that applies to key at now, and validates key and cost
// against it: the work every check starts with.
func (l *Limiter) lookup(policy, key string, cost int64, now int64) (*entry, *Policy, bool, error) {
	e, ok := l.reg.Load().find(policy)
	if !ok {
		return nil, nil, false, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
	}
	if err := checkKey(key); err != nil {
		return nil, nil, false, err
	}
	p, over := l.apply(e, key, now)
	if err := checkCost(p, cost); err != nil {
		if over {
			err.Reason += " under the override of key " + fmt.Sprintf("%q", key)
		}
		return nil, nil, false, err
	}
	return e, p, over, nil
}

func (e *entry) count(allowed bool) {
	var onStack byte
	c := &e.counts[stripeOf(uintptr(unsafe.Pointer(&onStack)))]
	if allowed {
		c.allowed.Add(1)
	} else {
		c.denied.Add(1)
	}
}

// stripeOf is the stripe of counts for a check running on the stack at addr: a Fibonacci hash of
// its 2 KiB block, which gives neighbouring blocks different stripes.
func stripeOf(addr uintptr) uint64 { return uint64(addr) >> 11 * 0x9e3779b97f4a7c15 >> 61 }

func checkCost(p *Policy, cost int64) *InvalidError {
	if cost < 1 {
		return invalid("cost", "must be at least 1, got %d", cost)
	}
	if cost > p.maxCost {
		return invalid("cost", "%d exceeds %d, the most policy %q can ever admit", cost, p.maxCost, p.name)
	}
	return nil
}

func checkKey(key string) *InvalidError {
	if key == "" {
		return invalid("key", "must not be empty")
	}
	if len(key) > MaxKeyLen {
		return invalid("key", "is %d bytes, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

type nowKey struct{}

// WithNow returns a context under which a Limiter decides at the instant now (epoch ms) instead of
// the store's clock: for deterministic replay and tests. A now of 0 or less is ignored.
func WithNow(ctx context.Context, now int64) context.Context {
	return context.WithValue(ctx, nowKey{}, now)
}

// NowFrom returns the instant set by WithNow, or 0 (the store's clock).
func NowFrom(ctx context.Context) int64 {
	now, _ := ctx.Value(nowKey{}).(int64)
	return max(now, 0)
}
