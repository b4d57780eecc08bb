// Package memory is sluice's embedded store, and its default: limit state kept in this process's
// memory, decided with package algo, exact under any number of goroutines.
//
// Each limit of each policy has a keyspace, an open-addressing hash table split in shards; policies
// of one name share it where their limits at that index have one strategy, whatever the numbers, so
// a key whose limit changes (a plan, an override) keeps its state, read under the limit checked.
// Lookups take no lock and each key carries its own lock bit, so checks on different keys never
// contend and a check on a hot key is one compare-and-swap: a key's state is never read and then
// written in two steps that another check could come between. A composite policy or a CheckAll locks
// all its keys (in one global order, so two steps never wait on each other), decides, and puts every
// state back if any part denied.
//
// Memory stays bounded: a key whose state has become equal to a fresh key's (its limit has fully
// replenished, under every limit its keyspace is read with) is dropped by a background sweep, so
// dropping it never loosens a limit. A key of up
// to 16 bytes is held in its slot, and costs the slot over the table's load (measured at 1M keys:
// 44.5 bytes for GCRA, 55.5 for token bucket and fixed window, the key included; docs/benchmarks.md);
// a longer key costs a copy of its bytes besides. Config.MaxKeys caps the number of keys, concurrency
// keys included: at it, each new key takes the place of an idle key of its shard (counted by
// Evictions) or, failing one, is refused with ErrFull (counted by Refusals). A key still spending is
// never evicted, since forgetting it would hand it a fresh budget. There is no goroutine or timer
// per key.
package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/msclock"
	"github.com/sluicehq/sluice/internal/unspent"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Now returns the current instant in epoch milliseconds. Nil means the process clock: the wall
	// clock read once at New, advanced by the monotonic clock so that it never runs backwards, and
	// cached for a millisecond at a time while checks flow (see the package doc). A clock given here
	// that runs backwards is held at the latest instant it returned.
	Now func() int64
	// MaxKeys caps the keys held across all policies and concurrency names; 0 means no cap. At the
	// cap a new key takes the place of an idle key of its shard, found among the next few hundred
	// slots (forgetting an idle key loosens nothing; counted by Evictions); with none idle there,
	// the operation that would create it fails with ErrFull (counted by Refusals) and changes no
	// state, until keys go idle and the sweep or later inserts drop them. Keys still spending are
	// never evicted. Concurrent inserts may pass the cap by a few keys.
	MaxKeys int
	// SweepInterval is how often idle keys are dropped. 0 means 10 seconds; negative disables the
	// sweep (keys then stay until Reset or eviction).
	SweepInterval time.Duration
}

// Store is the in-memory sluice.Store. It is safe for concurrent use. Close stops its background
// sweep; the zero Store is not usable, call New.
type Store struct {
	now   func() int64
	clock *msclock.Clock // the process clock, nil when Config.Now is set
	seed  uint64
	max   int64
	// bindings maps each policy pointer seen to the state of its definition; it is replaced whole
	// under mu.
	bindings atomic.Pointer[map[*sluice.Policy]*binding]
	// recent caches bindings by the policy's address: a hit costs two loads where the map costs a
	// hash, and checks ask for the same few policies over and over.
	recent [64]atomic.Pointer[binding]

	mu   sync.Mutex               // guards defs, spaces and replacing bindings
	defs map[string][]*definition // by policy name, oldest first
	// spaces holds the keys of every limit: policies of one name share the keyspace of a limit
	// index whose strategies have one shape, whatever their numbers, so a key keeps its state when
	// its limit changes. Sweep goes through each once.
	spaces map[spaceKey]keyspace

	partIDs   atomic.Uint64 // numbers keyspaces in creation order: the order multi-key steps lock in
	closed    atomic.Bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// The counters below are written by inserts and replays; the padding keeps them off the cache
	// lines every check reads.
	_ [128]byte
	// given is the latest instant a caller passed instead of the store's clock, 0 if none: the
	// sweep must not judge keys idle at an instant later than the timeline callers decide at.
	given     atomic.Int64
	keys      atomic.Int64
	evictions atomic.Uint64
	refusals  atomic.Uint64
	kicked    atomic.Int64 // when kick last started a sweep, unix ns

	leases leases // the concurrency.Store state (concurrency.go)
}

// definition is one definition of a policy: one part per limit, each its limit's numbers over the
// limit's keyspace. Equal policies, such as one policy reloaded from config, share a definition.
type definition struct {
	policy *sluice.Policy // the first policy seen with this definition
	parts  []part
}

// spaceKey names a keyspace: limit index of the policies of a name, for strategies of a shape
// (shapeOf).
type spaceKey struct {
	policy string
	index  int
	shape  string
}

type binding struct {
	policy *sluice.Policy
	def    *definition
	// single, keys, alg and limit are the part, its keyspace, its strategy and its ceiling for a
	// policy of one limit (Check's fast path); single is nil for a composite policy.
	single part
	keys   keyspace
	alg    any
	limit  int64
}

var (
	_ sluice.Store        = (*Store)(nil)
	_ sluice.VerdictStore = (*Store)(nil)
)

// New returns a Store and starts its sweep.
func New(cfg Config) *Store {
	s := &Store{
		seed: rand.Uint64(),
		max:  int64(cfg.MaxKeys),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if cfg.Now == nil {
		s.clock = msclock.New()
		s.now = s.clock.Now
	} else {
		s.now = monotonic(cfg.Now)
	}
	s.bindings.Store(&map[*sluice.Policy]*binding{})
	s.defs = map[string][]*definition{}
	s.spaces = map[spaceKey]keyspace{}
	every := cfg.SweepInterval
	if every == 0 {
		every = 10 * time.Second
	}
	if every < 0 {
		close(s.done)
		return s
	}
	go s.sweepEvery(every)
	return s
}

// Close stops the sweep. It is idempotent; calls after Close return sluice.ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		if s.clock != nil {
			s.clock.Close()
		}
	})
	return nil
}

// Len is the number of keys held, over all policies and limits.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Evictions counts the idle keys the MaxKeys cap dropped, before the sweep would have, to make room
// for new ones. Forgetting them loosened nothing.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// Refusals counts the new keys the MaxKeys cap refused (ErrFull): the store was full of keys still
// spending.
func (s *Store) Refusals() uint64 { return s.refusals.Load() }

// ErrFull is the error of an operation that would create a key while the store is at
// Config.MaxKeys and has no idle key to give up for it. It matches sluice.ErrUnavailable, so a
// service answers it with the policy's fail mode.
var ErrFull = fmt.Errorf("memory: at MaxKeys with no idle key to replace: %w", sluice.ErrUnavailable)

// FullError is CheckMany's ErrFull: the keys at the indices in Refused were refused, and every
// other key was decided as usual (its decision stands in out). It matches ErrFull.
type FullError struct{ Refused []int }

func (e *FullError) Error() string {
	return fmt.Sprintf("%v (%d keys of the batch)", ErrFull, len(e.Refused))
}

func (e *FullError) Unwrap() error { return ErrFull }

// Sweep drops every idle key now. The background sweep calls it; tests and tools may too. When callers pass their
// own instants (replay), "now" is the earlier of the store's clock and the latest instant passed,
// since a key idle then is idle at every later instant.
func (s *Store) Sweep() {
	now := s.sweepNow()
	s.mu.Lock()
	spaces := make([]keyspace, 0, len(s.spaces))
	for _, ks := range s.spaces {
		spaces = append(spaces, ks)
	}
	s.mu.Unlock()
	for _, ks := range spaces {
		ks.sweep(now)
	}
	s.leases.sweep(now, &s.keys) // and expired concurrency leases
}

// sweepNow is the instant at which keys are judged idle: the clock, or the latest instant callers
// passed if that is earlier.
func (s *Store) sweepNow() int64 {
	now := s.now()
	if g := s.given.Load(); g != 0 {
		now = min(now, g)
	}
	return now
}

func (s *Store) sweepEvery(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// kick starts a sweep in the background after a refusal, at most one at a time and one a second:
// the idle keys that would make room may be in other shards, which the refusing insert does not
// look through.
func (s *Store) kick() {
	now := time.Now().UnixNano()
	last := s.kicked.Load()
	if now-last < int64(time.Second) || s.closed.Load() || !s.kicked.CompareAndSwap(last, now) {
		return
	}
	go s.Sweep()
}

func (s *Store) full() bool { return s.max > 0 && s.keys.Load() >= s.max }

// partsOf returns the parts of p, creating them on first use. Policies Equal to each other share
// their parts, so a policy reloaded from config keeps its keys' state. A changed policy of the same
// name (a plan, an override, a reload with new numbers) gets parts of its own numbers over the
// same keyspaces, where its limits keep their strategies: a key's state carries over and is read
// under the numbers of the policy checked, as Redis and PostgreSQL read it (docs/semantics.md, When
// a key's limit changes). A limit whose strategy changes starts afresh in a keyspace of its own. A
// replaced definition is kept, for checks still holding the old policy and for a config that
// reverts; keyspaces are kept too, and a keyspace no policy uses any more costs a few kilobytes once
// the sweep has dropped its keys.
func (s *Store) partsOf(p *sluice.Policy) []part { return s.bindingOf(p).def.parts }

func (s *Store) bindingOf(p *sluice.Policy) *binding {
	if b := s.recentBinding(p); b != nil {
		return b
	}
	return s.findBinding(p)
}

// recentBinding returns p's binding if the cache holds it, else nil. It inlines.
func (s *Store) recentBinding(p *sluice.Policy) *binding {
	if b := s.recent[uintptr(unsafe.Pointer(p))>>4%uintptr(len(s.recent))].Load(); b != nil && b.policy == p {
		return b
	}
	return nil
}

func (s *Store) findBinding(p *sluice.Policy) *binding {
	c := &s.recent[uintptr(unsafe.Pointer(p))>>4%uintptr(len(s.recent))]
	b, ok := (*s.bindings.Load())[p]
	if !ok {
		b = s.bind(p)
	}
	c.Store(b)
	return b
}

func (s *Store) bind(p *sluice.Policy) *binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.bindings.Load()
	if b, ok := cur[p]; ok {
		return b
	}
	var def *definition
	for _, d := range s.defs[p.Name()] {
		if d.policy.Equal(p) {
			def = d
		}
	}
	if def == nil {
		def = &definition{policy: p}
		for i, l := range p.Limits() {
			k := spaceKey{policy: p.Name(), index: i, shape: shapeOf(l.Strategy)}
			ks := s.spaces[k]
			if ks == nil {
				ks = newKeyspace(l.Strategy, s)
				s.spaces[k] = ks
			}
			def.parts = append(def.parts, ks.view(l.Strategy))
		}
		s.defs[p.Name()] = append(s.defs[p.Name()], def)
	}
	b := &binding{policy: p, def: def}
	if len(def.parts) == 1 {
		pt := def.parts[0]
		b.single, b.keys, b.alg, b.limit = pt, pt.keys(), pt.strategy(), int64(p.Limits()[0].Strategy.Ceiling())
	}
	next := make(map[*sluice.Policy]*binding, len(cur)+1)
	for q, qb := range cur {
		next[q] = qb
	}
	next[p] = b
	s.bindings.Store(&next)
	return b
}

func (s *Store) begin(now int64) (int64, error) {
	switch {
	case s.closed.Load():
		return 0, sluice.ErrClosed
	case now != 0:
		s.note(now)
		return now, nil
	case s.clock != nil:
		return s.clock.Now(), nil
	}
	return s.now(), nil
}

// note records an instant a caller passed, for the sweep (sweepNow).
func (s *Store) note(now int64) {
	if l := s.given.Load(); l == 0 || now > l {
		s.given.CompareAndSwap(l, now) // losing a race here only makes the sweep keep more
	}
}

// Check implements sluice.Store.
func (s *Store) Check(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) (d sluice.Decision, err error) {
	if now, err = s.begin(now); err != nil {
		return d, err
	}
	return d, s.check(now, s.bindingOf(p), key, cost, &d)
}

// CheckVerdict implements sluice.VerdictStore. For a composite policy it reports the binding
// limit's verdict, without the Limit and DeniedBy that Check reports.
func (s *Store) CheckVerdict(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) (_ sluice.Verdict, err error) {
	if now == 0 && s.clock != nil && !s.closed.Load() {
		now = s.clock.Now() // begin's common case, inlined
	} else if now, err = s.begin(now); err != nil {
		return sluice.Verdict{}, err
	}
	b := s.recentBinding(p) // bindingOf, inlined
	if b == nil {
		b = s.findBinding(p)
	}
	if b.single != nil {
		if v, ok := s.verdict(now, b, key, cost); ok {
			return v, nil
		}
		return sluice.Verdict{}, ErrFull
	}
	var d sluice.Decision
	if err := s.check(now, b, key, cost, &d); err != nil {
		return sluice.Verdict{}, err
	}
	return sluice.Verdict{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfterMs}, nil
}

// check decides the policy bound by b at an instant already resolved, writing the decision to *d.
func (s *Store) check(now int64, b *binding, key string, cost int64, d *sluice.Decision) error {
	if b.single != nil {
		v, ok := s.verdict(now, b, key, cost)
		if !ok {
			return ErrFull
		}
		*d = v.Decision(b.limit)
		return nil
	}
	h := hash(s.seed, key)
	steps := make([]step, len(b.def.parts))
	for i, part := range b.def.parts {
		steps[i] = step{part: part, h: h, key: key, cost: b.policy.Cost(i, cost)}
	}
	out := make([]sluice.Decision, len(steps))
	if err := atomically(now, steps, out); err != nil {
		return err
	}
	unspent.Check(b.policy, cost, out) // a denied check spent nothing of the parts that allowed
	*d = sluice.Combine(out)
	return nil
}

// verdict decides the policy of one limit bound by b; ok is false when the cap refused a new key.
//
// A GCRA, token bucket or fixed window limit (the common case, and the hot one) is decided with
// the strategy's concrete type: through the generic part it would cost an interface call and
// copies of the state. GCRA's state is one word, which a compare-and-swap replaces. Only the next
// state is computed between reading the word and the swap (Spend), and the verdict after it
// (Verdict): on a key hot on several cores, the shorter that window, the fewer swaps fail and the
// less the word's cache line moves. The verdict stays in registers, so the swap waits on no store.
// Token bucket and fixed window states take the slot's lock bit instead; their common case, the
// key present and its slot free, is inlined here, and getWords does the rest. Token bucket holds
// the lock only for Spend, as GCRA's swap waits only on it; fixed window's window bounds are a
// division whichever side of the lock they fall, and splitting its Decide measured no better.
func (s *Store) verdict(now int64, b *binding, key string, cost int64) (_ sluice.Verdict, ok bool) {
	cost = b.policy.Cost(0, cost) // 1 if the limit counts requests
	h, w0, w1 := hashKey(s.seed, key)
	switch sp := b.keys.(type) {
	case *space[algo.GCRAState]:
		g := b.alg.(*algo.GCRA)
		t := sp.shard(h)
		if sl, _ := t.arr.Load().findWords(h, key, w0, w1); sl != nil {
			// One compare-and-swap, retried if another check changed the state first.
			for i := 0; ; i++ {
				old, ok := t.read(sl)
				if !ok {
					if !sl.isLive() {
						break // moved or deleted: look again below
					}
					spin(i)
					continue
				}
				next, ok := g.Spend(old, now, cost)
				if t.swap(sl, old, next) {
					return g.Verdict(old, next, now, cost, ok), true
				}
			}
		}
		sl, old := t.getWords(h, key, w0, w1, true)
		if sl == nil {
			return sluice.Verdict{}, false
		}
		next, v := g.Decide(old, now, cost)
		t.unlock(sl, next)
		return v, true
	case *space[algo.TokenBucketState]:
		t, tb := sp.shard(h), b.alg.(*algo.TokenBucket)
		if sl, _ := t.arr.Load().findWords(h, key, w0, w1); sl != nil {
			if m, ok := lockPair(sl); ok {
				next, tokens := tb.Spend(sl.state, now, cost)
				unlockPair(sl, m, next)
				return tb.Verdict(tokens, now, cost), true
			}
		}
		sl, old := t.getWords(h, key, w0, w1, true)
		if sl == nil {
			return sluice.Verdict{}, false
		}
		next, v := tb.Decide(old, now, cost)
		t.unlock(sl, next)
		return v, true
	case *space[algo.FixedWindowState]:
		t, fw := sp.shard(h), b.alg.(*algo.FixedWindow)
		if sl, _ := t.arr.Load().findWords(h, key, w0, w1); sl != nil {
			if m, ok := lockPair(sl); ok {
				next, v := fw.Decide(sl.state, now, cost)
				unlockPair(sl, m, next)
				return v, true
			}
		}
		sl, old := t.getWords(h, key, w0, w1, true)
		if sl == nil {
			return sluice.Verdict{}, false
		}
		next, v := fw.Decide(old, now, cost)
		t.unlock(sl, next)
		return v, true
	}
	return b.single.check(h, key, now, cost)
}

// CheckMany implements sluice.Store.
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	b := s.bindingOf(p)
	var refused []int
	for i, k := range keys {
		if err := s.check(now, b, k, cost, &out[i]); err != nil {
			refused = append(refused, i) // the other keys are decided and stand
		}
	}
	if refused != nil {
		return &FullError{Refused: refused}
	}
	return nil
}

// CheckAll implements sluice.Store.
func (s *Store) CheckAll(_ context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	var steps []step
	first := make([]int, len(items)+1) // steps of op i are steps[first[i]:first[i+1]]
	for i, op := range items {
		first[i] = len(steps)
		h := hash(s.seed, op.Key)
		for j, part := range s.partsOf(ps[i]) {
			steps = append(steps, step{part: part, h: h, key: op.Key, cost: ps[i].Cost(j, op.Cost)})
		}
	}
	first[len(items)] = len(steps)
	decisions := make([]sluice.Decision, len(steps))
	if err := atomically(now, steps, decisions); err != nil {
		return err
	}
	unspent.CheckAll(ps, items, decisions) // a denied CheckAll spent nothing of the parts that allowed
	for i := range items {
		if ds := decisions[first[i]:first[i+1]]; len(ds) == 1 {
			out[i] = ds[0]
		} else {
			out[i] = sluice.Combine(ds)
		}
	}
	return nil
}

// Peek implements sluice.Store.
func (s *Store) Peek(_ context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	now, err := s.begin(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	parts := s.partsOf(p)
	h := hash(s.seed, key)
	if len(parts) == 1 {
		return parts[0].peek(h, key, now), nil
	}
	out := make([]sluice.Decision, len(parts))
	for i, part := range parts {
		out[i] = part.peek(h, key, now)
	}
	return sluice.Combine(out), nil
}

// Forecast implements sluice.Store. For a composite policy it reports the part that can spend the
// least: the smallest SpendableNow with its NextReplenishAt, and the latest FullAt.
func (s *Store) Forecast(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	now, err := s.begin(now)
	if err != nil {
		return sluice.Forecast{}, err
	}
	h := hash(s.seed, key)
	var out sluice.Forecast
	for i, part := range s.partsOf(p) {
		f := part.forecast(h, key, now, p.Cost(i, cost))
		if i == 0 || f.SpendableNow < out.SpendableNow {
			out.SpendableNow, out.NextReplenishAt = f.SpendableNow, f.NextReplenishAt
		}
		out.FullAt = max(out.FullAt, f.FullAt)
	}
	return out, nil
}

// Refund implements sluice.Store. Limits that count requests are left alone.
func (s *Store) Refund(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(now, p, key, cost, part.refund)
}

// onCostLimits applies op with cost to key in every part of p whose limit counts cost.
func (s *Store) onCostLimits(now int64, p *sluice.Policy, key string, cost int64, op func(part, uint64, string, int64, int64) bool) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	h := hash(s.seed, key)
	for i, pt := range s.partsOf(p) {
		if p.Limits()[i].Unit == sluice.UnitCost && !op(pt, h, key, now, cost) {
			return ErrFull
		}
	}
	return nil
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, p *sluice.Policy, key string) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	h := hash(s.seed, key)
	for _, part := range s.partsOf(p) {
		part.reset(h, key)
	}
	return nil
}

// monotonic holds a clock at the latest instant it has returned, so that a clock stepping back
// never replays time a limit has already spent.
func monotonic(now func() int64) func() int64 {
	var latest atomic.Int64
	return func() int64 {
		t := now()
		for {
			l := latest.Load()
			if t <= l {
				return l
			}
			if latest.CompareAndSwap(l, t) {
				return t
			}
		}
	}
}
