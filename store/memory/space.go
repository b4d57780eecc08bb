package memory

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// algorithm is the decision logic of one strategy over its state type S; package algo implements it
// for every strategy.
type algorithm[S any] interface {
	Check(s S, now, cost int64) (S, sluice.Decision)
	Decide(s S, now, cost int64) (S, sluice.Verdict)
	Peek(s S, now int64) sluice.Decision
	Forecast(s S, now, cost int64) sluice.Forecast
	Refund(s S, now, cost int64) S
	Debit(s S, now, cost int64) S
	Idle(s S, now int64) bool
	Clone(s S) S
}

// numShards splits each keyspace so that inserts, sweeps and rebuilds of one shard leave the others
// alone.
const numShards = 64

// part is one limit of one policy bound to the state of its keys, whatever its strategy: a view of
// a keyspace (shared by every policy of the name whose limit at that index has the same shape of
// state) through the limit's own numbers.
type part interface {
	// check decides a policy of this one limit; ok is false when the cap refused a new key.
	check(h uint64, key string, now, cost int64) (v sluice.Verdict, ok bool)
	peek(h uint64, key string, now int64) sluice.Decision
	forecast(h uint64, key string, now, cost int64) sluice.Forecast
	refund(h uint64, key string, now, cost int64) bool
	debit(h uint64, key string, now, cost int64) bool
	reset(h uint64, key string)
	// id is the keyspace's, unique in the store: multi-key steps lock parts in the order of their
	// ids, and two parts of one id hold the same keys.
	id() uint64
	// keys is the keyspace: the *space[S] the part reads and writes.
	keys() keyspace
	// strategy is the part's algo strategy, such as *algo.GCRA.
	strategy() any
	// hold locks key's slot for a multi-key step without ever blocking while other slots are held:
	// it reports ok false when the caller must release what it holds and call prepare first.
	hold(h uint64, key string) (held, bool)
	// prepare does what hold could not do without blocking: it waits out a rebuild and creates key.
	// It reports false when the cap refused key.
	prepare(h uint64, key string) bool
}

// keyspace is the state of the keys of one limit of one policy name, whatever its strategy: a
// *space[S].
type keyspace interface {
	// view returns a part deciding this keyspace's keys with the strategy s, one of those of the
	// keyspace's shape (shapeOf), and counts s among the strategies its sweep judges idleness by.
	view(s sluice.Strategy) part
	sweep(now int64)
	len() int
}

// held is one locked slot of a multi-key step. It keeps the slot's state from before the step so
// that a denied step can put everything back. Steps of parts sharing a keyspace share the slot, each
// deciding it with its own part's numbers.
type held interface {
	check(p part, now, cost int64) sluice.Decision
	restore()
	unlock()
}

// shapeOf tells apart the limits whose states one keyspace can hold: those of one strategy kind.
// Within a kind, a state means the same under any numbers (a TAT, tokens as of an instant, a
// window's start and count, logged instants), which is what Redis and PostgreSQL read it as after
// a limit change, a fixed window's or a log's of another length included. A sliding window's
// bucket counts are indexed by its buckets' width and laid out by their number, so its shape is
// its window and buckets: a sliding window whose window or buckets change starts afresh (Redis and
// PostgreSQL read such a state each their own way; docs/semantics.md).
func shapeOf(s sluice.Strategy) string {
	if sw, ok := s.(sluice.SlidingWindow); ok {
		return fmt.Sprint(sw.Kind(), "/", sw.WindowMs, "/", sw.Buckets)
	}
	return s.Kind()
}

// idleKey is what of s its Idle test depends on: strategies of one shape and one idleKey judge
// every state idle alike. A GCRA key is idle once its TAT has passed, a window's once nothing it
// counted is inside the window, whatever the limit; a token bucket is full by its capacity and
// refill.
func idleKey(s sluice.Strategy) any {
	switch s := s.(type) {
	case sluice.GCRA:
		return nil
	case sluice.TokenBucket:
		return s
	case sluice.FixedWindow:
		s.Limit = 0
		return s
	case sluice.SlidingWindow:
		return nil // its window is in its shape
	case sluice.SlidingWindowLog:
		return s.WindowMs
	}
	panic("memory: unknown strategy " + s.Kind())
}

func newKeyspace(s sluice.Strategy, st *Store) keyspace {
	switch s.(type) {
	case sluice.GCRA:
		return newSpace[algo.GCRAState](st)
	case sluice.TokenBucket:
		return newSpace[algo.TokenBucketState](st)
	case sluice.FixedWindow:
		return newSpace[algo.FixedWindowState](st)
	case sluice.SlidingWindow:
		return newSpace[algo.SlidingWindowState](st)
	case sluice.SlidingWindowLog:
		return newSpace[algo.SlidingWindowLogState](st)
	}
	panic("memory: unknown strategy " + s.Kind())
}

func algorithmOf(s sluice.Strategy) any {
	switch s := s.(type) {
	case sluice.GCRA:
		return algo.NewGCRA(s)
	case sluice.TokenBucket:
		return algo.NewTokenBucket(s)
	case sluice.FixedWindow:
		return algo.NewFixedWindow(s)
	case sluice.SlidingWindow:
		return algo.NewSlidingWindow(s)
	case sluice.SlidingWindowLog:
		return algo.NewSlidingWindowLog(s)
	}
	panic("memory: unknown strategy " + s.Kind())
}

// space is the keyspace of states S: the keys of one limit index of one policy name, for every
// policy of that name whose limit there has the same shape (shapeOf). Each binding decides them
// through a view with its own numbers, so a key keeps its state when its limit changes.
type space[S any] struct {
	store  *Store
	ident  uint64
	shards [numShards]table[S]
	// idles are the strategies of the views made so far, one for each idleKey: a key is idle only
	// when it is idle under every one of them (idle).
	idles atomic.Pointer[[]algorithm[S]]
	seen  []any // the idleKeys of idles; the store's mutex guards it
}

func newSpace[S any](st *Store) *space[S] {
	sp := &space[S]{store: st, ident: st.partIDs.Add(1)}
	sp.idles.Store(&[]algorithm[S]{})
	for i := range sp.shards {
		sp.shards[i].init(st, sp.idle)
	}
	return sp
}

// view implements keyspace. The caller holds the store's mutex.
func (sp *space[S]) view(s sluice.Strategy) part {
	alg := algorithmOf(s).(algorithm[S])
	if k := idleKey(s); !slices.Contains(sp.seen, k) {
		sp.seen = append(sp.seen, k)
		idles := append(slices.Clone(*sp.idles.Load()), alg)
		sp.idles.Store(&idles)
	}
	return &view[S]{alg: alg, sp: sp}
}

// idle reports whether a state decides like a fresh key's at now and after under every strategy
// bound to the space so far: only then may the sweep or the cap forget it. Any of them may decide
// the key next (a check still holding an older policy, a config that reverts, keys whose plans
// differ), so judging by the newest alone could forget a state that still matters under another.
// No test is safe for limits not bound yet (a token bucket of a larger capacity is full later), so
// a limit first bound after a key was dropped reads it as fresh, as Redis and PostgreSQL read a key
// they let expire once idle under the numbers of its last write, which are among those judged
// here. Strategies whose idle tests agree count once (idleKey), so a space holds one test unless
// its token buckets differ or its windows differ in length.
func (sp *space[S]) idle(s S, now int64) bool {
	for _, a := range *sp.idles.Load() {
		if !a.Idle(s, now) {
			return false
		}
	}
	return true
}

func (sp *space[S]) shard(h uint64) *table[S] { return &sp.shards[h%numShards] }

func (sp *space[S]) sweep(now int64) {
	for i := range sp.shards {
		sp.shards[i].sweep(now)
	}
}

func (sp *space[S]) len() int {
	n := 0
	for i := range sp.shards {
		n += sp.shards[i].len()
	}
	return n
}

// view is a part: the keyspace sp decided by alg, the numbers of one policy's limit.
type view[S any] struct {
	alg algorithm[S]
	sp  *space[S]
}

func (v *view[S]) id() uint64 { return v.sp.ident }

func (v *view[S]) keys() keyspace { return v.sp }

func (v *view[S]) strategy() any { return v.alg }

// check decides a policy of this one limit through the strategy's interface, with the slot locked.
// Store.verdict decides GCRA, token bucket and fixed window limits without it.
func (v *view[S]) check(h uint64, key string, now, cost int64) (sluice.Verdict, bool) {
	t := v.sp.shard(h)
	s, st := t.get(h, key, true)
	if s == nil {
		return sluice.Verdict{}, false
	}
	st, verdict := v.alg.Decide(st, now, cost)
	t.unlock(s, st)
	return verdict, true
}

// Peek and Forecast read the state under the slot's lock: a sliding window's state shares its
// slice with the slot, which checks write in place.

func (v *view[S]) peek(h uint64, key string, now int64) sluice.Decision {
	t := v.sp.shard(h)
	s, st := t.get(h, key, false)
	d := v.alg.Peek(st, now)
	if s != nil {
		t.unlock(s, st)
	}
	return d
}

func (v *view[S]) forecast(h uint64, key string, now, cost int64) sluice.Forecast {
	t := v.sp.shard(h)
	s, st := t.get(h, key, false)
	f := v.alg.Forecast(st, now, cost)
	if s != nil {
		t.unlock(s, st)
	}
	return f
}

func (v *view[S]) refund(h uint64, key string, now, cost int64) bool {
	t := v.sp.shard(h)
	if s, st := t.get(h, key, false); s != nil {
		t.unlock(s, v.alg.Refund(st, now, cost))
	}
	return true // a refund creates no key: the cap never refuses it
}

// debit charges cost to key, creating it if absent; false if the cap refused it.
func (v *view[S]) debit(h uint64, key string, now, cost int64) bool {
	t := v.sp.shard(h)
	s, st := t.get(h, key, true)
	if s == nil {
		return false
	}
	t.unlock(s, v.alg.Debit(st, now, cost))
	return true
}

func (v *view[S]) reset(h uint64, key string) { v.sp.shard(h).reset(h, key) }

func (v *view[S]) hold(h uint64, key string) (held, bool) {
	t := v.sp.shard(h)
	s, retry := t.arr.Load().find(h, key)
	var st S
	switch {
	case retry:
		return nil, false
	case s == nil:
		if s = t.tryInsert(h, key); s == nil {
			return nil, false
		}
	default:
		var ok bool
		if st, ok = t.lock(s); !ok {
			return nil, false
		}
	}
	return &heldSlot[S]{t: t, s: s, v: st, saved: v.alg.Clone(st)}, true
}

func (v *view[S]) prepare(h uint64, key string) bool {
	t := v.sp.shard(h)
	s, st := t.get(h, key, true)
	if s == nil {
		return false
	}
	t.unlock(s, st)
	return true
}

// heldSlot is a slot locked by a multi-key step: v is its state as the step goes, saved as it was.
type heldSlot[S any] struct {
	t        *table[S]
	s        *slot[S]
	v, saved S
}

// check decides the slot with p's numbers: p is a view of the slot's keyspace.
func (hs *heldSlot[S]) check(p part, now, cost int64) (d sluice.Decision) {
	hs.v, d = p.(*view[S]).alg.Check(hs.v, now, cost)
	return d
}

func (hs *heldSlot[S]) restore() { hs.v = hs.saved }
func (hs *heldSlot[S]) unlock()  { hs.t.unlock(hs.s, hs.v) }
