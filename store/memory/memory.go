// Package memory is sluice's embedded store, and its default: limit state kept in this process's
// memory, decided with package algo, exact under any number of goroutines.
//
// Each limit of each policy has its own keyspace, an open-addressing hash table split in shards.
// Lookups take no lock and each key carries its own lock bit, so checks on different keys never
// contend and a check on a hot key is one compare-and-swap: a key's state is never read and then
// written in two steps that another check could come between. A composite policy or a CheckAll locks
// all its keys (in one global order, so two steps never wait on each other), decides, and puts every
// state back if any part denied.
//
// Memory stays bounded: a key whose state has become equal to a fresh key's (its limit has fully
// replenished) is dropped by a background sweep, so dropping it never loosens a limit. A key costs
// its slot (about 40 bytes for GCRA, token bucket and fixed window at the table's typical load) plus
// a copy of its bytes. Config.MaxKeys caps the number of keys: past it, each new key evicts an
// existing one of the same shard, which forgets what that key had spent (counted by Evictions).
// There is no goroutine or timer per key.
package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Now returns the current instant in epoch milliseconds. Nil means the process clock: the wall
	// clock read once at New, advanced by the monotonic clock, so it never runs backwards. A clock
	// that does run backwards is held at the latest instant it returned.
	Now func() int64
	// MaxKeys caps the keys held across all policies; 0 means no cap. At the cap a new key evicts
	// another key of the same shard (the cap may be passed by at most one key per shard when a shard
	// has none to give). An evicted key starts over with a full budget.
	MaxKeys int
	// SweepInterval is how often idle keys are dropped. 0 means 10 seconds; negative disables the
	// sweep (keys then stay until Reset or eviction).
	SweepInterval time.Duration
}

// Store is the in-memory sluice.Store. It is safe for concurrent use. Close stops its background
// sweep; the zero Store is not usable, call New.
type Store struct {
	now   func() int64
	seed  maphash.Seed
	max   int64
	parts atomic.Pointer[map[*sluice.Policy]*policyParts]

	mu sync.Mutex // guards adding policies to parts

	partIDs   atomic.Uint64 // numbers parts in creation order: the order multi-key steps lock in
	keys      atomic.Int64
	evictions atomic.Uint64
	closed    atomic.Bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type policyParts struct {
	policy *sluice.Policy
	parts  []part
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store and starts its sweep.
func New(cfg Config) *Store {
	s := &Store{
		seed: maphash.MakeSeed(),
		max:  int64(cfg.MaxKeys),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if cfg.Now == nil {
		s.now = processClock()
	} else {
		s.now = monotonic(cfg.Now)
	}
	s.parts.Store(&map[*sluice.Policy]*policyParts{})
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
	})
	return nil
}

// Len is the number of keys held, over all policies and limits.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Evictions counts the keys evicted by the MaxKeys cap.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// Sweep drops every idle key now. The background sweep calls it; tests and tools may too.
func (s *Store) Sweep() {
	now := s.now()
	for _, pp := range *s.parts.Load() {
		for _, p := range pp.parts {
			p.sweep(now)
		}
	}
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

func (s *Store) full() bool { return s.max > 0 && s.keys.Load() >= s.max }

// partsOf returns the keyspaces of p, creating them on first use. A policy Equal to one seen
// before, such as the same policy reloaded from config, shares its state; a changed policy of the
// same name starts afresh and the old state is dropped.
func (s *Store) partsOf(p *sluice.Policy) *policyParts {
	if pp, ok := (*s.parts.Load())[p]; ok {
		return pp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.parts.Load()
	if pp, ok := cur[p]; ok {
		return pp
	}
	next := make(map[*sluice.Policy]*policyParts, len(cur)+1)
	var pp *policyParts
	for q, qp := range cur {
		if q.Name() == p.Name() {
			if q.Equal(p) {
				pp = &policyParts{policy: p, parts: qp.parts}
				next[q] = qp
			} else {
				for _, part := range qp.parts {
					s.keys.Add(-int64(part.len()))
				}
			}
			continue
		}
		next[q] = qp
	}
	if pp == nil {
		pp = &policyParts{policy: p}
		for _, l := range p.Limits() {
			pp.parts = append(pp.parts, newPart(l.Strategy, s))
		}
	}
	next[p] = pp
	s.parts.Store(&next)
	return pp
}

func (s *Store) begin(now int64) (int64, error) {
	if s.closed.Load() {
		return 0, sluice.ErrClosed
	}
	if now == 0 {
		now = s.now()
	}
	return now, nil
}

// Check implements sluice.Store.
func (s *Store) Check(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	now, err := s.begin(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	pp := s.partsOf(p)
	h := maphash.String(s.seed, key)
	if len(pp.parts) == 1 {
		return pp.parts[0].check(h, key, now, cost), nil
	}
	steps := make([]step, len(pp.parts))
	for i, part := range pp.parts {
		steps[i] = step{part: part, h: h, key: key, cost: p.Cost(i, cost)}
	}
	out := make([]sluice.Decision, len(steps))
	atomically(now, steps, out)
	return sluice.Combine(out), nil
}

// CheckMany implements sluice.Store.
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	for i, k := range keys {
		if out[i], err = s.Check(ctx, now, p, k, cost); err != nil {
			return err
		}
	}
	return nil
}

// CheckAll implements sluice.Store.
func (s *Store) CheckAll(_ context.Context, now int64, ops []sluice.Op, out []sluice.Decision) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	var steps []step
	first := make([]int, len(ops)+1) // steps of op i are steps[first[i]:first[i+1]]
	for i, op := range ops {
		first[i] = len(steps)
		h := maphash.String(s.seed, op.Key)
		for j, part := range s.partsOf(op.Policy).parts {
			steps = append(steps, step{part: part, h: h, key: op.Key, cost: op.Policy.Cost(j, op.Cost)})
		}
	}
	first[len(ops)] = len(steps)
	decisions := make([]sluice.Decision, len(steps))
	atomically(now, steps, decisions)
	for i := range ops {
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
	pp := s.partsOf(p)
	h := maphash.String(s.seed, key)
	if len(pp.parts) == 1 {
		return pp.parts[0].peek(h, key, now), nil
	}
	out := make([]sluice.Decision, len(pp.parts))
	for i, part := range pp.parts {
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
	h := maphash.String(s.seed, key)
	var out sluice.Forecast
	for i, part := range s.partsOf(p).parts {
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
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	h := maphash.String(s.seed, key)
	for i, part := range s.partsOf(p).parts {
		if p.Limits()[i].Unit == sluice.UnitCost {
			part.refund(h, key, now, cost)
		}
	}
	return nil
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, p *sluice.Policy, key string) error {
	if _, err := s.begin(1); err != nil {
		return err
	}
	h := maphash.String(s.seed, key)
	for _, part := range s.partsOf(p).parts {
		part.reset(h, key)
	}
	return nil
}
