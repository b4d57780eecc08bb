package memory

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
)

// The memory store's concurrency.Store: each (name, key) with a holder has a set of leases, holder
// → expiry, in one of numShards maps chosen by the pair's hash. A shard's mutex guards its map and
// every set in it, so Admits of one key take turns (an Admit is one step under the lock: prune,
// count, add) and Admits of keys in other shards never wait on each other. Nothing runs per key: an
// Admit prunes its key's expired holders, Sweep prunes every key's, and a key whose last holder
// goes is dropped from its shard.

var _ concurrency.Store = (*Store)(nil)

// leases is the concurrency state of a Store; its zero value is ready to use.
type leases struct {
	shards [numShards]leaseShard
}

type leaseShard struct {
	mu   sync.Mutex // guards keys, every leaseSet in keys, and spare
	keys map[leaseKey]*leaseSet
	// spare is a set emptied by a Release or a prune, kept for the shard's next new key: a key whose
	// holders come and go (one at a time, the common case) then allocates no set each time.
	spare *leaseSet
	_     [128 - 24]byte // one shard per two cache lines: adjacent lines are fetched in pairs
}

type leaseKey struct{ name, key string }

// leaseSet is the holders of one key.
type leaseSet struct {
	holders map[string]int64 // holder → expiry, epoch ms; never empty while in a shard's keys
	// min is a lower bound of the holders' expiries, and the earliest of them unless loose: an Admit
	// prunes only when min has passed, and recomputes min by a scan only when it must report the
	// earliest expiry (a denial) and the one it knew has gone or moved.
	min   int64
	loose bool
	peak  int // the most holders the set has had: a set that grew large is not kept as a spare
}

func (s *Store) leaseShard(name, key string) *leaseShard {
	return &s.leases.shards[hash(hash(s.seed, name), key)%numShards]
}

// Admit implements concurrency.Store.
func (s *Store) Admit(_ context.Context, now int64, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	now, err := s.begin(now)
	if err != nil {
		return concurrency.Admission{}, err
	}
	exp := now + ttlMs
	sh := s.leaseShard(name, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.keys[leaseKey{name, key}]
	if set == nil {
		if s.full() {
			return concurrency.Admission{}, ErrFull // a key with holders counts against MaxKeys
		}
		s.keys.Add(1)
		set = sh.newSet()
		set.add(strings.Clone(holder), exp)
		if sh.keys == nil {
			sh.keys = map[leaseKey]*leaseSet{}
		}
		both := name + key // one allocation for the map's copy of both strings
		sh.keys[leaseKey{both[:len(name)], both[len(name):]}] = set
		return concurrency.Admission{Allowed: true, InFlight: 1, Limit: limit}, nil
	}
	set.prune(now)
	if old, ok := set.holders[holder]; ok {
		set.renew(holder, old, exp)
		return concurrency.Admission{Allowed: true, InFlight: int64(len(set.holders)), Limit: limit}, nil
	}
	if n := int64(len(set.holders)); n >= limit {
		// n >= limit >= 1: the set is not empty, and stays in the shard.
		return concurrency.Admission{InFlight: n, Limit: limit, RetryAfterMs: set.earliest() - now}, nil
	}
	set.add(strings.Clone(holder), exp)
	return concurrency.Admission{Allowed: true, InFlight: int64(len(set.holders)), Limit: limit}, nil
}

// Release implements concurrency.Store.
func (s *Store) Release(_ context.Context, name, key, holder string) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	sh := s.leaseShard(name, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := leaseKey{name, key}
	set := sh.keys[k]
	if set == nil {
		return nil
	}
	exp, ok := set.holders[holder]
	if !ok {
		return nil
	}
	delete(set.holders, holder)
	if exp == set.min {
		set.loose = true
	}
	sh.dropIfEmpty(k, set, &s.keys)
	return nil
}

// Heartbeat implements concurrency.Store.
func (s *Store) Heartbeat(_ context.Context, now int64, name, key, holder string, ttlMs int64) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	sh := s.leaseShard(name, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := leaseKey{name, key}
	set := sh.keys[k]
	if set == nil {
		return concurrency.ErrNotHeld
	}
	set.prune(now)
	old, ok := set.holders[holder]
	if !ok {
		sh.dropIfEmpty(k, set, &s.keys)
		return concurrency.ErrNotHeld
	}
	set.renew(holder, old, now+ttlMs)
	return nil
}

// sweep prunes the holders expired at now, dropping keys left without any.
func (l *leases) sweep(now int64, n *atomic.Int64) {
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, set := range sh.keys {
			set.prune(now)
			sh.dropIfEmpty(k, set, n)
		}
		sh.mu.Unlock()
	}
}

// len is the number of keys with holders, expired or not, and of their holders.
func (l *leases) len() (keys, holders int) {
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		keys += len(sh.keys)
		for _, set := range sh.keys {
			holders += len(set.holders)
		}
		sh.mu.Unlock()
	}
	return keys, holders
}

// newSet returns an empty set, the spare one if there is one. sh.mu is held.
func (sh *leaseShard) newSet() *leaseSet {
	if set := sh.spare; set != nil {
		sh.spare = nil
		return set
	}
	return &leaseSet{holders: make(map[string]int64, 1)}
}

// dropIfEmpty removes set, the set of k, from the shard if it has no holder left, and from the
// store's count of keys n. sh.mu is held.
func (sh *leaseShard) dropIfEmpty(k leaseKey, set *leaseSet, n *atomic.Int64) {
	if len(set.holders) > 0 {
		return
	}
	delete(sh.keys, k)
	n.Add(-1)
	// A set that grew large is left to the collector rather than kept: clear keeps a map's buckets.
	if sh.spare == nil && set.peak <= 64 {
		clear(set.holders)
		sh.spare = set
	}
}

// add admits holder, absent from the set, until exp.
func (set *leaseSet) add(holder string, exp int64) {
	if len(set.holders) == 0 || exp < set.min {
		set.min, set.loose = exp, false // below every other expiry: the earliest
	}
	set.holders[holder] = exp
	set.peak = max(set.peak, len(set.holders))
}

// renew moves holder's expiry from old to exp.
func (set *leaseSet) renew(holder string, old, exp int64) {
	set.holders[holder] = exp
	switch {
	case exp <= set.min:
		set.min, set.loose = exp, false
	case old == set.min:
		set.loose = true // the earliest may have moved later; min stays a lower bound
	}
}

// prune deletes the holders whose lease has expired at now: expiry <= now.
func (set *leaseSet) prune(now int64) {
	if now < set.min {
		return // min is a lower bound: nothing has expired
	}
	first := true
	for h, exp := range set.holders {
		if exp <= now {
			delete(set.holders, h)
			continue
		}
		if first || exp < set.min {
			set.min, first = exp, false
		}
	}
	set.loose = false
}

// earliest is the earliest expiry of a set that is not empty.
func (set *leaseSet) earliest() int64 {
	if set.loose {
		first := true
		for _, exp := range set.holders {
			if first || exp < set.min {
				set.min, first = exp, false
			}
		}
		set.loose = false
	}
	return set.min
}
