package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/internal/storetest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// TestConcurrencyContract runs the contract on stores in one fresh schema, each on a pool of its
// own, as processes sharing the database would be.
func TestConcurrencyContract(t *testing.T) {
	t.Parallel()
	storetest.Concurrency(t, func(t *testing.T, n int) []concurrency.Store {
		schema := freshSchema(t, testPool(t))
		cs := make([]concurrency.Store, n)
		for i := range cs {
			s, err := pgstore.New(testPool(t), pgstore.Config{Schema: schema, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			cs[i] = s
		}
		return cs
	})
}

// TestConcurrencyRows: a lease is a row of <schema>.leases naming its key, Release deletes it, and
// an Admit deletes its key's expired ones.
func TestConcurrencyRows(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1})
	ctx := context.Background()
	for _, h := range []string{"h0", "h1"} {
		if _, err := s.Admit(ctx, t0, "jobs", "k", h, 3, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases WHERE name = 'jobs' AND key = 'k' AND expires_at = $1", t0+1000); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
	if err := s.Release(ctx, "jobs", "k", "h0"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases"); n != 1 {
		t.Fatalf("%d rows after Release, want 1", n)
	}
	if _, err := s.Admit(ctx, t0+1000, "jobs", "k", "h2", 3, 1000); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases WHERE holder = 'h2'"); n != 1 {
		t.Fatalf("%d rows after the Admit that pruned h1, want h2's alone", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases"); n != 1 {
		t.Fatalf("%d rows after the Admit that pruned h1, want 1", n)
	}
}

// TestSweepDeletesExpiredLeases: the sweep deletes the leases expired more than the grace ago, and
// only those.
func TestSweepDeletesExpiredLeases(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1, SweepGrace: time.Second})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Admit(ctx, t0, "jobs", k, "h", 1, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Admit(ctx, t0, "jobs", "long", "h", 1, 60_000); err != nil {
		t.Fatal(err)
	}
	// The latest instant given is t0: nothing has expired.
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep at t0: %d, %v; want nothing deleted", n, err)
	}
	// At t0+2000, the 1 s leases are a second past their end: within the grace.
	if _, err := s.Admit(ctx, t0+2000, "jobs", "d", "h", 1, 1000); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep at t0+2000: %d, %v; want nothing deleted", n, err)
	}
	if _, err := s.Admit(ctx, t0+2001, "jobs", "e", "h", 1, 1000); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("Sweep at t0+2001: %d, %v; want a, b and c deleted", n, err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases WHERE key IN ('long', 'd', 'e')"); n != 3 {
		t.Fatalf("%d of the unexpired leases left, want 3", n)
	}
	if err := s.Heartbeat(ctx, t0+2001, "jobs", "long", "h", 1000); err != nil {
		t.Fatal(err)
	}
}

// lockOf is the advisory lock Admit takes for name and key: the first 8 bytes of sha256 of the
// name's length (8 bytes, big-endian), the name and the key.
func lockOf(name, key string) int64 {
	b := binary.BigEndian.AppendUint64(nil, uint64(len(name)))
	sum := sha256.Sum256(append(append(b, name...), key...))
	return int64(binary.BigEndian.Uint64(sum[:]))
}

// TestAdmitDeadlineWhileWaiting gives up on an Admit queued behind its key's lock: the server stops
// waiting first, so the Admit is never decided afterwards.
func TestAdmitDeadlineWhileWaiting(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1})
	ctx := context.Background()
	// The lock is held from a pool of its own, and the store's pool has a connection ready: the
	// deadline is spent waiting for the lock alone.
	if _, err := s.Admit(ctx, t0, "jobs", "warm", "h0", 1, 1000); err != nil {
		t.Fatal(err)
	}
	tx, err := testPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockOf("jobs", "k")); err != nil {
		t.Fatal(err)
	}
	// A second: the server gives up 50 ms before the caller would, margin enough under -race.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = s.Admit(short, t0, "jobs", "k", "h0", 1, 1000)
	var pe *pgconn.PgError
	if !errors.Is(err, sluice.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Errorf("error %v, want sluice.ErrUnavailable from the server's lock timeout (55P03)", err)
	}
	// Another key is not held up.
	if a, err := s.Admit(ctx, t0, "jobs", "other", "h0", 1, 1000); err != nil || !a.Allowed {
		t.Errorf("Admit of another key: %+v, %v", a, err)
	}
	tx.Rollback(ctx)
	if n := count(t, pool, "SELECT count(*) FROM "+q+".leases WHERE key = 'k'"); n != 0 {
		t.Errorf("%d leases of the abandoned Admit's key, want 0", n)
	}
	if a, err := s.Admit(ctx, t0, "jobs", "k", "h1", 1, 1000); err != nil || !a.Allowed {
		t.Errorf("Admit after the lock was let go: %+v, %v", a, err)
	}
}

// TestAdmitNeedsReadCommitted: under a default isolation that would count leases as of before the
// key's lock, Admit refuses rather than risk admitting past the limit.
func TestAdmitNeedsReadCommitted(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	cfg, err := pgxpool.ParseConfig(dbURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Admit(context.Background(), t0, "jobs", "k", "h", 1, 1000)
	var pe *pgconn.PgError
	if !errors.Is(err, sluice.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Errorf("Admit under REPEATABLE READ: %v, want sluice.ErrUnavailable from feature_not_supported", err)
	}
}

func TestConcurrencyClosed(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	s.Close()
	ctx := context.Background()
	if _, err := s.Admit(ctx, t0, "jobs", "k", "h", 1, 1000); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Admit: %v", err)
	}
	if err := s.Heartbeat(ctx, t0, "jobs", "k", "h", 1000); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Heartbeat: %v", err)
	}
	if err := s.Release(ctx, "jobs", "k", "h"); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Release: %v", err)
	}
}
