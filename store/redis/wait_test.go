package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// TestWaitReplicas runs checks with wait_replicas=1 against a master and its replica: while the
// replica answers, every admission is on it when the check returns; without it, each check still
// stands, after wait_timeout, and is counted as unreplicated; and a check whose deadline leaves no
// room for the WAIT gives up before it counts.
func TestWaitReplicas(t *testing.T) {
	const wait = 50 * time.Millisecond
	m := redistest.StartServer(t)
	r := redistest.StartReplica(t, m)
	s := openStore(t, m.URL()+"?wait_replicas=1&wait_timeout="+wait.String())
	p := sluice.MustPolicy("waited", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1_000_000, WindowMs: 1 << 40}})
	master, replica := nodeClient(t, m.Addr()), nodeClient(t, r.Addr())
	key := storeKey(p.Name(), "k")
	ctx := context.Background()
	counted := int64(0)
	check := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d, err := s.Check(ctx, 0, p, "k", 1)
		if err == nil && !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		if err == nil {
			counted++
		}
		return err
	}
	onReplica := func() {
		t.Helper()
		want, err := do(t, master, "GET", key).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := do(t, replica, "GET", key).ToString(); got != want {
			t.Fatalf("the replica holds %q, the master %q: an admission returned before it was replicated (unreplicated %d)", got, want, s.Unreplicated())
		}
	}

	// The replica answers: each admission is on it by the time its check returns.
	for range 20 {
		if err := check(time.Second); err != nil {
			t.Fatal(err)
		}
		onReplica()
	}
	var wg sync.WaitGroup // concurrent checks, batched: each batch is followed by WAIT
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := s.Check(ctx, 0, p, "k", 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	counted += 64
	onReplica()
	if n := s.Unreplicated(); n != 0 {
		t.Errorf("Unreplicated %d with the replica up, want 0", n)
	}
	stats, err := do(t, master, "INFO", "commandstats").ToString()
	if err != nil || !strings.Contains(stats, "cmdstat_wait:calls=") {
		t.Fatalf("the master ran no WAIT (%v):\n%s", err, stats)
	}

	// The replica is gone: decisions stand, each after the WAIT's timeout, and are counted.
	r.Kill()
	for i := range 3 {
		start := time.Now()
		if err := check(time.Second); err != nil {
			t.Fatalf("check without a replica: %v", err)
		}
		if took := time.Since(start); took < wait {
			t.Errorf("a check without a replica took %v, less than the WAIT's %v", took, wait)
		}
		if n := s.Unreplicated(); n != uint64(i+1) {
			t.Errorf("Unreplicated %d after %d checks without a replica", n, i+1)
		}
	}

	// A deadline shorter than the WAIT: the script gives up at once and counts nothing.
	if err := check(wait - 10*time.Millisecond); !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a check whose deadline cannot hold its WAIT: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	d, err := s.Peek(ctx, 0, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := 1_000_000 - d.Remaining; got != counted {
		t.Errorf("the master counted %d, callers were told %d were admitted", got, counted)
	}
}

// A store made with New from a Config waits for replicas as one opened from a URL does.
func TestWaitReplicasFromConfig(t *testing.T) {
	m := redistest.StartServer(t) // no replica: every wait falls short
	s := redisstore.New(nodeClient(t, m.Addr()), redisstore.Config{WaitReplicas: 1, WaitTimeout: 5 * time.Millisecond})
	p := sluice.MustPolicy("waited-new", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 60_000}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, err := s.Check(ctx, 0, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Check = %+v, %v", d, err)
	}
	if got := s.Unreplicated(); got != 1 {
		t.Errorf("Unreplicated() = %d after a check with no replica to wait for, want 1", got)
	}
}
