package server_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server"
)

// seen is a KeyObserver that remembers what it was told.
type seen struct {
	mu  sync.Mutex // guards got
	got []string
}

func (s *seen) Observe(policy, key string, denied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	verdict := "allowed"
	if denied {
		verdict = "denied"
	}
	s.got = append(s.got, policy+"/"+key+"/"+verdict)
}

func TestKeyObserver(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		do   func(*server.Server)
		want []string
	}{
		{"check", func(s *server.Server) {
			for range 4 {
				_, _ = s.Check(ctx, 0, "open-api", "k", 1)
			}
		}, []string{"open-api/k/allowed", "open-api/k/allowed", "open-api/k/allowed", "open-api/k/denied"}},
		{"unknown policy and bad cost are not observed", func(s *server.Server) {
			_, _ = s.Check(ctx, 0, "nope", "k", 1)
			_, _ = s.Check(ctx, 0, "open-api", "k", -1)
		}, nil},
		{"check many", func(s *server.Server) {
			_, _ = s.CheckMany(ctx, 0, "open-api", []string{"a", "b"}, 2)
			_, _ = s.CheckMany(ctx, 0, "open-api", []string{"a", "b"}, 2)
		}, []string{"open-api/a/allowed", "open-api/b/allowed", "open-api/a/denied", "open-api/b/denied"}},
		{"check all: only the item that denied is a denial", func(s *server.Server) {
			_, _ = s.Check(ctx, 0, "closed-api", "full", 3)
			_, _ = s.CheckAll(ctx, 0, []sluice.Item{{Policy: "open-api", Key: "x", Cost: 1}, {Policy: "closed-api", Key: "full", Cost: 1}})
		}, []string{"closed-api/full/allowed", "open-api/x/allowed", "closed-api/full/denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obs seen
			tc.do(newServer(t, memStore(t), server.Options{Keys: &obs, Local: true}))
			if !slices.Equal(obs.got, tc.want) {
				t.Errorf("observed %q, want %q", obs.got, tc.want)
			}
		})
	}
}

func TestTotals(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, memStore(t), server.Options{})
	for range 5 {
		_, _ = srv.Check(ctx, 0, "open-api", "k", 1)
	}
	_, _ = srv.Check(ctx, 0, "nope", "k", 1)
	tot, err := srv.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tot.Policies["open-api"], (server.PolicyTotals{Allowed: 3, Denied: 2}); got != want {
		t.Errorf("open-api: %+v, want %+v", got, want)
	}
	if got := tot.Policies["(unknown)"].Errors; got != 1 {
		t.Errorf("(unknown) errors %d, want 1", got)
	}
	if n := len(tot.StoreCalls); n == 0 || n != len(tot.StoreBounds)+1 || tot.StoreCalls[n-1] < 5 {
		t.Errorf("store calls %v over bounds %v: want a histogram of at least 5 calls", tot.StoreCalls, tot.StoreBounds)
	}
}

func TestTotalsFailModes(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, brokenStore{}, server.Options{})
	_, _ = srv.Check(ctx, 0, "open-api", "k", 1)
	_, _ = srv.Check(ctx, 0, "closed-api", "k", 1)
	tot, err := srv.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if tot.Policies["open-api"].FailOpen != 1 || tot.Policies["closed-api"].FailClosed != 1 || tot.StoreErrors+tot.StoreTimeouts != 2 {
		t.Errorf("totals %+v: want one fail-open, one fail-closed, two store failures", tot)
	}
}
