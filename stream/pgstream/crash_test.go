package pgstream

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/streamtest"
	"github.com/sluicehq/sluice/stream"
)

const crashChildEnv = "SLUICE_STREAM_CRASH_CHILD" // the schema the child processes in

var crashQuery = stream.Query{Name: "crash", Stream: "s", WindowMs: 100, IdleFlushMs: 1000, Quota: 20}

// TestCrashChild is the processor the crash test runs in a child process and SIGKILLs: it
// processes forever, printing a line after every commit. Run directly, it does nothing.
func TestCrashChild(t *testing.T) {
	schema := os.Getenv(crashChildEnv)
	if schema == "" {
		t.Skip("runs only as the crash test's child")
	}
	e, err := New(pgtest.Pool(t), Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	for {
		// now 0: no idle flush, so windows close by the watermark alone until the parent's final pass.
		n, err := e.Process(context.Background(), crashQuery, 0, 200)
		if err != nil {
			fmt.Println("error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		fmt.Println("committed", n)
		if n == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// TestCrashExactlyOnce SIGKILLs a processor in a child process again and again while events are
// appended, then finishes the job, and checks that the emitted windows add up to exactly what
// was appended, with no window emitted twice.
func TestCrashExactlyOnce(t *testing.T) {
	e, pool, schema := pgEngine(t)
	ctx := context.Background()
	if err := e.Register(ctx, crashQuery); err != nil {
		t.Fatal(err)
	}

	const batches, perBatch = 120, 50
	var wantCount, wantSum int64
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		seq := 0
		var prev []stream.Event
		for b := range batches {
			var evs []stream.Event
			for range perBatch {
				cost := int64(1 + seq%3)
				evs = append(evs, stream.Event{Stream: "s", Key: fmt.Sprint("k", seq%17), Cost: cost, At: t0 + int64(seq), ID: fmt.Sprint(seq)})
				wantCount++
				wantSum += cost
				seq++
			}
			if err := e.Append(ctx, evs); err != nil {
				t.Error(err)
				return
			}
			if b%10 == 9 { // a producer retrying: the duplicates must count once
				if err := e.Append(ctx, prev); err != nil {
					t.Error(err)
					return
				}
			}
			prev = evs
			time.Sleep(5 * time.Millisecond)
		}
	}()

	kills, commits := 0, 0
	for done := false; !done || kills < 6; {
		select {
		case <-appended:
			done = true
		default:
		}
		c, err := runAndKill(t, schema, time.Duration(30+rand.IntN(120))*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		kills++
		commits += c
	}
	if t.Failed() {
		return
	}
	t.Logf("%d kills, %d commits by the children", kills, commits)
	if commits == 0 {
		t.Fatal("the children never committed: the test exercised nothing")
	}

	// Recovery: a final pass, with a clock far ahead so idle flush closes every window.
	streamtest.ProcessAll(t, e, crashQuery, t0+1e9, 10_000)
	var gotCount, gotSum int64
	seen := map[[2]any]bool{}
	for after := int64(0); ; {
		ws, err := e.Windows(ctx, "s", after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 {
			break
		}
		for _, w := range ws {
			id := [2]any{w.Key, w.Start}
			if seen[id] {
				t.Fatalf("window emitted twice: %+v", w)
			}
			seen[id] = true
			gotCount += w.Count
			gotSum += w.Sum
			after = w.Offset
		}
	}
	st, err := e.Stats(ctx, crashQuery.Name)
	if err != nil {
		t.Fatal(err)
	}
	if gotCount != wantCount || gotSum != wantSum || st.Late != 0 || st.Open != 0 {
		t.Fatalf("windows hold %d events costing %d, appended %d costing %d (stats %+v)", gotCount, gotSum, wantCount, wantSum, st)
	}
	var logged int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+e.q+".log").Scan(&logged); err != nil || logged != wantCount {
		t.Fatalf("log holds %d events, want %d (%v)", logged, wantCount, err)
	}
}

// runAndKill runs the child processor for d once it is ready (connected, its schema checked),
// SIGKILLs it and returns how many commits it reported. Timing from the child's start instead
// would let a slow machine spend all of d starting up, and the test would kill only idle children.
func runAndKill(t *testing.T, schema string, d time.Duration) (int, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+schema, "SLUICE_POSTGRES_URL="+pgtest.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	commits := 0
	ready := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			select {
			case <-ready:
			default:
				close(ready) // the child died before it was ready: stop waiting
			}
		}()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				close(ready)
			case strings.HasPrefix(line, "committed"):
				commits++
			case strings.HasPrefix(line, "error"):
				t.Log("child:", line)
			}
		}
	})
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Error("the child was not ready within a minute")
	}
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	wg.Wait()
	_ = cmd.Wait()
	return commits, nil
}
