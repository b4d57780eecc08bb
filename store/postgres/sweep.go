package pgstore

import (
	"context"
	"math"
	"time"
)

func (s *Store) sweepEvery(ctx context.Context, every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx) //nolint:errcheck // a failed sweep is tried again at the next tick
		}
	}
}

// Sweep deletes the rows that went idle more than Config.SweepGrace ago, and returns how many it
// deleted. The background sweep calls it; tests and tools may too. "Now" is the database clock, or
// the latest instant callers of this Store passed if that is earlier (a replay), since a row idle
// then is idle at every later instant.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	return s.sweep(ctx)
}

// sweep deletes idle rows SweepBatch at a time, each batch its own short statement that skips the
// rows checks hold, until a batch comes back short; then the expired leases likewise.
func (s *Store) sweep(ctx context.Context) (int64, error) {
	until := int64(math.MaxInt64)
	if g := s.given.Load(); g != 0 {
		until = g
	}
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.sql.sweep, until, s.grace, s.batch)
		if err != nil {
			return total, s.fail(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) || ctx.Err() != nil {
			break
		}
	}
	leases, err := s.sweepLeases(ctx, until)
	return total + leases, err
}
