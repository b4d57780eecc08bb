// Command stream-rate-limiter shows sluice's stream mode end to end, in one process: requests are
// appended to a stream, a streaming query counts them per API key in tumbling windows, and a
// gateway reads the throttle decisions for windows over quota. It checks what it sees and prints
// "PASS: N checks", or "FAIL: reason" and exits 1.
//
//	go run ./examples/stream-rate-limiter --window 2s --quota 5 --quiet 3 --noisy 20
//	go run ./examples/stream-rate-limiter --store postgres://postgres@127.0.0.1:5432/test
//
// The checks hold for any noisy > 2*quota and quiet < quota: the noisy key's requests, sent
// within less than one window, fall into at most two windows, one of which then holds more than
// the quota; the quiet key's cannot exceed it however they split.
//
// The engine runs in this process; a --server mode, against a sluice server's stream API, waits
// for that API to exist.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/stream"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout))
}

const (
	quietKey = "key-quiet"
	noisyKey = "key-noisy"
)

// run is the program; it returns the exit code.
func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("stream-rate-limiter", flag.ContinueOnError)
	fs.SetOutput(out)
	window := fs.Duration("window", 2*time.Second, "tumbling window length")
	quota := fs.Int64("quota", 5, "requests allowed per key and window")
	quiet := fs.Int("quiet", 3, "requests the quiet key sends (under quota)")
	noisy := fs.Int("noisy", 20, "requests the noisy key sends (over twice the quota)")
	store := fs.String("store", "memory", `"memory", or a postgres:// URL`)
	schema := fs.String("schema", "", "PostgreSQL schema (default sluice_stream)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := simulate(ctx, out, *window, *quota, *quiet, *noisy, *store, *schema); err != nil {
		fmt.Fprintf(out, "\nFAIL: %v\n", err)
		return 1
	}
	return 0
}

func simulate(ctx context.Context, out io.Writer, window time.Duration, quota int64, quiet, noisy int, store, schema string) error {
	if int64(noisy) <= 2*quota || int64(quiet) >= quota {
		return fmt.Errorf("need noisy > 2*quota and quiet < quota, got noisy %d, quiet %d, quota %d", noisy, quiet, quota)
	}
	var b stream.Backend
	if store == "memory" {
		b = stream.NewMemory()
	} else {
		if schema != "" {
			sep := "?"
			if strings.Contains(store, "?") {
				sep = "&"
			}
			store += sep + "sluice_schema=" + schema
		}
		e, err := stream.OpenPostgres(ctx, store)
		if err != nil {
			return err
		}
		b = e
	}
	defer b.Close()

	// Names unique per run, so runs sharing a database inherit nothing from one another.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	q := stream.Query{
		Name: "rate-limiter-" + run, Stream: "api-requests-" + run,
		WindowMs: window.Milliseconds(), IdleFlushMs: 300, Quota: quota,
	}
	fmt.Fprintf(out, "store %s, window %v, quota %d\n", store, window, quota)
	if err := b.Register(ctx, q); err != nil {
		return err
	}

	// The processor: what a worker process would run, here a goroutine.
	pctx, stop := context.WithCancel(ctx)
	procErr := make(chan error, 1)
	go func() {
		for pctx.Err() == nil {
			n, err := b.Process(pctx, q, time.Now().UnixMilli(), 1000)
			if err != nil && pctx.Err() == nil {
				procErr <- err
				return
			}
			if n == 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		procErr <- nil
	}()
	defer func() { stop(); <-procErr }()

	fmt.Fprintln(out, "\ntaking traffic")
	sentAt := time.Now()
	for _, k := range []struct {
		key string
		n   int
	}{{quietKey, quiet}, {noisyKey, noisy}} {
		for i := range k.n {
			if err := b.Append(ctx, []stream.Event{{Stream: q.Stream, Key: k.key, ID: fmt.Sprint(k.key, i)}}); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "  %s: %d requests\n", k.key, k.n)
	}
	if took := time.Since(sentAt); took >= window {
		return fmt.Errorf("sending took %v, more than a window: the scenario needs it faster", took)
	}

	fmt.Fprintln(out, "\nenforcing")
	counted := map[string]int64{}
	overQuota := 0
	complete := func() bool { return counted[quietKey] == int64(quiet) && counted[noisyKey] == int64(noisy) }
	deadline := time.Now().Add(2*window + 10*time.Second)
	for after := int64(0); !complete() && time.Now().Before(deadline); {
		select {
		case err := <-procErr:
			return fmt.Errorf("processor: %w", err)
		default:
		}
		ws, err := b.Windows(ctx, q.Stream, after, 100)
		if err != nil {
			return err
		}
		for _, w := range ws {
			counted[w.Key] += w.Count
			after = w.Offset
			verdict := "within quota"
			if w.Count > quota {
				overQuota++
				verdict = fmt.Sprintf("over by %d", w.Count-quota)
			}
			fmt.Fprintf(out, "  %s: %d in a window, %s\n", w.Key, w.Count, verdict)
		}
		if len(ws) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The gateway: reads every decision, in order, as an enforcement point would.
	var decisions []stream.Decision
	for after := int64(0); ; {
		ds, err := b.Decisions(ctx, q.Stream, after, 100)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			break
		}
		decisions = append(decisions, ds...)
		after = ds[len(ds)-1].Offset
	}

	fmt.Fprintln(out, "\nchecking")
	checks := 0
	check := func(ok bool, what string) error {
		if !ok {
			return errors.New(what)
		}
		checks++
		fmt.Fprintf(out, "  ok: %s\n", what)
		return nil
	}
	throttled := map[string]int{}
	carries := true
	for _, d := range decisions {
		throttled[d.Key]++
		carries = carries && d.Quota == quota && d.Count > d.Quota && d.OverBy == d.Count-d.Quota
	}
	for _, c := range []struct {
		ok   bool
		what string
	}{
		{complete(), "every request reached a closed window before the deadline"},
		{counted[quietKey] == int64(quiet), "the quiet key was counted exactly"},
		{counted[noisyKey] == int64(noisy), "the noisy key was counted exactly"},
		{throttled[noisyKey] > 0, "the noisy key was throttled"},
		{throttled[quietKey] == 0, "the quiet key was never throttled"},
		{len(decisions) == overQuota, "the gateway read a decision for every window over quota"},
		{carries, "each decision carries the count and the quota that produced it"},
	} {
		if err := check(c.ok, c.what); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nPASS: %d checks\n", checks)
	return nil
}
