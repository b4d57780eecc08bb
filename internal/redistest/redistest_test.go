package redistest

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServerKillStart(t *testing.T) {
	t0 := time.Now()
	s := StartServer(t)
	t.Logf("started %s in %v", s.URL(), time.Since(t0))
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") {
		t.Fatalf("URL = %q", s.URL())
	}
	if _, err := do(s.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := do(s.Addr(), "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %#v, %v", got, err)
	}

	s.Kill()
	s.Kill() // idempotent
	if _, err := do(s.Addr(), "PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	t0 = time.Now()
	s.Start()
	t.Logf("restarted in %v", time.Since(t0))
	if got, err := do(s.Addr(), "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Start = %#v, %v", got, err)
	}
	if got, err := do(s.Addr(), "GET", "k"); err != nil || got != nil {
		t.Fatalf("GET k after restart = %#v, %v; want nil", got, err)
	}

	s.Stop()
	if _, err := do(s.Addr(), "PING"); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
	s.Start()
	if got, err := do(s.Addr(), "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after second Start = %#v, %v", got, err)
	}
}

func TestCluster(t *testing.T) {
	t0 := time.Now()
	c := StartCluster(t, 3)
	t.Logf("cluster %s ready in %v", c.URL(), time.Since(t0))
	addrs := c.Addrs()
	if len(addrs) != 3 || c.URL() != "redis-cluster://"+strings.Join(addrs, ",") {
		t.Fatalf("Addrs = %v, URL = %q", addrs, c.URL())
	}
	for _, a := range addrs {
		if err := infoWant(a, []any{"CLUSTER", "INFO"}, map[string]string{
			"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_known_nodes": "3",
		}); err != nil {
			t.Fatal(err)
		}
	}

	// CLUSTER SLOTS covers all slots exactly once, with masters on our ports.
	slots, err := do(addrs[0], "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	covered := make([]bool, 16384)
	for _, r := range list(slots) {
		e := list(r)
		lo, hi := e[0].(int64), e[1].(int64)
		m := list(e[2])
		owner := net.JoinHostPort(fmt.Sprint(m[0]), fmt.Sprint(m[1]))
		if !slices.Contains(addrs, owner) {
			t.Errorf("slots %d-%d owned by unknown %s", lo, hi, owner)
		}
		for i := lo; i <= hi; i++ {
			if covered[i] {
				t.Fatalf("slot %d assigned twice", i)
			}
			covered[i] = true
		}
	}
	if i := slices.Index(covered, false); i >= 0 {
		t.Fatalf("slot %d not assigned", i)
	}

	// A key is accepted by exactly one node; the others answer MOVED.
	ok, moved := 0, 0
	for _, a := range addrs {
		_, err := do(a, "SET", "somekey", "v")
		switch {
		case err == nil:
			ok++
		case strings.HasPrefix(err.Error(), "MOVED"):
			moved++
		default:
			t.Fatalf("SET on %s: %v", a, err)
		}
	}
	if ok != 1 || moved != 2 {
		t.Fatalf("SET accepted by %d nodes, MOVED by %d", ok, moved)
	}

	// A restarted node rejoins with its slots.
	n := c.Nodes()[1]
	n.Kill()
	t0 = time.Now()
	n.Start()
	waitFor(t, 20*time.Second, "cluster ok after node restart", func() error {
		for _, a := range addrs {
			if err := infoWant(a, []any{"CLUSTER", "INFO"}, map[string]string{
				"cluster_state": "ok", "cluster_slots_ok": "16384", "cluster_known_nodes": "3",
			}); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("cluster ok again %v after node restart", time.Since(t0))
}

func TestSentinelFailover(t *testing.T) {
	t0 := time.Now()
	sn := StartSentinel(t)
	t.Logf("sentinel %s ready in %v", sn.URL(), time.Since(t0))
	if want := "redis-sentinel://" + strings.Join(sn.SentinelAddrs(), ",") + "?master=mymaster"; sn.URL() != want || len(sn.SentinelAddrs()) != 3 {
		t.Fatalf("URL = %q, want %q", sn.URL(), want)
	}
	m, r := sn.Master(), sn.Replica()
	if _, err := do(m.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}

	for round := range 2 {
		t0 = time.Now()
		sn.Failover(t)
		t.Logf("failover %d took %v", round+1, time.Since(t0))
		if sn.Master() != r || sn.Replica() != m {
			t.Fatalf("after failover Master = %s, Replica = %s; want %s, %s", sn.Master().Addr(), sn.Replica().Addr(), r.Addr(), m.Addr())
		}
		if err := infoWant(r.Addr(), []any{"INFO", "replication"}, map[string]string{"role": "master"}); err != nil {
			t.Fatal(err)
		}
		if err := replicaOf(m, r); err != nil {
			t.Fatal(err)
		}
		for _, s := range sn.sentinels {
			if got, err := sn.masterAddr(s); err != nil || got != r.Addr() {
				t.Fatalf("sentinel %s reports master %s (%v), want %s", s.Addr(), got, err, r.Addr())
			}
		}
		if got, err := do(r.Addr(), "GET", "k"); err != nil || got != "v" {
			t.Fatalf("GET k on new master = %#v, %v", got, err)
		}
		m, r = r, m
	}
}

func TestSentinelFailoverDeadMaster(t *testing.T) {
	sn := StartSentinel(t)
	m, r := sn.Master(), sn.Replica()
	m.Kill()
	t0 := time.Now()
	sn.Failover(t)
	t.Logf("failover with dead master took %v", time.Since(t0))
	if sn.Master() != r || sn.Replica() != m {
		t.Fatalf("after failover Master = %s, want %s", sn.Master().Addr(), r.Addr())
	}
	// The sentinels turn the restarted (empty) former master into a replica.
	m.Start()
	t0 = time.Now()
	waitFor(t, 30*time.Second, "sentinels to reconfigure the restarted master", func() error { return replicaOf(m, r) })
	t.Logf("restarted master reconfigured as replica after %v", time.Since(t0))
}
