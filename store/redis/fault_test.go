package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// checkResults requires every call to be a right decision or sluice.ErrUnavailable, returned within
// its deadline and slack, and every call started after clean to succeed. It returns the failures.
func checkResults(t *testing.T, rs []storetest.Result, timeout, slack time.Duration, clean time.Time) (failures int) {
	t.Helper()
	var wrong, slow, late []string
	for _, r := range rs {
		switch {
		case r.Err != nil:
			failures++
			if !errors.Is(r.Err, sluice.ErrUnavailable) || strings.Contains(r.Err.Error(), "NOSCRIPT") {
				wrong = append(wrong, r.Err.Error())
			}
			if r.Start.After(clean) {
				late = append(late, fmt.Sprintf("%v after recovery: %v", r.Start.Sub(clean), r.Err))
			}
		case !r.Decision.Allowed || r.Decision.Limit != storetest.LoadLimit || r.Decision.Remaining < 0 || r.Decision.Remaining >= storetest.LoadLimit:
			wrong = append(wrong, fmt.Sprintf("%+v", r.Decision))
		}
		if r.Took > timeout+slack {
			slow = append(slow, fmt.Sprintf("%v at %v: %v", r.Took, r.Start.Sub(clean), r.Err))
		}
	}
	for _, bad := range []struct {
		what string
		list []string
	}{{"wrong answers", wrong}, {"calls past their deadline", slow}, {"failures after recovery", late}} {
		if len(bad.list) > 0 {
			t.Errorf("%d %s, e.g. %v", len(bad.list), bad.what, bad.list[:min(5, len(bad.list))])
		}
	}
	return failures
}

// noGoroutinePileUp waits until the goroutines are back near base: calls that gave up must not
// leave goroutines behind. The slack is for the client's own connection goroutines.
func noGoroutinePileUp(t *testing.T, base int) {
	t.Helper()
	const slack = 10
	deadline := time.Now().Add(5 * time.Second)
	for n := runtime.NumGoroutine(); n > base+slack; n = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines, %d before the load", n, base)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warm checks once, so the client's connections exist before goroutines are counted.
func warm(t *testing.T, s sluice.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Check(ctx, 0, storetest.LoadPolicy, "warm", 1); err != nil {
		t.Fatal(err)
	}
}

func TestRedisRestartUnderLoad(t *testing.T) {
	// 250 ms per call: CI runs the packages' tests side by side on two cores under -race, and at
	// 100 ms two calls of a healthy store once ran past their deadline 150 ms after recovery.
	const timeout, slack = 250 * time.Millisecond, 200 * time.Millisecond
	srv := redistest.StartServer(t)
	s := openStore(t, srv.URL())
	warm(t, s)
	base := runtime.NumGoroutine()

	l := storetest.StartLoad(t, s, 32, timeout)
	l.WaitClean(t, 5*time.Second, 0)
	srv.Kill()
	time.Sleep(time.Second) // the outage lasts a second under load
	// The restarted Redis holds no scripts: the store must reload them (NOSCRIPT) unseen.
	srv.Start()
	started := time.Now()
	clean := l.WaitClean(t, 3*time.Second, timeout+slack)
	time.Sleep(time.Second) // a second of load after recovery
	rs := l.Stop()

	failures := checkResults(t, rs, timeout, slack, clean)
	t.Logf("%d calls, %d failed; clean %v after the restart", len(rs), failures, clean.Sub(started))
	if failures == 0 {
		t.Error("no call failed while Redis was down")
	}
	noGoroutinePileUp(t, base)
}

// sleepRedis has Redis sleep for d (DEBUG SLEEP) and returns once it does; the returned channel
// receives DEBUG's outcome when Redis wakes.
func sleepRedis(t *testing.T, addr string, d time.Duration) <-chan error {
	t.Helper()
	admin, probe := nodeClient(t, addr), nodeClient(t, addr)
	woke := make(chan error, 1)
	go func() {
		woke <- admin.Do(context.Background(), admin.B().Arbitrary("DEBUG", "SLEEP", fmt.Sprint(d.Seconds())).Build()).Error()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := probe.Do(ctx, probe.B().Ping().Build()).Error()
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return woke // a PING went unanswered
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis still answers PING after DEBUG SLEEP (%v)", err)
		}
	}
}

func TestSlowRedisIsBounded(t *testing.T) {
	const timeout, pause = 100 * time.Millisecond, 2 * time.Second
	const slack = 200 * time.Millisecond
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	s := openStore(t, srv.URL())
	warm(t, s)
	base := runtime.NumGoroutine()

	l := storetest.StartLoad(t, s, 32, timeout)
	l.WaitClean(t, 5*time.Second, 0)
	woke := sleepRedis(t, srv.Addr(), pause)
	asleep := time.Now()
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	awake := time.Now()
	clean := l.WaitClean(t, 2*time.Second, 2*timeout)
	rs := l.Stop()

	// Redis slept from before asleep until shortly (margin) before its reply to DEBUG reached us: a
	// call that started and had to end within that span cannot have been answered.
	const margin = 100 * time.Millisecond
	failures, during, slowest := checkResults(t, rs, timeout, slack, clean), 0, time.Duration(0)
	for _, r := range rs {
		slowest = max(slowest, r.Took)
		if r.Start.After(asleep) && r.Start.Add(timeout).Before(awake.Add(-margin)) {
			during++
			if r.Err == nil {
				t.Errorf("a call started %v before Redis woke was answered: %+v", awake.Sub(r.Start), r.Decision)
			}
		}
	}
	t.Logf("%d calls, %d failed, %d started while Redis slept; the slowest took %v; clean %v after it woke",
		len(rs), failures, during, slowest, clean.Sub(awake))
	if during == 0 {
		t.Error("no call ran while Redis slept")
	}
	noGoroutinePileUp(t, base)
}

// TestHungRedisRedialIsBounded shows redialStall. A call whose deadline ends while rueidis redials a
// Redis that accepts connections but does not answer (here DEBUG SLEEP; in production a stalled
// or overloaded Redis): rueidis's handshake fails on the spent context, and _newPipe then calls
// pipe.Close, which waits up to one second for a PING reply before it closes the connection.
// Callers that wait for the same dial wait as long. Short deadlines hit the window every time.
func TestHungRedisRedialIsBounded(t *testing.T) {
	const slack = 200 * time.Millisecond
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	s := openStore(t, srv.URL())
	warm(t, s)
	woke := sleepRedis(t, srv.Addr(), 2*time.Second)
	end := time.Now().Add(1500 * time.Millisecond)
	for i := 0; time.Now().Before(end); i++ {
		timeout := time.Duration(20+i%100*20) * time.Microsecond // 20 µs to 2 ms
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		_, err := s.Check(ctx, 0, storetest.LoadPolicy, "k", 1)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, sluice.ErrUnavailable) || took > timeout+slack {
			t.Errorf("check %d with a %v deadline while Redis hangs: %v after %v", i, timeout, err, took)
			break
		}
	}
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
}
