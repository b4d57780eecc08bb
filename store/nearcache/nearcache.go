// Package nearcache keeps, in front of a shared store (Redis, and any store that costs a round
// trip), a near cache of denials: a key the store denied answers "denied" here, without asking the
// store, until the store's own retryAfterMs has passed. A hot abusive key then costs the shared
// store one check per retry period instead of one per request, like envoyproxy/ratelimit's
// over-limit local cache.
//
// # Model
//
// When the inner store denies a check of policy p, key k and cost c at instant n with retryAfterMs
// T, the near cache remembers (p, k) → {since n, until n+T, cost c, the decision}. A later check of
// p and k for a cost of at least c at an instant from n to until−2 is answered from that entry: the
// remembered decision with retryAfterMs until − instant, the same limit, remaining, resetAt and
// deniedBy, and a copy of its parts (each denied part's retry counted down alike). Anything else
// goes to the store: a smaller cost (it might pass), an instant before n or from until−1 on, a
// policy not selected by Config.Policies. The entry ends 1 ms before until because the stores
// compute retryAfterMs in float64 and round it up: for tokenBucket and slidingWindow it can come
// out 1 ms longer than the wait that admits the check (about one denial in twenty of a token
// bucket refilling 2.5 a second), and never more: the error before rounding is far below 1 ms. For the same reason a denial with a retry of 1 ms is
// not remembered. A Refund or Reset of p and k, and any decision the store allows for them, drop
// the entry. Peek and Forecast always go to the store.
//
// # Guarantee
//
// The near cache never admits anything: it answers only denials, and every allowed decision comes
// from the store. Nor does it deny what the store would admit, as long as a key's budget comes
// back only with time or through this process's Refund and Reset: a denial for cost c at n implies
// a denial for any cost ≥ c at every instant before the store's retry (a larger cost needs more
// budget, consuming only takes budget away, and retryAfterMs is the earliest instant the check
// could pass, to the millisecond of rounding above; a lower bound for slidingWindow, on the safe
// side). The exception is budget that comes back early behind this process's back: another
// process's Refund or Reset (including the refunds of a Redis Cluster CheckAll across slots), or
// the store forgetting a key (a Redis key evicted under maxmemory, a memory store's MaxKeys). Then
// the near cache may go on denying a key the store would now admit until the entry ends, at most
// the retryAfterMs the store gave. A check the store allows for the key drops the entry at once.
//
// # Policies
//
// Entries are keyed by the policy's name and the key, and a hit also needs the policy to be the one
// that was denied, or Equal to it. The name, because stores keep state by name (the Redis store
// keeps a key's state under the policy's name even while its definition changes, and the memory
// store shares state between Equal policies), so a Refund or Reset under any definition of the name
// must reach the entry. Equality, because a policy redefined under the same name (a hot reload that
// raises its limit) may admit what the old one denied, so it must not reuse an old denial. The
// Limiter hands the store the same *Policy for as long as a policy stays Equal, so the check is a
// pointer compare on every hit; Equal only runs when the pointers differ.
//
// # Clocks
//
// An explicit now is the instant the store decides at too, so the entry ends with the store's
// denial. With now = 0 the store decides by its own clock (the Redis server's) and the entry by
// Config.Now, read before the store is asked, so the round trip only makes the entry end earlier.
// A constant offset between the two clocks cancels out: the entry lasts the store's retryAfterMs, a
// duration, from the local instant. What counts is a clock that jumps, or runs at another rate,
// while an entry lives: if the local clock loses d against the store's over the entry's life (the
// store's clock stepped forward by d, or the local one back), the entry ends d late and denies up
// to d longer than the store would; if it gains d, the entry ends d early, which only means asking
// the store again. The default Config.Now follows the process's monotonic clock, so only the
// store's clock can step.
//
// # Memory and concurrency
//
// Config.MaxKeys bounds the entries. The map is split in shards, each with its own lock, so checks
// on different cores seldom wait on each other; a hit takes one shard lock, one map lookup, and
// allocates nothing for a single-limit policy. There is no goroutine or timer: an entry past its
// end is dropped when a lookup finds it, and a full shard drops its ended entries, or failing any
// one at random, when a new denial arrives.
//
// The zero Config caches every policy's denials, keeps up to DefaultMaxKeys entries and reads the
// process clock.
package nearcache

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// DefaultMaxKeys is the number of entries kept when Config.MaxKeys is 0.
const DefaultMaxKeys = 100_000

// maxShards is the most shards the entries split into: enough that checks on different cores
// seldom share a lock. minPerShard keeps a small cache in fewer shards, so that one shard filling
// before the others wastes little of MaxKeys.
const (
	maxShards   = 64
	minPerShard = 16
)

// Config configures a Store. The zero value caches denials for every policy, keeps up to
// DefaultMaxKeys entries and reads the process clock.
type Config struct {
	// Policies selects, by name, the policies whose denials are cached; it is asked on every call,
	// so it may change its answer at any time (a config reload). Nil means every policy.
	Policies func(name string) bool
	// MaxKeys bounds the entries kept, over all policies; 0 or less means DefaultMaxKeys. At the
	// bound, a new denial takes the place of ended entries, or else of an arbitrary one.
	MaxKeys int
	// Now returns the current instant in epoch ms, for calls with now = 0. Nil means the wall clock
	// read at New, advanced by the monotonic clock (so a step of the wall clock never stretches an
	// entry).
	Now func() int64
	// OnLocal, if set, is called with the policy's name after each decision answered from the cache
	// (a Check, a key of CheckMany, an op of CheckAll), outside any lock: a hook for a per-policy
	// counter. It must be safe for concurrent use.
	OnLocal func(policy string)
}

// Store is a sluice.Store that answers remembered denials itself and asks the inner store
// everything else. It is safe for concurrent use. The zero Store is not usable: call New.
type Store struct {
	inner    sluice.Store
	policies func(string) bool
	onLocal  func(string)
	now      func() int64
	seed     maphash.Seed
	perShard int    // entries a shard keeps at most
	mask     uint64 // len(shards) - 1
	shards   []shard
}

var _ sluice.Store = (*Store)(nil)

// shard is one lock's part of the entries, padded to whole cache lines so that neighbouring
// shards' locks do not share one.
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

type shardState struct {
	mu sync.Mutex // guards entries, gen and soonest
	// entries holds the remembered denials of the keys hashed to this shard. An entry is never
	// changed once in the map, only replaced, so a lookup may read it after unlocking.
	entries map[entryKey]*entry
	// gen counts the Refunds and Resets of this shard's keys. A check reads it before asking the
	// store and remembers the denial only if it has not moved: a denial the store gave before a
	// Refund or Reset that ran meanwhile must not outlive it.
	gen uint64
	// soonest is a lower bound of the entries' ends: before it, no entry has ended and a full shard
	// need not look for one.
	soonest int64
	// answered counts the decisions answered from this shard. Written under mu, read without it.
	answered atomic.Uint64
}

type entryKey struct {
	policy, key string
}

// entry is a remembered denial: checks of policy (or a policy Equal to it) and the key, costing at
// least cost, are denied from since to end-1. until is the instant the store said the check could
// pass again; end is 1 ms before it, for the rounding of the store's retryAfterMs.
type entry struct {
	policy            *sluice.Policy
	since, end, until int64
	cost              int64
	d                 sluice.Decision // its Parts are the entry's own, never written
}

// New returns a Store that caches inner's denials as cfg says.
func New(inner sluice.Store, cfg Config) *Store {
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := maxShards
	for n > 1 && maxKeys/n < minPerShard {
		n /= 2
	}
	s := &Store{
		inner:    inner,
		policies: cfg.Policies,
		onLocal:  cfg.OnLocal,
		now:      cfg.Now,
		seed:     maphash.MakeSeed(),
		perShard: maxKeys / n,
		mask:     uint64(n - 1),
		shards:   make([]shard, n),
	}
	if s.now == nil {
		base := time.Now()
		wall := base.UnixMilli()
		s.now = func() int64 { return wall + time.Since(base).Milliseconds() }
	}
	for i := range s.shards {
		s.shards[i].entries = map[entryKey]*entry{}
		s.shards[i].soonest = math.MaxInt64
	}
	return s
}

// Answered returns how many decisions the cache has answered without asking the store: one per
// Check, per key of CheckMany and per op of CheckAll that a remembered denial answered.
func (s *Store) Answered() uint64 {
	var n uint64
	for i := range s.shards {
		n += s.shards[i].answered.Load()
	}
	return n
}

// Len returns the number of entries held, ended ones not yet dropped included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) selected(p *sluice.Policy) bool {
	return s.policies == nil || s.policies(p.Name())
}

// instant is the instant a call decides at, as far as the cache is concerned.
func (s *Store) instant(now int64) int64 {
	if now != 0 {
		return now
	}
	return s.now()
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// lookup answers a check of p, key and cost at n from the cache if it can. Either way it returns
// the shard's generation, for remembering what the store answers instead.
func (s *Store) lookup(sh *shard, p *sluice.Policy, key string, cost, n int64) (d sluice.Decision, gen uint64, ok bool) {
	k := entryKey{p.Name(), key}
	sh.mu.Lock()
	e, found := sh.entries[k]
	switch {
	case !found:
	case n >= e.end:
		delete(sh.entries, k)
	case n >= e.since && cost >= e.cost && (e.policy == p || e.policy.Equal(p)):
		ok = true
		sh.answered.Add(1)
	}
	gen = sh.gen
	sh.mu.Unlock()
	if !ok {
		return sluice.Decision{}, gen, false
	}
	if s.onLocal != nil {
		s.onLocal(p.Name())
	}
	return e.at(n), gen, true
}

// at is the entry's decision as of n: it waits what is left of the store's retry, and so does every
// denied part, at least 1 ms.
func (e *entry) at(n int64) sluice.Decision {
	d := e.d
	d.RetryAfterMs = e.until - n
	if d.Parts != nil {
		elapsed := n - e.since
		d.Parts = slices.Clone(d.Parts)
		for i := range d.Parts {
			if part := &d.Parts[i]; !part.Allowed {
				part.RetryAfterMs = max(part.RetryAfterMs-elapsed, 1)
			}
		}
	}
	return d
}

// learn records what the store decided for p, key and cost at n: a denial with a retry above 1 ms
// is remembered, ending 1 ms early (see the package doc), unless a Refund or Reset of the shard ran
// since gen was read; an allowed decision drops the entry.
func (s *Store) learn(sh *shard, gen uint64, p *sluice.Policy, key string, cost, n int64, d sluice.Decision) {
	if d.Allowed {
		sh.mu.Lock()
		delete(sh.entries, entryKey{p.Name(), key})
		sh.mu.Unlock()
		return
	}
	if d.RetryAfterMs <= 1 {
		return
	}
	k := entryKey{p.Name(), strings.Clone(key)} // the caller's key may pin a larger buffer
	e := &entry{policy: p, since: n, end: n + d.RetryAfterMs - 1, until: n + d.RetryAfterMs, cost: cost, d: d}
	e.d.Parts = slices.Clone(d.Parts) // the caller owns d's
	sh.mu.Lock()
	if sh.gen == gen {
		if _, replace := sh.entries[k]; !replace && len(sh.entries) >= s.perShard {
			sh.makeRoom(n, s.perShard)
		}
		sh.entries[k] = e
		sh.soonest = min(sh.soonest, e.end)
	}
	sh.mu.Unlock()
}

// makeRoom drops entries ended at n, or if none has, an arbitrary one. The caller holds mu.
func (sh *shard) makeRoom(n int64, limit int) {
	if sh.soonest <= n {
		sh.soonest = math.MaxInt64
		for k, e := range sh.entries {
			if e.end <= n {
				delete(sh.entries, k)
			} else {
				sh.soonest = min(sh.soonest, e.end)
			}
		}
	}
	for k := range sh.entries {
		if len(sh.entries) < limit {
			break
		}
		delete(sh.entries, k) // map iteration starts at a random entry
	}
}

// forget drops the entry of p's name and key, and stops checks under way from remembering a
// denial given before now.
func (s *Store) forget(p *sluice.Policy, key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.entries, entryKey{p.Name(), key})
	sh.gen++
	sh.mu.Unlock()
}

// Check implements sluice.Store: a remembered denial answers, anything else asks the inner store.
func (s *Store) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if !s.selected(p) {
		return s.inner.Check(ctx, now, p, key, cost)
	}
	n := s.instant(now) // before the store decides, so that the entry cannot end after its denial
	sh := s.shard(key)
	d, gen, ok := s.lookup(sh, p, key, cost, n)
	if ok {
		return d, nil
	}
	d, err := s.inner.Check(ctx, now, p, key, cost)
	if err == nil {
		s.learn(sh, gen, p, key, cost, n, d)
	}
	return d, err
}

// pending is a key or op of a call, the shard it hashes to and the shard's generation when the
// cache looked.
type pending struct {
	i   int
	sh  *shard
	gen uint64
	hit bool // answered by the cache
}

// CheckMany implements sluice.Store: the keys with a remembered denial are answered here, and the
// rest go to the inner store in one CheckMany, at one instant.
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	if !s.selected(p) {
		return s.inner.CheckMany(ctx, now, p, keys, cost, out)
	}
	n := s.instant(now)
	miss := make([]pending, 0, len(keys))
	for i, k := range keys {
		sh := s.shard(k)
		d, gen, ok := s.lookup(sh, p, k, cost, n)
		if ok {
			out[i] = d
			continue
		}
		miss = append(miss, pending{i: i, sh: sh, gen: gen})
	}
	switch len(miss) {
	case 0:
		return nil
	case len(keys):
		if err := s.inner.CheckMany(ctx, now, p, keys, cost, out); err != nil {
			return err
		}
	default:
		rest := make([]string, len(miss))
		restOut := make([]sluice.Decision, len(miss))
		for j, m := range miss {
			rest[j] = keys[m.i]
		}
		if err := s.inner.CheckMany(ctx, now, p, rest, cost, restOut); err != nil {
			return err
		}
		for j, m := range miss {
			out[m.i] = restOut[j]
		}
	}
	for _, m := range miss {
		s.learn(m.sh, m.gen, p, keys[m.i], cost, n, out[m.i])
	}
	return nil
}

// CheckAll implements sluice.Store.
//
// If any op has a remembered denial, the store would deny that op (the ops before it consuming
// can only take budget away), so it would deny the whole CheckAll and consume nothing: the cache
// answers it without asking. Each such op's slot holds its remembered denial. The other ops' slots
// hold what the cache cannot know, reported the way a fail-open decision is: allowed, with every
// number zero and DeniedBy -1. Combine then binds to a remembered denial, and no caller mistakes
// the zeros for a count (the Envoy front end peeks the allowed parts of a denied request for their
// numbers anyway).
//
// Otherwise the inner store decides. An op it allowed drops its entry; an op it denied is
// remembered, unless an earlier op has the same policy name and key: the store decided that op as
// if the earlier one had consumed, which was not so.
func (s *Store) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	var n int64
	var look []pending // look[i].sh is nil for an op whose policy is not selected
	hit := false
	for i, op := range items {
		if !s.selected(ps[i]) {
			continue
		}
		if look == nil {
			n = s.instant(now)
			look = make([]pending, len(items))
		}
		sh := s.shard(op.Key)
		d, gen, ok := s.lookup(sh, ps[i], op.Key, op.Cost, n)
		look[i] = pending{i: i, sh: sh, gen: gen, hit: ok}
		if ok {
			out[i], hit = d, true
		}
	}
	if hit {
		for i := range items {
			if !look[i].hit {
				out[i] = sluice.Decision{Allowed: true, DeniedBy: -1}
			}
		}
		return nil
	}
	if err := s.inner.CheckAll(ctx, now, ps, items, out); err != nil || look == nil {
		return err
	}
	var first map[entryKey]int // the first op of each policy name and key, for long CheckAlls
	for i, op := range items {
		if look[i].sh == nil {
			continue
		}
		if !out[i].Allowed {
			if first == nil && len(items) > 16 {
				first = make(map[entryKey]int, len(items))
				for j := len(items) - 1; j >= 0; j-- {
					first[entryKey{ps[j].Name(), items[j].Key}] = j
				}
			}
			if repeated(ps, items, i, first) {
				continue
			}
		}
		s.learn(look[i].sh, look[i].gen, ps[i], op.Key, op.Cost, n, out[i])
	}
	return nil
}

// repeated reports whether an item before i has item i's policy name and key (first, if not nil,
// maps each to its first item).
func repeated(ps []*sluice.Policy, items []sluice.Item, i int, first map[entryKey]int) bool {
	name, key := ps[i].Name(), items[i].Key
	if first != nil {
		return first[entryKey{name, key}] < i
	}
	for j, op := range items[:i] {
		if op.Key == key && ps[j].Name() == name {
			return true
		}
	}
	return false
}

// Peek implements sluice.Store by asking the inner store.
func (s *Store) Peek(ctx context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	return s.inner.Peek(ctx, now, p, key)
}

// Forecast implements sluice.Store by asking the inner store.
func (s *Store) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	return s.inner.Forecast(ctx, now, p, key, cost)
}

// Refund implements sluice.Store: the inner store refunds, and the key's entry is dropped whatever
// the outcome (an error may still have refunded) and whether or not its policy is selected now.
func (s *Store) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	err := s.inner.Refund(ctx, now, p, key, cost)
	s.forget(p, key)
	return err
}

// Debit implements sluice.Store. A debit only makes a key's denials longer, so a cached denial
// stays true; the cache asks the store again when it ends.
func (s *Store) Debit(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.inner.Debit(ctx, now, p, key, cost)
}

// Reset implements sluice.Store: the inner store forgets the key, and so does the cache.
func (s *Store) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	err := s.inner.Reset(ctx, p, key)
	s.forget(p, key)
	return err
}
