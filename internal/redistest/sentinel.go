package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sentinel is a master, one replica and three sentinels (quorum 2)
// monitoring them.
type Sentinel struct {
	name      string
	sentinels []*Server

	mu              sync.Mutex
	master, replica *Server
}

// StartSentinel starts the setup, waits until the replica is in sync and
// every sentinel sees the master, the replica and the other sentinels, and
// kills it all at test cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	m := StartServer(t)
	r := StartServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(m.port))
	waitFor(t, 30*time.Second, "replica in sync", func() error { return replicaOf(r, m) })

	sn := &Sentinel{name: "mymaster", master: m, replica: r}
	dir := t.TempDir()
	for range 3 {
		sn.sentinels = append(sn.sentinels, startServer(t, dir, func(port int) []string {
			conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
			body := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %q
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 5000
sentinel parallel-syncs %[3]s 1
`, port, dir, sn.name, m.port)
			if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			return []string{conf, "--sentinel"}
		}))
		// Faster than the defaults, to match down-after 1000 ms (with the
		// default 1 s ping period a just switched-to master is spuriously
		// marked down). Limits: with the master down, a replica is only
		// eligible if its INFO (sent every 1 s) is younger than 5 ping
		// periods; 4 publish periods must exceed the failover leader's 1 s
		// INFO period, or other sentinels revert a promotion.
		mustDo(t, sn.sentinels[len(sn.sentinels)-1].Addr(), "SENTINEL", "DEBUG",
			"ping-period", 400, "ask-period", 100, "info-period", 1000, "publish-period", 1000)
	}
	waitFor(t, 30*time.Second, "sentinels to see master, replica and each other", sn.ready)
	return sn
}

// MasterName returns the monitored master's name ("mymaster").
func (sn *Sentinel) MasterName() string { return sn.name }

// SentinelAddrs returns the sentinels' "127.0.0.1:port" addresses.
func (sn *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(sn.sentinels))
	for i, s := range sn.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL returns "redis-sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3?master=NAME".
func (sn *Sentinel) URL() string {
	return "redis-sentinel://" + strings.Join(sn.SentinelAddrs(), ",") + "?master=" + sn.name
}

// Master returns the current master; after Failover, the former replica.
func (sn *Sentinel) Master() *Server {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.master
}

// Replica returns the current replica; after Failover, the former master.
func (sn *Sentinel) Replica() *Server {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.replica
}

// Failover has the sentinels promote the replica (SENTINEL FAILOVER) and
// waits until all of them report it as master and it has role:master. Writes
// acknowledged before the call survive. If the former master is running, it
// is then made an in-sync replica of the new one. Master and Replica swap.
func (sn *Sentinel) Failover(t testing.TB) {
	t.Helper()
	old, next := sn.Master(), sn.Replica()
	if old.running() {
		// Writes acknowledged before Failover must survive it.
		want, err := replOffset(old, "master_repl_offset")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		waitFor(t, 10*time.Second, "replica to catch up before failover", func() error {
			got, err := replOffset(next, "slave_repl_offset")
			if err == nil && got < want {
				err = fmt.Errorf("replica at offset %d, master at %d", got, want)
			}
			return err
		})
	}
	waitFor(t, 30*time.Second, "SENTINEL FAILOVER to be accepted", func() error {
		_, err := do(sn.sentinels[0].Addr(), "SENTINEL", "FAILOVER", sn.name)
		if err != nil && strings.HasPrefix(err.Error(), "INPROG") {
			return nil // one is already running, e.g. after a Kill
		}
		return err
	})
	waitFor(t, 30*time.Second, "sentinels to report "+next.Addr()+" as master", func() error {
		for _, s := range sn.sentinels {
			if got, err := sn.masterAddr(s); err != nil || got != next.Addr() {
				return fmt.Errorf("sentinel %s: master is %s (%v)", s.Addr(), got, err)
			}
		}
		return infoWant(next.Addr(), []any{"INFO", "replication"}, map[string]string{"role": "master"})
	})
	if old.running() {
		// The sentinels would do this too, but only after 4+ s.
		waitFor(t, 30*time.Second, "former master to replicate from "+next.Addr(), func() error {
			err := replicaOf(old, next)
			if err != nil && infoWant(old.Addr(), []any{"INFO", "replication"}, map[string]string{"role": "master"}) == nil {
				_, _ = do(old.Addr(), "REPLICAOF", "127.0.0.1", next.port)
			}
			return err
		})
	}
	sn.mu.Lock()
	sn.master, sn.replica = next, old
	sn.mu.Unlock()
}

// masterAddr asks sentinel s for the master's address.
func (sn *Sentinel) masterAddr(s *Server) (string, error) {
	r, err := do(s.Addr(), "SENTINEL", "get-master-addr-by-name", sn.name)
	if err != nil {
		return "", err
	}
	if a, ok := r.([]any); ok && len(a) == 2 {
		return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
	}
	return "", fmt.Errorf("unexpected reply %#v", r)
}

// ready reports whether every sentinel knows the master, sees the replica
// as healthy and sees all other sentinels.
func (sn *Sentinel) ready() error {
	m, r := sn.Master(), sn.Replica()
	for _, s := range sn.sentinels {
		if got, err := sn.masterAddr(s); err != nil || got != m.Addr() {
			return fmt.Errorf("sentinel %s: master is %s (%v)", s.Addr(), got, err)
		}
		master, err := do(s.Addr(), "SENTINEL", "master", sn.name)
		if f := pairs(master)["flags"]; f != "master" {
			return fmt.Errorf("sentinel %s: master flags %q (%v)", s.Addr(), f, err)
		}
		reps, err := do(s.Addr(), "SENTINEL", "replicas", sn.name)
		if err != nil {
			return fmt.Errorf("sentinel %s: %v", s.Addr(), err)
		}
		found := false
		for _, rep := range list(reps) {
			p := pairs(rep)
			if net.JoinHostPort(p["ip"], p["port"]) == r.Addr() && p["flags"] == "slave" && p["master-link-status"] == "ok" {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("sentinel %s: replica %s not seen healthy in %v", s.Addr(), r.Addr(), reps)
		}
		others, err := do(s.Addr(), "SENTINEL", "sentinels", sn.name)
		if err != nil {
			return fmt.Errorf("sentinel %s: %v", s.Addr(), err)
		}
		healthy := 0
		for _, o := range list(others) {
			if pairs(o)["flags"] == "sentinel" {
				healthy++
			}
		}
		if healthy != len(sn.sentinels)-1 {
			return fmt.Errorf("sentinel %s: sees %d healthy other sentinels, want %d", s.Addr(), healthy, len(sn.sentinels)-1)
		}
	}
	return nil
}

// replicaOf reports whether r is an in-sync replica of m.
func replicaOf(r, m *Server) error {
	return infoWant(r.Addr(), []any{"INFO", "replication"}, map[string]string{
		"role":               "slave",
		"master_host":        "127.0.0.1",
		"master_port":        fmt.Sprint(m.port),
		"master_link_status": "up",
	})
}

// replOffset reads a replication offset field from s's INFO replication.
func replOffset(s *Server, field string) (int64, error) {
	info, err := doString(s.Addr(), "INFO", "replication")
	if err != nil {
		return 0, fmt.Errorf("%s: %v", s.Addr(), err)
	}
	return strconv.ParseInt(infoField(info, field), 10, 64)
}

// list returns r as an array reply, or nil.
func list(r any) []any {
	a, _ := r.([]any)
	return a
}
