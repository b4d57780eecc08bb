package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/memory"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// openStore opens the store at url with Open, as sluice serve does, and closes it at cleanup.
func openStore(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// nodeClient is a plain client of the one Redis at addr, for commands the test sends past the store.
func nodeClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	opt, err := redisstore.ParseURL("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// storeKey is where Open's store keeps key's state under a policy with one limit.
func storeKey(policy, key string) string { return "sluice:{" + policy + ":" + key + "}" }

// placement tells which node serves a key as the cluster itself reports it (CLUSTER KEYSLOT and
// CLUSTER SLOTS), independently of the store's own slot computation.
type placement struct {
	t      *testing.T
	admin  rueidis.Client
	owners [16384]int // node index per slot
}

func newPlacement(t *testing.T, c *redistest.Cluster) *placement {
	t.Helper()
	pl := &placement{t: t, admin: nodeClient(t, c.Addrs()[0])}
	index := map[string]int{}
	for i, a := range c.Addrs() {
		index[a] = i
	}
	ranges, err := do(t, pl.admin, "CLUSTER", "SLOTS").ToArray()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		// [first slot, last slot, [ip, port, id], replicas...]
		f, _ := r.ToArray()
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		master, _ := f[2].ToArray()
		ip, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		n, ok := index[fmt.Sprintf("%s:%d", ip, port)]
		if !ok {
			t.Fatalf("CLUSTER SLOTS names an unknown node %s:%d", ip, port)
		}
		for s := lo; s <= hi; s++ {
			pl.owners[s] = n
		}
	}
	return pl
}

// node returns the index in Cluster.Nodes of the node that holds key.
func (pl *placement) node(key string) int {
	pl.t.Helper()
	s, err := do(pl.t, pl.admin, "CLUSTER", "KEYSLOT", key).AsInt64()
	if err != nil {
		pl.t.Fatal(err)
	}
	return pl.owners[s]
}

// The login pair: 50 attempts per IP and 5 per account every 15 minutes.
var (
	loginIP      = sluice.MustPolicy("login-ip", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 50, WindowMs: 15 * 60 * 1000}})
	loginAccount = sluice.MustPolicy("login-account", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 15 * 60 * 1000}})
)

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := openStore(t, c.URL())
	pl := newPlacement(t, c)

	t.Run("conformance", func(t *testing.T) { storetest.Vectors(t, s) })
	t.Run("keysApart", func(t *testing.T) { storetest.KeysApart(t, s) }) // a fresh cluster: its keys start empty
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint("sameAsMemory/seed", seed), func(t *testing.T) {
			// Each seed's keys must start empty, as the memory store's do.
			for _, p := range append(storetest.Policies, storetest.Daily) {
				for _, k := range storetest.Keys {
					if err := s.Reset(context.Background(), p, k); err != nil {
						t.Fatal(err)
					}
				}
			}
			storetest.SameAsMemory(t, s, seed, 800)
		})
	}
	t.Run("crossSlotCheckAll", func(t *testing.T) { testCrossSlotCheckAll(t, s, pl) })
	t.Run("CheckMany", func(t *testing.T) { testClusterCheckMany(t, s, pl) })
}

// login is one CheckAll of a login attempt: the IP's limit and the account's.
type login struct{ ip, account string }

// testCrossSlotCheckAll runs the login pair on keys in different slots on different nodes,
// so every CheckAll reserves on two nodes and a denied one refunds on the other.
func testCrossSlotCheckAll(t *testing.T, s *redisstore.Store, pl *placement) {
	// otherNode returns the first of name0, name1, … whose key under policy is not on node.
	otherNode := func(policy, name string, node int) string {
		t.Helper()
		for i := range 100 {
			k := fmt.Sprint(name, i)
			if pl.node(storeKey(policy, k)) != node {
				return k
			}
		}
		t.Fatalf("no %s key off node %d", policy, node)
		return ""
	}
	repeat := func(l login, n int) []login { return slices.Repeat([]login{l}, n) }

	ip := "10.0.0.1"
	ipNode := pl.node(storeKey("login-ip", ip))
	// The account's denial refunds the IP's reservation.
	asha := otherNode("login-account", "asha", ipNode)
	// Ten accounts spend the IP's 50; then the IP's denial refunds a fresh account's reservation.
	var spendIP []login
	for i := range 10 {
		spendIP = append(spendIP, repeat(login{ip, fmt.Sprint("user", i)}, 5)...)
	}
	late := otherNode("login-account", "late", ipNode)

	tests := []struct {
		name    string
		logins  []login
		allowed int
		// remaining is what Peek must find afterwards, per policy and key.
		remaining map[*sluice.Policy]map[string]int64
	}{
		{"account denies", repeat(login{ip, asha}, 15), 5,
			map[*sluice.Policy]map[string]int64{loginIP: {ip: 50 - 5}, loginAccount: {asha: 0}}},
		{"ip denies", append(spendIP, repeat(login{ip, late}, 3)...), 50,
			map[*sluice.Policy]map[string]int64{loginIP: {ip: 0}, loginAccount: {late: 5}}},
	}
	ctx := context.Background()
	for n, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := memory.New(memory.Config{})
			defer ms.Close()
			// Each case in its own window, at fixed instants one millisecond apart.
			now := t0 + int64(n)*3_600_000
			for _, l := range tt.logins {
				if err := errors.Join(s.Reset(ctx, loginIP, l.ip), s.Reset(ctx, loginAccount, l.account)); err != nil {
					t.Fatal(err)
				}
			}
			allowed := 0
			for i, l := range tt.logins {
				ops := []storetest.Op{{Policy: loginIP, Key: l.ip, Cost: 1}, {Policy: loginAccount, Key: l.account, Cost: 1}}
				got, want := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
				if err := storetest.CheckAll(ctx, s, now+int64(i), ops, got); err != nil {
					t.Fatalf("login %d: %v", i, err)
				}
				if err := storetest.CheckAll(ctx, ms, now+int64(i), ops, want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("login %d %v:\ncluster: %+v\nmemory:  %+v", i, l, got, want)
				}
				if got[0].Allowed && got[1].Allowed {
					allowed++
				}
			}
			if allowed != tt.allowed {
				t.Errorf("%d logins admitted, want %d", allowed, tt.allowed)
			}
			at := now + int64(len(tt.logins))
			for p, keys := range tt.remaining {
				for k, want := range keys {
					d, err := s.Peek(ctx, at, p, k)
					if err != nil {
						t.Fatal(err)
					}
					if d.Remaining != want {
						t.Errorf("Peek(%s, %s): remaining %d, want %d (denied CheckAlls leaked reservations)", p.Name(), k, d.Remaining, want)
					}
				}
			}
		})
	}
}

// testClusterCheckMany checks that CheckMany over keys on every node (one script per slot) decides
// as one Check per key in order.
func testClusterCheckMany(t *testing.T, s *redisstore.Store, pl *placement) {
	limit := sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}}
	many, one := sluice.MustPolicy("spread-many", limit), sluice.MustPolicy("spread-one", limit)
	var keys []string
	nodes := map[int]bool{}
	for i := range 12 {
		k := fmt.Sprint("k", i%5) // repeated keys: later checks see earlier ones
		keys = append(keys, k)
		nodes[pl.node(storeKey(many.Name(), k))] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("keys %v cover nodes %v, want all 3", keys, nodes)
	}
	ctx := context.Background()
	got := make([]sluice.Decision, len(keys))
	if err := s.CheckMany(ctx, t0, many, keys, 1, got); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		want, err := s.Check(ctx, t0, one, k, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("key %d (%s): CheckMany %+v, Check %+v", i, k, got[i], want)
		}
	}
}

func TestClusterExact(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := openStore(t, c.URL())
	const goroutines, checks = 200, 10
	for _, tt := range exhausting {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("exact-"+tt.name, sluice.Limit{Strategy: tt.strategy})
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range checks {
						d, err := s.Check(context.Background(), t0, p, "hot", 1)
						switch {
						case err != nil:
							if failed.Add(1) == 1 {
								t.Error(err)
							}
						case d.Allowed:
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d checks failed", n)
			}
			if got := admitted.Load(); got != 1000 {
				t.Errorf("admitted %d of %d checks, want exactly 1000", got, goroutines*checks)
			}
		})
	}
}
