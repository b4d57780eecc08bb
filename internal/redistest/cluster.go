package redistest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters only (no replicas) with all 16384
// slots assigned, split evenly in node order.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts a cluster of the given number of masters, waits until
// every node reports cluster_state:ok and kills it at test cleanup.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster needs at least 1 master, got %d", masters)
	}
	dir := t.TempDir()
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, startServer(t, dir, func(port int) []string {
			return append(serverArgs(port, dir),
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "2000",
				"--cluster-announce-ip", "127.0.0.1")
		}))
	}
	for i, n := range c.nodes {
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		mustDo(t, n.Addr(), "CLUSTER", "ADDSLOTSRANGE", lo, hi)
		mustDo(t, n.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", i+1)
	}
	// Full mesh of MEETs: quicker than waiting for gossip.
	for i, a := range c.nodes {
		for _, b := range c.nodes[i+1:] {
			mustDo(t, a.Addr(), "CLUSTER", "MEET", "127.0.0.1", b.port)
		}
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(masters),
	}
	waitFor(t, 20*time.Second, "cluster_state:ok on all nodes", func() error {
		for _, n := range c.nodes {
			if err := infoWant(n.Addr(), []any{"CLUSTER", "INFO"}, want); err != nil {
				return err
			}
		}
		return nil
	})
	return c
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
func (c *Cluster) Nodes() []*Server { return c.nodes }

// mustDo runs a command, failing the test on error.
func mustDo(t testing.TB, addr string, args ...any) any {
	t.Helper()
	r, err := do(addr, args...)
	if err != nil {
		t.Fatalf("redistest: %s %v: %v", addr, args, err)
	}
	return r
}
