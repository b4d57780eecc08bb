package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a redis-server replicating master (with args appended to the defaults),
// waits until it is in sync and has acknowledged a write to the master (so that a WAIT on the
// master counts it from the first write on), and kills it at test cleanup. Killed and started
// again, it resyncs from master by itself.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	r := StartServer(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}, args...)...)
	waitFor(t, 30*time.Second, "replica in sync", func() error { return replicaOf(r, master) })
	// After a sync the master streams to the replica only once the replica's first ACK arrives
	// (replicas ACK every second): until then a WAIT times out.
	mustDo(t, master.Addr(), "SET", "redistest:replica:"+r.Addr(), "1")
	want, err := replOffset(master, "master_repl_offset")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	waitFor(t, 30*time.Second, "replica to acknowledge a write", func() error {
		got, err := ackedAt(master, r)
		if err == nil && got < want {
			err = fmt.Errorf("replica acknowledged offset %d, master at %d", got, want)
		}
		return err
	})
	return r
}

// ackedAt is the replication offset that r last acknowledged to master, from the master's INFO
// replication (its slaveN line for r).
func ackedAt(master, r *Server) (int64, error) {
	info, err := doString(master.Addr(), "INFO", "replication")
	if err != nil {
		return 0, fmt.Errorf("%s: %v", master.Addr(), err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		_, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "slave") || !strings.Contains(fields, "port="+strconv.Itoa(r.port)+",") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "offset="); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s lists no replica %s", master.Addr(), r.Addr())
}
