package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridestest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// overridesHarness opens Redis overrides backends, each on a client of its own (a process of its
// own), under a prefix for the test alone. Its clients are named after the prefix, so that cut
// kills their subscriptions and no one else's.
func overridesHarness() overridestest.Harness {
	return overridestest.Harness{Fresh: func(t *testing.T) (func() overrides.Backend, func()) {
		t.Helper()
		admin := client(t)
		name := fmt.Sprintf("sluice-overrides-%d", time.Now().UnixNano())
		prefix := "sluice-test:" + name
		t.Cleanup(func() { do(t, admin, "DEL", prefix+":overrides") })
		open := func() overrides.Backend {
			c := clientWith(t, func(o *rueidis.ClientOption) { o.ClientName = name })
			return redisstore.NewOverrides(c, prefix)
		}
		cut := func() {
			t.Helper()
			list, err := do(t, admin, "CLIENT", "LIST").ToString()
			if err != nil {
				t.Fatal(err)
			}
			killed := 0
			for line := range strings.SplitSeq(list, "\n") {
				f := fields(line)
				if f["name"] == name && f["sub"] != "0" && f["sub"] != "" {
					do(t, admin, "CLIENT", "KILL", "ID", f["id"])
					killed++
				}
			}
			if killed == 0 {
				t.Fatalf("no subscribed client named %s to kill", name)
			}
			t.Logf("killed %d subscribed connections", killed)
		}
		return open, cut
	}}
}

// fields reads a line of CLIENT LIST.
func fields(line string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		out[strings.TrimPrefix(k, "txt:")] = v // a RESP3 verbatim string may keep its format

	}
	return out
}

// TestOverrides runs package overridestest's fleet checks on Redis: three Tables on one Redis
// see each other's changes within a second, expiry, restart, a killed subscription.
func TestOverrides(t *testing.T) {
	overridestest.Run(t, overridesHarness())
}

// TestOverridesLayout: the hash holds each override's JSON under "<policy> <key>", and a store's
// Overrides uses its prefix.
func TestOverridesLayout(t *testing.T) {
	s, c, prefix := newStore(t)
	t.Cleanup(func() { do(t, c, "DEL", prefix+":overrides") })
	b := s.Overrides()
	ctx := context.Background()
	o := overrides.Override{Policy: "api", Key: "a b\x00c", Plan: "pro", Reason: "<moved>", UpdatedAt: 5}
	if existed, err := b.Apply(ctx, overrides.Change{Op: overrides.OpPut, Override: o}); err != nil || existed {
		t.Fatalf("first put: %v, %v", existed, err)
	}
	if existed, err := b.Apply(ctx, overrides.Change{Op: overrides.OpPut, Override: o}); err != nil || !existed {
		t.Fatalf("second put: %v, %v", existed, err)
	}
	got, err := do(t, c, "HGET", prefix+":overrides", "api a b\x00c").ToString()
	if err != nil || got != `{"policy":"api","key":"a b\u0000c","plan":"pro","reason":"<moved>","updatedAt":5}` {
		t.Errorf("stored %s, %v", got, err)
	}
	list, err := b.Load(ctx)
	if err != nil || len(list) != 1 || list[0].Key != o.Key {
		t.Errorf("Load: %+v, %v", list, err)
	}
	overridestest.ExpireByInstant(t, b, o)
}

// TestOverridesRedisDown: a backend whose Redis does not answer fails New, rather than making a
// Table that silently sees nothing.
func TestOverridesRedisDown(t *testing.T) {
	opt := rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}, DisableCache: true}
	c, _ := rueidis.NewClient(opt) // a standalone client comes back with the dial error
	if c != nil {
		defer c.Close()
		if _, err := overrides.New(overrides.Config{Backend: redisstore.NewOverrides(c, "x")}); err == nil {
			t.Fatal("New on an unreachable Redis succeeded")
		}
	}
}

// TestOverridesCluster runs the fleet checks on a Redis Cluster of three masters: the hash is in
// one slot, the script's PUBLISH reaches every node, and each Table subscribes on a node of the
// cluster's choosing.
func TestOverridesCluster(t *testing.T) {
	redistest.Require(t, "redis-server")
	cluster := redistest.StartCluster(t, 3)
	overridestest.Run(t, overridestest.Harness{Fresh: func(t *testing.T) (func() overrides.Backend, func()) {
		t.Helper()
		name := fmt.Sprintf("sluice-overrides-%d", time.Now().UnixNano())
		open := func() overrides.Backend {
			opt, err := redisstore.ParseURL(cluster.URL())
			if err != nil {
				t.Fatal(err)
			}
			opt.ClientName = name
			c, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return redisstore.NewOverrides(c, "sluice-test:"+name)
		}
		cut := func() {
			t.Helper()
			killed := 0
			for _, addr := range cluster.Addrs() {
				admin := nodeClient(t, addr)
				list, err := do(t, admin, "CLIENT", "LIST").ToString()
				if err != nil {
					t.Fatal(err)
				}
				for line := range strings.SplitSeq(list, "\n") {
					if f := fields(line); f["name"] == name && f["sub"] != "0" && f["sub"] != "" {
						do(t, admin, "CLIENT", "KILL", "ID", f["id"])
						killed++
					}
				}
			}
			if killed == 0 {
				t.Fatalf("no subscribed client named %s to kill", name)
			}
		}
		return open, cut
	}})
}
