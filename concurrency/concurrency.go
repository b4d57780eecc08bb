// Package concurrency limits how many holders may be in flight at once for a key: at most limit,
// however many processes share the store. Where a rate limit counts requests over time, this
// counts those under way: jobs running, connections open, calls awaiting an answer.
//
// It is a lease model, with no background work:
//
//   - Admit asks for one of limit slots of (name, key) for holder, a caller-chosen ID unique among
//     the key's holders (a request ID, a worker ID). Admitted, the holder holds its slot until
//     now + ttlMs: its lease. A holder that already holds a slot is renewed, not given a second.
//   - Heartbeat extends a held lease to now + ttlMs; a holder doing long work heartbeats well within
//     its TTL. A holder that holds no slot gets ErrNotHeld.
//   - Release gives the slot back at once. Releasing a slot not held does nothing.
//
// A holder that dies without releasing keeps its slot until its lease expires: that is what a
// crash costs, and why the TTL should be short and kept alive with Heartbeat. Expired holders are
// pruned at the next Admit of their key (a store may also drop them in its sweep): nothing runs
// per key in the background.
//
// Exactness: at no instant of the store's clock are more than limit unexpired holders admitted.
// Admit decides atomically, in one step per key with no read-then-write race, across a fleet
// sharing the store. A lease is unexpired at instant t while t < its expiry.
//
// A Limiter is the front door: it validates every call and asks its Store, which the memory, Redis
// and PostgreSQL stores all are. Names, keys and holders are 1 to sluice.MaxKeyLen bytes; limit is
// at least 1 and ttlMs from 1 to MaxTTLMs. Anything else is a *sluice.InvalidError naming the input
// ("name", "key", "holder", "limit", "ttlMs"), and changes no state. A store's failure is an error
// matching sluice.ErrUnavailable, a call after Close sluice.ErrClosed.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// ErrNotHeld means a Heartbeat named a holder that holds no slot of the key: it was never admitted,
// it was released, or its lease expired (and the slot may since have gone to another holder). The
// holder must stop its work, or Admit again.
var ErrNotHeld = errors.New("concurrency: slot not held")

// MaxTTLMs is the longest lease a Limiter accepts (about 35 years), so that now + ttlMs stays exact
// in every store: an int64, a PostgreSQL bigint and a Redis sorted-set score (a float64).
const MaxTTLMs = 1 << 40

// Store holds the slots: the memory, Redis and PostgreSQL stores implement it. now is the instant
// to decide at, in epoch milliseconds; 0 means the store's own clock (the process clock for the
// memory store, the server clock for a shared store). Every participant of a key should use the
// same clock: a lease is judged by the instants it is given. A Store may assume valid input: the
// Limiter checks it first. name separates uses of the same keys, as a policy name does; a store's
// slots live apart from its rate-limit keys. The limit is per call: the holders admitted so far stay
// if a later Admit passes a lower limit, and new holders are denied until fewer than that are in
// flight.
type Store interface {
	// Admit takes a slot of (name, key) for holder until now + ttlMs if fewer than limit unexpired
	// holders hold one, or renews holder's slot if it holds one.
	Admit(ctx context.Context, now int64, name, key, holder string, limit int64, ttlMs int64) (Admission, error)
	// Release frees holder's slot of (name, key); nil if it held none.
	Release(ctx context.Context, name, key, holder string) error
	// Heartbeat extends holder's lease to now + ttlMs, or returns ErrNotHeld if holder holds no
	// unexpired slot of (name, key).
	Heartbeat(ctx context.Context, now int64, name, key, holder string, ttlMs int64) error
}

// Admission is the answer to one Admit.
type Admission struct {
	// Allowed reports whether the holder holds a slot now (new or renewed).
	Allowed bool `json:"allowed"`
	// InFlight is how many unexpired holders the key has after this Admit, this one included when
	// allowed.
	InFlight int64 `json:"inFlight"`
	// Limit is the limit Admit was given.
	Limit int64 `json:"limit"`
	// RetryAfterMs is, when denied, how long until the earliest lease of the key expires: a hint,
	// since a slot may come back sooner (a Release) or later (a Heartbeat). 0 when allowed.
	RetryAfterMs int64 `json:"retryAfterMs"`
}

// RetryAfter is RetryAfterMs as a time.Duration.
func (a Admission) RetryAfter() time.Duration {
	return time.Duration(a.RetryAfterMs) * time.Millisecond
}

// Limiter admits holders to a Store's slots, validating every call first. It is safe for
// concurrent use; the zero value has no store and must not be used.
type Limiter struct {
	store Store
}

// New returns a Limiter over store.
func New(store Store) *Limiter { return &Limiter{store: store} }

// Admit takes one of limit slots of (name, key) for holder until now + ttlMs (now: the context's
// instant, sluice.WithNow, else the store's clock), or renews holder's slot if it holds one.
func (l *Limiter) Admit(ctx context.Context, name, key, holder string, limit, ttlMs int64) (Admission, error) {
	if err := checkSlot(name, key, holder); err != nil {
		return Admission{}, err
	}
	if limit < 1 {
		return Admission{}, invalid("limit", "must be at least 1, got %d", limit)
	}
	if err := checkTTL(ttlMs); err != nil {
		return Admission{}, err
	}
	return l.store.Admit(ctx, sluice.NowFrom(ctx), name, key, holder, limit, ttlMs)
}

// Release frees holder's slot of (name, key); releasing a slot not held does nothing.
func (l *Limiter) Release(ctx context.Context, name, key, holder string) error {
	if err := checkSlot(name, key, holder); err != nil {
		return err
	}
	return l.store.Release(ctx, name, key, holder)
}

// Heartbeat extends holder's lease to now + ttlMs, or returns ErrNotHeld if holder holds no
// unexpired slot of (name, key): its lease ran out, and it must stop or Admit again.
func (l *Limiter) Heartbeat(ctx context.Context, name, key, holder string, ttlMs int64) error {
	if err := checkSlot(name, key, holder); err != nil {
		return err
	}
	if err := checkTTL(ttlMs); err != nil {
		return err
	}
	return l.store.Heartbeat(ctx, sluice.NowFrom(ctx), name, key, holder, ttlMs)
}

func checkSlot(name, key, holder string) error {
	for _, f := range [...]struct{ field, v string }{{"name", name}, {"key", key}, {"holder", holder}} {
		if f.v == "" {
			return invalid(f.field, "must not be empty")
		}
		if len(f.v) > sluice.MaxKeyLen {
			return invalid(f.field, "is %d bytes, more than %d", len(f.v), sluice.MaxKeyLen)
		}
	}
	return nil
}

func checkTTL(ttlMs int64) error {
	if ttlMs < 1 {
		return invalid("ttlMs", "must be at least 1, got %d", ttlMs)
	}
	if ttlMs > MaxTTLMs {
		return invalid("ttlMs", "%d exceeds %d", ttlMs, int64(MaxTTLMs))
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
