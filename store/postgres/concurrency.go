package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/sluicehq/sluice/concurrency"
)

// The PostgreSQL store's concurrency.Store: <schema>.leases holds a row per lease (see
// migrations/0006_init.sql). Admit is one statement, a call of <schema>.admit (functions.sql),
// which takes the key's transaction-scoped advisory lock, reads the clock (clock_timestamp() when
// now is 0), deletes the key's expired leases, and renews the holder's lease or counts and inserts
// it: Admits of one key take turns, across every process sharing the database. Heartbeat is one
// UPDATE of the holder's row, if its lease has not expired, and Release one DELETE. The sweep
// (Config.SweepInterval) deletes leases expired more than Config.SweepGrace ago, so the rows of
// keys nobody admits again go too.

var _ concurrency.Store = (*Store)(nil)

// leaseStatements are the Concurrency's SQL, with the schema filled in.
type leaseStatements struct {
	admit, heartbeat, release, sweep string
}

func newLeaseStatements(q string) leaseStatements {
	return leaseStatements{
		admit: "SELECT " + q + ".admit($1, $2, $3, $4, $5, $6, $7, $8, " + waitFor("$9") + ")" + before("$9"),
		// The instant is read once, before the row's lock is waited for: a lease that expired
		// meanwhile is not extended.
		heartbeat: "WITH c AS (SELECT CASE WHEN $3::bigint = 0 THEN floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint ELSE $3::bigint END AS n)" +
			" UPDATE " + q + ".leases l SET expires_at = c.n + $4 FROM c WHERE l.slot = $1 AND l.holder = $2 AND l.expires_at > c.n",
		release: "DELETE FROM " + q + ".leases WHERE slot = $1 AND holder = $2",
		sweep: "DELETE FROM " + q + ".leases WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + q + ".leases" +
			" WHERE expires_at < least(floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint, $1) - $2" +
			" LIMIT $3 FOR UPDATE SKIP LOCKED))",
	}
}

// slotOf identifies name and key in <schema>.leases: sha256 of the name's length, the name and the
// key, and the advisory lock of the key, the digest's first 8 bytes.
func slotOf(name, key string) (slot []byte, lock int64) {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	h.Write([]byte(name))
	h.Write([]byte(key))
	slot = h.Sum(nil)
	return slot, int64(binary.BigEndian.Uint64(slot))
}

// Admit implements concurrency.Store: one statement.
func (s *Store) Admit(ctx context.Context, now int64, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	if err := s.begin(now); err != nil {
		return concurrency.Admission{}, err
	}
	slot, lock := slotOf(name, key)
	var out []int64
	err := s.retry(ctx, func(qctx context.Context) error {
		return noRowsLate(s.pool.QueryRow(qctx, s.sql.leases.admit, slot, lock, textOf(name), textOf(key), textOf(holder), limit, ttlMs, now, giveUpAt(ctx)).Scan(&out))
	})
	if err != nil {
		return concurrency.Admission{}, err
	}
	if len(out) != 3 {
		return concurrency.Admission{}, unavailable(fmt.Errorf("admit replied %d numbers, want 3", len(out)))
	}
	return concurrency.Admission{Allowed: out[0] == 1, InFlight: out[1], Limit: limit, RetryAfterMs: out[2]}, nil
}

// Release implements concurrency.Store: one statement.
func (s *Store) Release(ctx context.Context, name, key, holder string) error {
	if err := s.open(); err != nil {
		return err
	}
	slot, _ := slotOf(name, key)
	return s.retry(ctx, func(qctx context.Context) error {
		_, err := s.pool.Exec(qctx, s.sql.leases.release, slot, textOf(holder))
		return err
	})
}

// Heartbeat implements concurrency.Store: one statement.
func (s *Store) Heartbeat(ctx context.Context, now int64, name, key, holder string, ttlMs int64) error {
	if err := s.begin(now); err != nil {
		return err
	}
	slot, _ := slotOf(name, key)
	var held int64
	err := s.retry(ctx, func(qctx context.Context) error {
		tag, err := s.pool.Exec(qctx, s.sql.leases.heartbeat, slot, textOf(holder), now, ttlMs)
		held = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		return err
	case held == 0:
		return concurrency.ErrNotHeld
	}
	return nil
}

// sweepLeases deletes leases expired more than the grace before until (or the clock, if earlier),
// SweepBatch at a time, and returns how many it deleted.
func (s *Store) sweepLeases(ctx context.Context, until int64) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.sql.leases.sweep, until, s.grace, s.batch)
		if err != nil {
			return total, s.fail(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) || ctx.Err() != nil {
			return total, nil
		}
	}
}
