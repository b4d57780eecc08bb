// Command stream-rate-limiter shows sluice's stream mode end to end, in one process: requests are
// appended to a stream, a streaming query counts them per API key in tumbling windows, and a
// gateway reads the throttle decisions for windows over quota. It checks what it sees and prints
// "PASS: N checks", or "FAIL: reason" and exits 1.
//
//	go run ./examples/stream-rate-limiter --window 2s --quota 5 --quiet 3 --noisy 20
//	go run ./examples/stream-rate-limiter --store postgres://postgres@127.0.0.1:5432/test
//	go run ./examples/stream-rate-limiter --server http://127.0.0.1:8080 --stream api-requests --window 2s --quota 5
//
// The checks hold for any noisy > 2*quota and quiet < quota: the noisy key's requests, sent
// within less than one window, fall into at most two windows, one of which then holds more than
// the quota; the quiet key's cannot exceed it however they split.
//
// By default the engine runs in this process. With --store postgres://..., it works in a schema
// of its own (sluice_example_<run>, or --schema, which must not exist yet) and drops it when it
// ends, also on Ctrl-C: it never writes into the schema a sluice serve uses. With --server, the
// requests go to a sluice server's POST /v1/usage and the windows and decisions come from its
// pull API (docs/stream.md); the server's query over --stream must use the --window and --quota
// given here. Its keys are named per run, so that runs against one server do not see each other.
// See README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/stream"
	"github.com/sluicehq/sluice/stream/pgstream"
)

func main() {
	// Ctrl-C cancels the run rather than killing it, so that it drops what it created.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(code)
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
	schema := fs.String("schema", "", "PostgreSQL schema to create and drop at exit; must not exist (default sluice_example_<run>)")
	server := fs.String("server", "", "a sluice server's `URL`: use its stream API instead of an engine in this process")
	streamName := fs.String("stream", "api-requests", "with --server: the stream the server's query reads")
	token := fs.String("token", "", "with --server: the bearer token, if the server asks for one")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if *server != "" {
		err = simulate(ctx, out, *window, *quota, *quiet, *noisy, &apiClient{base: strings.TrimSuffix(*server, "/"), token: *token}, *streamName)
	} else {
		err = simulateLocal(ctx, out, *window, *quota, *quiet, *noisy, *store, *schema)
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(out, "\ninterrupted: %v\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(out, "\nFAIL: %v\n", err)
		return 1
	}
	return 0
}

// log is what the scenario needs of stream mode: appending, and reading the outputs.
type log interface {
	Append(ctx context.Context, events []stream.Event) error
	Windows(ctx context.Context, stream string, after int64, limit int) ([]stream.Window, error)
	Decisions(ctx context.Context, stream string, after int64, limit int) ([]stream.Decision, error)
}

func checkScenario(quota int64, quiet, noisy int) error {
	if int64(noisy) <= 2*quota || int64(quiet) >= quota {
		return fmt.Errorf("need noisy > 2*quota and quiet < quota, got noisy %d, quiet %d, quota %d", noisy, quiet, quota)
	}
	return nil
}

// simulateLocal runs the scenario on an engine in this process, with its own processor.
func simulateLocal(ctx context.Context, out io.Writer, window time.Duration, quota int64, quiet, noisy int, store, schema string) error {
	if err := checkScenario(quota, quiet, noisy); err != nil {
		return err
	}
	// Names unique per run, so runs sharing a database inherit nothing from one another.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var b stream.Backend
	if store == "memory" {
		b = stream.NewMemory()
	} else {
		e, drop, err := openOwnSchema(ctx, out, store, schema, "sluice_example_"+run)
		if err != nil {
			return err
		}
		defer drop()
		b = e
	}
	defer b.Close()

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
	procErr, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
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
	}()
	defer func() { stop(); <-done }()
	return scenario(ctx, out, b, q.Stream, window, quota, quiet, noisy, "", procErr)
}

// openOwnSchema opens an engine on the PostgreSQL database url names, in a schema that it
// creates: schema, or fallback when that is empty (a sluice_schema option of url counts as
// schema). drop drops the schema and closes the pool; it uses a context of its own, as ctx may be
// cancelled by then. A schema that exists already is refused: it may be a server's.
func openOwnSchema(ctx context.Context, out io.Writer, url, schema, fallback string) (e *pgstream.Engine, drop func(), err error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	if s, ok := pc.ConnConfig.RuntimeParams["sluice_schema"]; ok {
		delete(pc.ConnConfig.RuntimeParams, "sluice_schema") // not a server setting
		if schema == "" {
			schema = s
		}
	}
	if schema == "" {
		schema = fallback
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		pool.Close()
		return nil, nil, err
	}
	if exists {
		pool.Close()
		return nil, nil, fmt.Errorf("schema %q exists: the example works in a schema it creates and drops at exit; name a new one with --schema", schema)
	}
	drop = func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(out, "could not drop schema %s: %v\n", schema, err)
		} else {
			fmt.Fprintf(out, "dropped schema %s\n", schema)
		}
		pool.Close()
	}
	// New migrates, creating the schema; a failure may have left part of it.
	if e, err = pgstream.New(pool, pgstream.Config{Schema: schema}); err != nil {
		drop()
		return nil, nil, err
	}
	fmt.Fprintf(out, "schema %s (dropped at exit)\n", schema)
	return e, drop, nil
}

// simulate runs the scenario against a sluice server, whose query processes the stream.
func simulate(ctx context.Context, out io.Writer, window time.Duration, quota int64, quiet, noisy int, c *apiClient, streamName string) error {
	if err := checkScenario(quota, quiet, noisy); err != nil {
		return err
	}
	fmt.Fprintf(out, "server %s, stream %s, window %v, quota %d\n", c.base, streamName, window, quota)
	return scenario(ctx, out, c, streamName, window, quota, quiet, noisy, "-"+strconv.FormatInt(time.Now().UnixNano(), 36), nil)
}

// scenario sends the traffic to stream name of b, follows the windows until every request is
// in one, reads the decisions and checks them. suffix makes the keys this run's own; procErr
// reports a failed processor (nil when there is none here).
func scenario(ctx context.Context, out io.Writer, b log, name string, window time.Duration, quota int64, quiet, noisy int,
	suffix string, procErr <-chan error) error {
	quietKey, noisyKey := quietKey+suffix, noisyKey+suffix
	fmt.Fprintln(out, "\ntaking traffic")
	sentAt := time.Now()
	for _, k := range []struct {
		key string
		n   int
	}{{quietKey, quiet}, {noisyKey, noisy}} {
		for i := range k.n {
			if err := b.Append(ctx, []stream.Event{{Stream: name, Key: k.key, ID: fmt.Sprint(k.key, i)}}); err != nil {
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
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		ws, err := b.Windows(ctx, name, after, 100)
		if err != nil {
			return err
		}
		for _, w := range ws {
			after = w.Offset
			if w.Key != quietKey && w.Key != noisyKey {
				continue // another run's, on a shared server
			}
			counted[w.Key] += w.Count
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
		ds, err := b.Decisions(ctx, name, after, 100)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if d.Key == quietKey || d.Key == noisyKey {
				decisions = append(decisions, d)
			}
		}
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

// apiClient is the log of a sluice server's stream API.
type apiClient struct {
	base, token string
}

// do sends a request and decodes a 200's JSON body into into, or turns the server's
// {"error","code"} into an error.
func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s %s: %s: %s (%s)", method, path, resp.Status, e.Error, e.Code)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// Append implements log with POST /v1/usage.
func (c *apiClient) Append(ctx context.Context, events []stream.Event) error {
	body, err := json.Marshal(map[string][]stream.Event{"events": events})
	if err != nil {
		return err
	}
	var got struct{ Appended int }
	if err := c.do(ctx, "POST", "/v1/usage", bytes.NewReader(body), &got); err != nil {
		return err
	}
	if got.Appended != len(events) {
		return fmt.Errorf("the server appended %d of %d events", got.Appended, len(events))
	}
	return nil
}

// Windows implements log with the pull API.
func (c *apiClient) Windows(ctx context.Context, name string, after int64, limit int) ([]stream.Window, error) {
	return page[stream.Window](ctx, c, name, "windows", after, limit)
}

// Decisions implements log with the pull API.
func (c *apiClient) Decisions(ctx context.Context, name string, after int64, limit int) ([]stream.Decision, error) {
	return page[stream.Decision](ctx, c, name, "decisions", after, limit)
}

func page[T any](ctx context.Context, c *apiClient, name, kind string, after int64, limit int) ([]T, error) {
	var got map[string][]T
	path := fmt.Sprintf("/v1/streams/%s/%s?after=%d&limit=%d", url.PathEscape(name), kind, after, limit)
	if err := c.do(ctx, "GET", path, nil, &got); err != nil {
		return nil, err
	}
	return got[kind], nil
}
