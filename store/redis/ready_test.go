package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// probe runs one Ping with a deadline, as a readiness probe would.
func probe(s *redisstore.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return s.Ping(ctx)
}

// waitReady waits up to 10 s for a Ping to pass.
func waitReady(t *testing.T, s *redisstore.Store) time.Duration {
	t.Helper()
	start := time.Now()
	for err := probe(s); err != nil; err = probe(s) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not ready 10 s after every slot was served: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Since(start)
}

// stable requires n probes in a row, 25 ms apart, to pass.
func stable(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	failed, first := 0, error(nil)
	for range n {
		if err := probe(s); err != nil {
			failed++
			first = cmp(first, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if failed > 0 {
		t.Errorf("%d of %d probes failed once every slot was served, e.g. %v", failed, n, first)
	}
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestClusterReadyStable kills a master of a Cluster without replicas, a seed of the URL: while its
// slots have no master, no probe may pass (a PING of another node would); once it is back, every
// probe passes.
func TestClusterReadyStable(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := openStore(t, c.URL())
	if err := probe(s); err != nil {
		t.Fatal(err)
	}
	n := c.Nodes()[0]
	n.Kill()
	for i := range 40 {
		if err := probe(s); err == nil {
			t.Fatalf("probe %d passed while a third of the slots had no master", i)
		}
		time.Sleep(25 * time.Millisecond)
	}
	n.Start()
	c.WaitOK(t)
	t.Logf("ready %v after the cluster reported every slot served", waitReady(t, s))
	stable(t, s, 120)
}

// TestClusterReadyAfterFailover kills a master, a seed of the URL, for good: once its replica has
// taken over its slots, every probe passes, though the client keeps the dead seed.
func TestClusterReadyAfterFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3)
	s := openStore(t, c.URL())
	if err := probe(s); err != nil {
		t.Fatal(err)
	}
	c.Nodes()[0].Kill()
	killed := time.Now()
	replica := nodeClient(t, c.Replicas()[0].Addr())
	for {
		info, err := replica.Do(context.Background(), replica.B().Info().Section("replication").Build()).ToString()
		if err == nil && strings.Contains(info, "role:master") {
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("the replica did not take over in 20 s: %v %s", err, info)
		}
		time.Sleep(25 * time.Millisecond)
	}
	c.WaitOK(t)
	t.Logf("the replica took over %v after the kill; ready %v later", time.Since(killed), waitReady(t, s))
	stable(t, s, 120)
}

// TestReadyRefusesAReplica points a store at a replica, as a client still on a demoted master
// would be: it answers PING, but would refuse every check's write, so the store is not ready.
func TestReadyRefusesAReplica(t *testing.T) {
	m := redistest.StartServer(t)
	r := redistest.StartReplica(t, m)
	if err := probe(openStore(t, m.URL())); err != nil {
		t.Errorf("Ping on the master: %v", err)
	}
	if err := probe(openStore(t, r.URL())); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("Ping on a replica: %v, want READONLY", err)
	}
}
