package server

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/config"
)

// Admit takes one of limit slots of (name, key) for holder until its lease of ttlMs ends, or
// renews holder's slot (package concurrency). A store without concurrency limits answers
// sluice.ErrUnsupported.
func (s *Server) Admit(ctx context.Context, now int64, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	start := time.Now()
	defer s.observe("admit", start)
	if err := s.slotBounds(limit, ttlMs); err != nil {
		return concurrency.Admission{}, err
	}
	ctx, err := s.at(ctx, now)
	if err != nil {
		return concurrency.Admission{}, err
	}
	c, err := s.concurrency()
	if err != nil {
		return concurrency.Admission{}, err
	}
	bounded, cancel := s.guard.bound(ctx)
	defer cancel()
	a, err := c.Admit(bounded, name, key, holder, limit, ttlMs)
	return a, s.guard.check(ctx, bounded, err)
}

// Release frees holder's slot of (name, key); releasing a slot not held does nothing.
func (s *Server) Release(ctx context.Context, name, key, holder string) error {
	start := time.Now()
	defer s.observe("release", start)
	c, err := s.concurrency()
	if err != nil {
		return err
	}
	bounded, cancel := s.guard.bound(ctx)
	defer cancel()
	return s.guard.check(ctx, bounded, c.Release(bounded, name, key, holder))
}

// Heartbeat extends holder's lease of a slot of (name, key) to ttlMs from now, or answers
// concurrency.ErrNotHeld when the holder holds none (its lease ran out: it must stop, or Admit again).
func (s *Server) Heartbeat(ctx context.Context, now int64, name, key, holder string, ttlMs int64) error {
	start := time.Now()
	defer s.observe("heartbeat", start)
	if err := s.slotBounds(1, ttlMs); err != nil {
		return err
	}
	ctx, err := s.at(ctx, now)
	if err != nil {
		return err
	}
	c, err := s.concurrency()
	if err != nil {
		return err
	}
	bounded, cancel := s.guard.bound(ctx)
	defer cancel()
	return s.guard.check(ctx, bounded, c.Heartbeat(bounded, name, key, holder, ttlMs))
}

// slotBounds refuses a slot limit or lease longer than the config's ceilings (maxSlotLimit,
// maxSlotTtl): a caller could otherwise hold a slot, and its memory, for decades.
func (s *Server) slotBounds(limit, ttlMs int64) error {
	cfg := s.cfg.Load()
	maxLimit, maxTTL := cfg.MaxSlotLimit, cfg.MaxSlotTTL
	if maxLimit == 0 {
		maxLimit = config.DefaultMaxSlotLimit
	}
	if maxTTL == 0 {
		maxTTL = config.DefaultMaxSlotTTL
	}
	if limit > maxLimit {
		return &sluice.InvalidError{Field: "limit", Reason: fmt.Sprintf("%d is above the server's maxSlotLimit %d", limit, maxLimit)}
	}
	if ttlMs > maxTTL.Milliseconds() {
		return &sluice.InvalidError{Field: "ttlMs", Reason: fmt.Sprintf("%d is above the server's maxSlotTtl, %d ms", ttlMs, maxTTL.Milliseconds())}
	}
	return nil
}

// concurrency is the front door of the store's concurrency limits, or sluice.ErrUnsupported.
func (s *Server) concurrency() (*concurrency.Limiter, error) {
	if s.slots == nil {
		return nil, sluice.ErrUnsupported
	}
	return s.slots, nil
}
