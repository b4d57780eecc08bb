package server_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server"
)

// countingStore counts the Checks that reach a store: a shared store as far as the server can
// tell, since it is not the memory store itself.
type countingStore struct {
	sluice.Store
	checks atomic.Int64
}

func (c *countingStore) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, now, p, key, cost)
}

const leaseConfig = `
policies:
  hot:   {strategy: tokenBucket, capacity: 1000000, refillPerSec: 1000, lease: true}
  plain: {strategy: tokenBucket, capacity: 1000000, refillPerSec: 1000}
`

// A policy with lease: true answers a hot key's checks from leases, a few store calls for many
// checks; one without asks the store every time, and so does a check that carries its own instant.
// Close gives back what the leases did not spend.
func TestLeasedPolicy(t *testing.T) {
	store := &countingStore{Store: memStore(t)}
	srv, err := server.New(parse(t, leaseConfig), store, server.Options{AllowClientTime: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(policy string, now int64, n int) int64 {
		t.Helper()
		before := store.checks.Load()
		for range n {
			if d, err := srv.Check(ctx, now, policy, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("Check(%s): %+v, %v", policy, d, err)
			}
		}
		return store.checks.Load() - before
	}
	if calls := check("hot", 0, 10_000); calls > 100 {
		t.Errorf("10,000 leased checks made %d store calls, want a few", calls)
	}
	if calls := check("plain", 0, 100); calls != 100 {
		t.Errorf("100 checks of a policy without lease made %d store calls, want 100", calls)
	}
	if calls := check("hot", t0, 10); calls != 10 {
		t.Errorf("10 checks with their own instant made %d store calls, want 10", calls)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	d, err := srv.Peek(ctx, t0, "hot", "k")
	if err != nil {
		t.Fatal(err)
	}
	if spent := 1_000_000 - d.Remaining; spent != 10_010 {
		t.Errorf("after Close the store counts %d units spent, want the 10,010 admitted", spent)
	}
}

// failingStore fails every Check while fail is set, as a store that cannot be reached.
type failingStore struct {
	countingStore
	fail atomic.Bool
}

func (f *failingStore) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if f.fail.Load() {
		return sluice.Decision{}, sluice.ErrUnavailable
	}
	return f.countingStore.Check(ctx, now, p, key, cost)
}

// While the store is down, a leased policy fails open check by check, as any policy does, and
// takes no lease for what the store never granted: once it is back, the store counts every unit
// the checks spent.
func TestLeasedPolicyFailsOpenWithoutLease(t *testing.T) {
	store := &failingStore{countingStore: countingStore{Store: memStore(t)}}
	srv, err := server.New(parse(t, leaseConfig), store, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store.fail.Store(true)
	for range 3 {
		if d, err := srv.Check(ctx, 0, "hot", "k", 1); err != nil || !d.Allowed {
			t.Fatalf("check while the store is down: %+v, %v; want allowed (fail open)", d, err)
		}
	}
	store.fail.Store(false)
	for range 100 {
		if d, err := srv.Check(ctx, 0, "hot", "k", 1); err != nil || !d.Allowed {
			t.Fatalf("check once the store is back: %+v, %v", d, err)
		}
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := srv.Peek(ctx, 0, "hot", "k")
	if err != nil {
		t.Fatal(err)
	}
	if spent := 1_000_000 - d.Remaining; spent != 100 {
		t.Errorf("the store counts %d units spent, want the 100 admitted while it answered", spent)
	}
}
