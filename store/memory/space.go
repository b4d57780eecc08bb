package memory

import (
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

// part is the state of one limit of one policy, whatever its strategy.
type part interface {
	// check decides a policy of this one limit; ok is false when the cap refused a new key.
	check(h uint64, key string, now, cost int64) (v sluice.Verdict, ok bool)
	peek(h uint64, key string, now int64) sluice.Decision
	forecast(h uint64, key string, now, cost int64) sluice.Forecast
	refund(h uint64, key string, now, cost int64) bool
	debit(h uint64, key string, now, cost int64) bool
	reset(h uint64, key string)
	sweep(now int64)
	len() int
	// id is unique in the store; multi-key steps lock parts in the order of their ids.
	id() uint64
	// strategy is the part's algo strategy, such as *algo.GCRA.
	strategy() any
	// hold locks key's slot for a multi-key step without ever blocking while other slots are held:
	// it reports ok false when the caller must release what it holds and call prepare first.
	hold(h uint64, key string) (held, bool)
	// prepare does what hold could not do without blocking: it waits out a rebuild and creates key.
	// It reports false when the cap refused key.
	prepare(h uint64, key string) bool
}

// held is one locked slot of a multi-key step. It keeps the slot's state from before the step so
// that a denied step can put everything back.
type held interface {
	check(now, cost int64) sluice.Decision
	restore()
	unlock()
}

func newPart(s sluice.Strategy, st *Store) part {
	switch s := s.(type) {
	case sluice.GCRA:
		return newSpace(algo.NewGCRA(s), st)
	case sluice.TokenBucket:
		return newSpace(algo.NewTokenBucket(s), st)
	case sluice.FixedWindow:
		return newSpace(algo.NewFixedWindow(s), st)
	case sluice.SlidingWindow:
		return newSpace(algo.NewSlidingWindow(s), st)
	case sluice.SlidingWindowLog:
		return newSpace(algo.NewSlidingWindowLog(s), st)
	}
	panic("memory: unknown strategy " + s.Kind())
}

// space is a part whose state is S.
type space[S any] struct {
	alg    algorithm[S]
	store  *Store
	ident  uint64
	shards [numShards]table[S]
}

func newSpace[S any](alg algorithm[S], st *Store) *space[S] {
	sp := &space[S]{alg: alg, store: st, ident: st.partIDs.Add(1)}
	for i := range sp.shards {
		sp.shards[i].init(st, alg.Idle)
	}
	return sp
}

func (sp *space[S]) id() uint64 { return sp.ident }

func (sp *space[S]) strategy() any { return sp.alg }

func (sp *space[S]) shard(h uint64) *table[S] { return &sp.shards[h%numShards] }

// check decides a policy of this one limit through the strategy's interface, with the slot locked.
// Store.verdict decides GCRA, token bucket and fixed window limits without it.
func (sp *space[S]) check(h uint64, key string, now, cost int64) (sluice.Verdict, bool) {
	t := sp.shard(h)
	s, v := t.get(h, key, true)
	if s == nil {
		return sluice.Verdict{}, false
	}
	v, verdict := sp.alg.Decide(v, now, cost)
	t.unlock(s, v)
	return verdict, true
}

// Peek and Forecast read the state under the slot's lock: a sliding window's state shares its
// slice with the slot, which checks write in place.

func (sp *space[S]) peek(h uint64, key string, now int64) sluice.Decision {
	t := sp.shard(h)
	s, v := t.get(h, key, false)
	d := sp.alg.Peek(v, now)
	if s != nil {
		t.unlock(s, v)
	}
	return d
}

func (sp *space[S]) forecast(h uint64, key string, now, cost int64) sluice.Forecast {
	t := sp.shard(h)
	s, v := t.get(h, key, false)
	f := sp.alg.Forecast(v, now, cost)
	if s != nil {
		t.unlock(s, v)
	}
	return f
}

func (sp *space[S]) refund(h uint64, key string, now, cost int64) bool {
	t := sp.shard(h)
	if s, v := t.get(h, key, false); s != nil {
		t.unlock(s, sp.alg.Refund(v, now, cost))
	}
	return true // a refund creates no key: the cap never refuses it
}

// debit charges cost to key, creating it if absent; false if the cap refused it.
func (sp *space[S]) debit(h uint64, key string, now, cost int64) bool {
	t := sp.shard(h)
	s, v := t.get(h, key, true)
	if s == nil {
		return false
	}
	t.unlock(s, sp.alg.Debit(v, now, cost))
	return true
}

func (sp *space[S]) reset(h uint64, key string) { sp.shard(h).reset(h, key) }

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

func (sp *space[S]) hold(h uint64, key string) (held, bool) {
	t := sp.shard(h)
	s, retry := t.arr.Load().find(h, key)
	var v S
	switch {
	case retry:
		return nil, false
	case s == nil:
		if s = t.tryInsert(h, key); s == nil {
			return nil, false
		}
	default:
		var ok bool
		if v, ok = t.lock(s); !ok {
			return nil, false
		}
	}
	return &heldSlot[S]{sp: sp, t: t, s: s, v: v, saved: sp.alg.Clone(v)}, true
}

func (sp *space[S]) prepare(h uint64, key string) bool {
	t := sp.shard(h)
	s, v := t.get(h, key, true)
	if s == nil {
		return false
	}
	t.unlock(s, v)
	return true
}

// heldSlot is a slot locked by a multi-key step: v is its state as the step goes, saved as it was.
type heldSlot[S any] struct {
	sp       *space[S]
	t        *table[S]
	s        *slot[S]
	v, saved S
}

func (hs *heldSlot[S]) check(now, cost int64) (d sluice.Decision) {
	hs.v, d = hs.sp.alg.Check(hs.v, now, cost)
	return d
}

func (hs *heldSlot[S]) restore() { hs.v = hs.saved }
func (hs *heldSlot[S]) unlock()  { hs.t.unlock(hs.s, hs.v) }
