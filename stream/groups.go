package stream

import (
	"crypto/rand"
	"errors"
	"fmt"
)

// Partitions is how many partitions a stream's outputs are split into for consumer groups. It is
// part of the stored state (a group keeps one offset per partition): changing it needs a
// migration that resets every group.
const Partitions = 16

// Limits of Pull.
const (
	DefaultPullLimit = 100
	MaxPullLimit     = 1000
	DefaultLeaseMs   = 30_000
	MaxLeaseMs       = 3_600_000
)

// Partition is the partition of key's outputs, in [0, Partitions): FNV-1a 32 of the key's bytes,
// xor-folded to 4 bits. Folding matters: FNV-1a mod 16 depends only on the low 4 bits of each
// byte, so keys that differ in case or in a digit against a letter ("key-1", "key-a", "key-A",
// "key-q") would all land in one partition. pgstream's migration 0002 computes the same function
// in SQL to backfill outputs emitted before it; the two must not drift apart (a test of pgstream
// checks them against each other).
func Partition(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	h ^= h >> 16
	h ^= h >> 8
	h ^= h >> 4
	return int(h & (Partitions - 1))
}

// Kind names one of a stream's two outputs.
type Kind string

const (
	KindWindows   Kind = "windows"
	KindDecisions Kind = "decisions"
)

// ErrLeaseLost means an Ack named a lease that expired or that the group does not hold (never
// issued, already acked, or taken over by another consumer after it expired). Nothing was
// committed: the batch goes to whoever pulls the partition next.
var ErrLeaseLost = errors.New("stream: lease lost")

// PullRequest asks for one batch of a stream's outputs for a consumer group. Consumer names the
// caller, for the record of who holds a lease. Limit caps the batch (0 means DefaultPullLimit);
// LeaseMs is how long the batch is the caller's before it is handed to someone else (0 means
// DefaultLeaseMs).
type PullRequest struct {
	Group    string
	Stream   string
	Kind     Kind
	Consumer string
	Limit    int
	LeaseMs  int64
}

// AckRequest commits a leased batch through Offset and releases the lease.
type AckRequest struct {
	Group  string
	Stream string
	Kind   Kind
	Lease  string
	Offset int64
}

// Batch is what Pull leased: the items of one partition after the group's committed offset, in
// offset order, in Windows or Decisions as Kind says. Lease names it for Ack until ExpiresAt
// (epoch ms, by the backend's clock). A Batch with an empty Lease holds nothing: no partition
// had items that were not leased already.
type Batch struct {
	Partition int
	Lease     string
	ExpiresAt int64
	Windows   []Window
	Decisions []Decision
}

func checkKind(k Kind) error {
	if k != KindWindows && k != KindDecisions {
		return invalid("kind", "must be %q or %q, got %q", KindWindows, KindDecisions, k)
	}
	return nil
}

// Normalize validates r, naming the first invalid field in a *sluice.InvalidError, and returns it
// with its defaults filled in. Every Backend's Pull starts with it.
func (r PullRequest) Normalize() (PullRequest, error) {
	for _, f := range []struct{ name, v string }{{"group", r.Group}, {"stream", r.Stream}, {"consumer", r.Consumer}} {
		if err := checkName(f.name, f.v); err != nil {
			return r, err
		}
	}
	if err := checkKind(r.Kind); err != nil {
		return r, err
	}
	switch {
	case r.Limit < 0 || r.Limit > MaxPullLimit:
		return r, invalid("limit", "must be 1 to %d (0 for %d), got %d", MaxPullLimit, DefaultPullLimit, r.Limit)
	case r.LeaseMs < 0 || r.LeaseMs > MaxLeaseMs:
		return r, invalid("leaseMs", "must be 1 to %d (0 for %d), got %d", MaxLeaseMs, DefaultLeaseMs, r.LeaseMs)
	}
	if r.Limit == 0 {
		r.Limit = DefaultPullLimit
	}
	if r.LeaseMs == 0 {
		r.LeaseMs = DefaultLeaseMs
	}
	return r, nil
}

// Validate reports the first invalid field of r as a *sluice.InvalidError. Every Backend's Ack
// starts with it; whether Offset is within the batch only the lease tells (CheckBatch).
func (r AckRequest) Validate() error {
	for _, f := range []struct{ name, v string }{{"group", r.Group}, {"stream", r.Stream}, {"lease", r.Lease}} {
		if err := checkName(f.name, f.v); err != nil {
			return err
		}
	}
	if err := checkKind(r.Kind); err != nil {
		return err
	}
	if r.Offset < 0 {
		return invalid("offset", "must not be negative, got %d", r.Offset)
	}
	return nil
}

// CheckBatch refuses an Ack past the leased batch, which ends at offset upto: committing offsets
// the consumer was never given would skip them.
func (r AckRequest) CheckBatch(upto int64) error {
	if r.Offset > upto {
		return invalid("offset", "%d is past the leased batch, which ends at offset %d", r.Offset, upto)
	}
	return nil
}

// LeaseLost is the ErrLeaseLost of an Ack whose lease the group does not hold live, naming it, so
// that every Backend words it alike.
func (r AckRequest) LeaseLost() error {
	return fmt.Errorf("%w: group %q holds no live lease %q on the %s of stream %q", ErrLeaseLost, r.Group, r.Lease, r.Kind, r.Stream)
}

// newLease is a lease id: random, so that a lease of one partition or one engine's lifetime never
// matches another's.
func newLease() string { return rand.Text() }
