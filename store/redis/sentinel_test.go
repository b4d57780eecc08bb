package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestSentinelFailover(t *testing.T) {
	const timeout, slack = 500 * time.Millisecond, 500 * time.Millisecond
	sn := redistest.StartSentinel(t)
	s := openStore(t, sn.URL())
	kept := sluice.MustPolicy("kept", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 3_600_000}})
	// admitted checks kept's key n times at one instant and counts the admissions.
	admitted := func(n int) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		count := 0
		for range n {
			d, err := s.Check(ctx, t0, kept, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				count++
			}
		}
		return count
	}
	if got := admitted(3); got != 3 {
		t.Fatalf("%d of 3 checks admitted before the failover", got)
	}

	l := storetest.StartLoad(t, s, 20, timeout)
	l.WaitClean(t, 5*time.Second, 0)
	sn.Failover(t)
	switched := time.Now()
	clean := l.WaitClean(t, 5*time.Second, timeout+slack)
	time.Sleep(time.Until(switched.Add(2 * time.Second))) // load until 2 s after the switch
	rs := l.Stop()
	failures := checkResults(t, rs, timeout, slack, clean)
	t.Logf("%d calls, %d failed during the switch; clean %v after it", len(rs), failures, clean.Sub(switched))

	// Ready again: the probe reaches the new master (the old one, now a replica, would refuse it).
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after the failover: %v", err)
	}
	// The new master holds what the old one acknowledged: 2 of kept's 5 are left.
	if got := admitted(3); got != 2 {
		t.Errorf("%d of 3 checks admitted after the failover, want 2", got)
	}
	// And the store runs its scripts there: a replica is sent script effects, never EVALSHA.
	stats, err := do(t, nodeClient(t, sn.Master().Addr()), "INFO", "commandstats").ToString()
	if err != nil || !strings.Contains(stats, "cmdstat_evalsha:calls=") {
		t.Errorf("the new master ran no EVALSHA (%v):\n%s", err, stats)
	}
}
