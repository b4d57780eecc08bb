package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/storetest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// openConcurrency returns n stores under one fresh prefix, each on a client of its own (as n
// processes would be), from connect; the prefix's keys are deleted when the test ends.
func openConcurrency(connect func(t *testing.T) rueidis.Client) storetest.OpenConcurrency {
	return func(t *testing.T, n int) []concurrency.Store {
		prefix := fmt.Sprintf("sluice-test:%d:%s", time.Now().UnixNano(), t.Name())
		cs := make([]concurrency.Store, n)
		var clients []rueidis.Client
		for i := range cs {
			c := connect(t)
			clients = append(clients, c)
			s := redisstore.New(c, redisstore.Config{Prefix: prefix})
			t.Cleanup(func() { s.Close() })
			cs[i] = s
		}
		t.Cleanup(func() {
			// On a Cluster KEYS asks one node, and the cluster goes with the test anyway.
			for _, k := range keysUnder(t, clients[0], prefix) {
				do(t, clients[0], "DEL", k)
			}
		})
		return cs
	}
}

func TestConcurrencyContract(t *testing.T) {
	storetest.Concurrency(t, openConcurrency(client))
}

// TestConcurrencyCluster runs the contract on a Redis Cluster, each store on a cluster client of
// its own.
func TestConcurrencyCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	storetest.Concurrency(t, openConcurrency(func(t *testing.T) rueidis.Client {
		opt, err := redisstore.ParseURL(cluster.URL())
		if err != nil {
			t.Fatal(err)
		}
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}))
	// A key's holders share the slot of a policy of that name's state for the key.
	s := openStore(t, cluster.URL())
	pl := newPlacement(t, cluster)
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := s.Admit(context.Background(), t0, "slot", k, "h", 1, 60_000); err != nil {
			t.Fatal(err)
		}
		held := fmt.Sprintf("sluice:{slot:%s}:c4", k)
		if got, want := pl.node(held), pl.node(storeKey("slot", k)); got != want {
			t.Errorf("key %s: holders on node %d, the policy's state on node %d", k, got, want)
		}
		if n, _ := do(t, nodeClient(t, cluster.Addrs()[pl.node(held)]), "ZCARD", held).AsInt64(); n != 1 {
			t.Errorf("%s holds %d holders on its node, want 1", held, n)
		}
		if err := s.Release(context.Background(), "slot", k, "h"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrencyKeys: the holders are one sorted set with the store's prefix and a hash tag, whose
// TTL follows its latest lease, and which is gone once its last holder is.
func TestConcurrencyKeys(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := context.Background()
	if _, err := s.Admit(ctx, t0, "jobs", "k", "h0", 2, 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(ctx, t0+1000, "jobs", "k", "h1", 2, 1000); err != nil {
		t.Fatal(err)
	}
	key := prefix + ":{jobs:k}:c4"
	if keys := keysUnder(t, c, prefix); !slices.Equal(keys, []string{key}) {
		t.Fatalf("keys %v, want [%s]", keys, key)
	}
	if typ, _ := do(t, c, "TYPE", key).ToString(); typ != "zset" {
		t.Errorf("TYPE %s", typ)
	}
	// The latest lease ends at t0+5000, 4000 ms after the latest Admit, plus the second of slack.
	if ttl, _ := do(t, c, "PTTL", key).AsInt64(); ttl <= 4900 || ttl > 5000 {
		t.Errorf("PTTL %d, want about 5000", ttl)
	}
	if err := s.Heartbeat(ctx, t0+1500, "jobs", "k", "h1", 10_000); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := do(t, c, "PTTL", key).AsInt64(); ttl <= 10_900 || ttl > 11_000 {
		t.Errorf("PTTL after Heartbeat %d, want about 11000", ttl)
	}
	for _, h := range []string{"h0", "h1"} {
		if err := s.Release(ctx, "jobs", "k", h); err != nil {
			t.Fatal(err)
		}
	}
	if keys := keysUnder(t, c, prefix); len(keys) != 0 {
		t.Errorf("keys %v left after the last Release", keys)
	}
	// An expired holder's Heartbeat removes it.
	if _, err := s.Admit(ctx, t0, "jobs", "k", "h0", 2, 1000); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, t0+1000, "jobs", "k", "h0", 1000); !errors.Is(err, concurrency.ErrNotHeld) {
		t.Fatalf("Heartbeat of an expired holder: %v", err)
	}
	if keys := keysUnder(t, c, prefix); len(keys) != 0 {
		t.Errorf("keys %v left after the last holder expired", keys)
	}
}

// TestConcurrencyNoScript: the scripts are loaded again after a SCRIPT FLUSH.
func TestConcurrencyNoScript(t *testing.T) {
	s, c, _ := newStore(t)
	ctx := context.Background()
	do(t, c, "SCRIPT", "FLUSH")
	if a, err := s.Admit(ctx, t0, "jobs", "k", "h0", 1, 1000); err != nil || !a.Allowed {
		t.Fatalf("Admit: %+v, %v", a, err)
	}
	do(t, c, "SCRIPT", "FLUSH")
	if err := s.Heartbeat(ctx, t0, "jobs", "k", "h0", 1000); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
}

func TestConcurrencyUnavailableAndClosed(t *testing.T) {
	down, err := redisstore.Open("redis://" + closedPort(t) + "?dial_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	closed, _, _ := newStore(t)
	closed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tt := range []struct {
		s    *redisstore.Store
		want error
	}{{down, sluice.ErrUnavailable}, {closed, sluice.ErrClosed}} {
		if _, err := tt.s.Admit(ctx, 0, "jobs", "k", "h", 1, 1000); !errors.Is(err, tt.want) {
			t.Errorf("Admit: %v, want %v", err, tt.want)
		}
		if err := tt.s.Heartbeat(ctx, t0, "jobs", "k", "h", 1000); !errors.Is(err, tt.want) {
			t.Errorf("Heartbeat: %v, want %v", err, tt.want)
		}
		if err := tt.s.Release(ctx, "jobs", "k", "h"); !errors.Is(err, tt.want) {
			t.Errorf("Release: %v, want %v", err, tt.want)
		}
	}
}
