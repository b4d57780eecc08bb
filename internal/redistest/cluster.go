package redistest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster with all 16384 slots assigned, split evenly in
// master order: masters only (StartCluster), or each with one replica
// (StartClusterWithReplicas).
type Cluster struct {
	nodes    []*Server
	replicas []*Server // replicas[i] replicates nodes[i] as started
}

// StartCluster starts a cluster of the given number of masters, waits until
// every node reports cluster_state:ok and kills it at test cleanup.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, false)
}

// StartClusterWithReplicas is StartCluster with one replica per master, in
// sync when it returns. A replica takes over its master's slots about 2 s
// (cluster-node-timeout) after the master dies.
func StartClusterWithReplicas(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, true)
}

func startCluster(t testing.TB, masters int, replicas bool) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster needs at least 1 master, got %d", masters)
	}
	dir := t.TempDir()
	c := &Cluster{}
	node := func() *Server {
		return startServer(t, dir, func(port int) []string {
			return append(serverArgs(port, dir),
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "2000",
				"--cluster-announce-ip", "127.0.0.1")
		})
	}
	for range masters {
		c.nodes = append(c.nodes, node())
	}
	if replicas {
		for range masters {
			c.replicas = append(c.replicas, node())
		}
	}
	for i, n := range c.nodes {
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		mustDo(t, n.Addr(), "CLUSTER", "ADDSLOTSRANGE", lo, hi)
		mustDo(t, n.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", i+1)
	}
	// Full mesh of MEETs: quicker than waiting for gossip.
	all := append(slices.Clone(c.nodes), c.replicas...)
	for i, a := range all {
		for _, b := range all[i+1:] {
			mustDo(t, a.Addr(), "CLUSTER", "MEET", "127.0.0.1", b.port)
		}
	}
	for i, r := range c.replicas {
		id := mustDo(t, c.nodes[i].Addr(), "CLUSTER", "MYID")
		// A replica can follow its master only once it knows it: retry until the MEETs landed.
		waitFor(t, 20*time.Second, "CLUSTER REPLICATE on "+r.Addr(), func() error {
			_, err := do(r.Addr(), "CLUSTER", "REPLICATE", id)
			return err
		})
	}
	c.WaitOK(t)
	for i, r := range c.replicas {
		waitFor(t, 30*time.Second, "replica in sync", func() error { return replicaOf(r, c.nodes[i]) })
	}
	return c
}

// WaitOK waits until every running node reports cluster_state:ok with all
// slots served and every node known, as after StartCluster or a node's
// restart.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes) + len(c.replicas)),
	}
	waitFor(t, 20*time.Second, "cluster_state:ok on all nodes", func() error {
		for _, n := range append(slices.Clone(c.nodes), c.replicas...) {
			if !n.running() {
				continue
			}
			if err := infoWant(n.Addr(), []any{"CLUSTER", "INFO"}, want); err != nil {
				return err
			}
		}
		return nil
	})
}

// Addrs returns the nodes' "127.0.0.1:port" addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URL returns "redis-cluster://127.0.0.1:p1,127.0.0.1:p2,...".
func (c *Cluster) URL() string { return "redis-cluster://" + strings.Join(c.Addrs(), ",") }

// Nodes returns the node servers, e.g. to Kill and Start one. A restarted
// node rejoins with its old ID and slots (kept in its nodes.conf) but no data.
// With replicas, these are the masters as started.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Replicas returns the replicas of StartClusterWithReplicas, replica i of
// master i as started (a failover swaps their roles); nil otherwise.
func (c *Cluster) Replicas() []*Server { return c.replicas }

// mustDo runs a command, failing the test on error.
func mustDo(t testing.TB, addr string, args ...any) any {
	t.Helper()
	r, err := do(addr, args...)
	if err != nil {
		t.Fatalf("redistest: %s %v: %v", addr, args, err)
	}
	return r
}
