package main

// The tests of issue 19: sluice serve, with the defaults it ships, holds the limit under load and
// through store faults, end to end over HTTP and gRPC, each process its own OS process.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/redistest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

// TestHoldExact runs three sluice serve processes with the shipped defaults (no storeTimeout, no
// failMode) on one shared store and has 200 clients, half over HTTP and half over gRPC, spread
// over them, check one key: the fleet admits exactly the limit, every answer is the store's, and
// no process made a single fail-mode decision.
//
// The clients are sluice bench processes, one per process and protocol, as a user's would be: in
// this test's binary, under the race detector, 200 clients cost the two cores several times what
// the service does, and starved it into timeouts no user would see.
func TestHoldExact(t *testing.T) {
	bin := buildSluice(t)
	tests := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return redistest.StartServer(t).URL() }},
		{"redis cluster", func(t *testing.T) string { return redistest.StartCluster(t, 3).URL() }},
		{"postgres", func(t *testing.T) string { return pgtest.StartServer(t).URL() }},
	}
	const limit, clients, calls = 1000, 200, 4000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			writeConfig(t, config, fmt.Sprintf("store: %s\npolicies:\n  hot: {strategy: fixedWindow, limit: %d, window: 1h}\n",
				tt.store(t), limit))
			var fleet []*serveProc
			for range 3 {
				fleet = append(fleet, spawnSluice(t, bin, config))
			}
			awaitWindow(t, time.Hour, 20*time.Second)

			// Six runs, a process and a protocol each, share the clients and the calls.
			type run struct {
				args []string
				out  strings.Builder
				err  error
			}
			runs := make([]*run, 2*len(fleet))
			for i := range runs {
				p, proto, target, conns := fleet[i/2], "grpc", fleet[i/2].grpc, 4
				share := func(n int) int { return n/len(runs) + btoi(i < n%len(runs)) }
				if i%2 == 1 {
					// An HTTP/1.1 connection carries one call at a time: a connection per client.
					proto, target, conns = "http", p.http, share(clients)
				}
				runs[i] = &run{args: []string{"bench", "--json", "--target", target, "--proto", proto,
					"--policy", "hot", "--keys", "1", "--concurrency", strconv.Itoa(share(clients)),
					"--conns", strconv.Itoa(conns), "--calls", strconv.Itoa(share(calls)), "--duration", "60s"}}
			}
			var wg sync.WaitGroup
			start := time.Now()
			for _, r := range runs {
				wg.Go(func() {
					cmd := exec.Command(bin, r.args...)
					cmd.Stdout = &r.out
					var stderr strings.Builder
					cmd.Stderr = &stderr
					if r.err = cmd.Run(); r.err != nil {
						r.err = fmt.Errorf("%v: %v\n%s", r.args, r.err, stderr.String())
					}
				})
			}
			wg.Wait()
			took := time.Since(start)

			var sum benchSummary
			for _, r := range runs {
				if r.err != nil {
					t.Fatal(r.err)
				}
				var s benchSummary
				if err := json.Unmarshal([]byte(r.out.String()), &s); err != nil {
					t.Fatalf("%v: %v\n%s", r.args, err, r.out.String())
				}
				t.Logf("%s over %s: %d checks, %d allowed, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
					r.args[3], r.args[5], s.Checks, s.Allowed, s.Latency.P50, s.Latency.P99, s.Latency.Max)
				sum.Checks += s.Checks
				sum.Allowed += s.Allowed
				sum.FailOpen += s.FailOpen
				sum.Errors += s.Errors
			}
			t.Logf("storeTimeout %v: %d checks in %v", fleet[0].storeTimeout, sum.Checks, took.Round(time.Millisecond))
			if sum.Checks != calls || sum.Errors != 0 {
				t.Errorf("%d checks answered and %d failed, want %d answered", sum.Checks, sum.Errors, calls)
			}
			if sum.FailOpen != 0 {
				t.Errorf("%d checks were allowed by the fail mode, not the store", sum.FailOpen)
			}
			for i, p := range fleet {
				if got := failModeDecisions(t, p); got != 0 {
					t.Errorf("process %d counts %v fail-mode decisions on /metrics, want 0", i, got)
				}
			}
			if sum.Allowed != limit {
				t.Errorf("the fleet admitted %d of %d checks, want exactly %d", sum.Allowed, sum.Checks, limit)
			}
			if remaining, err := peekRemaining(fleet[0], "hot", "bench-0"); err != nil || remaining != 0 {
				t.Errorf("the store has %d of the key's limit left (%v), want 0", remaining, err)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestHoldThroughFaults runs one sluice serve with the shipped storeTimeout under a steady load of
// 32 clients, half over HTTP and half over gRPC, checking a fail-open and a fail-closed policy,
// and takes its store away: Redis killed and restarted, Redis frozen (SIGSTOP) and resumed,
// PostgreSQL restarted and crashed. It asserts that
//
//   - every call answers within storeTimeout plus answerSlack: during the outage by the fail mode;
//   - the service decides again (the store's decisions, no fail mode) within 1 s of the store
//     answering again, timed from the test's own probe of the store;
//   - for the fail-closed policy, what clients saw admitted is what the store counted: nothing
//     admitted twice and nothing forgotten (up to the answers a kill or a fast shutdown loses in
//     flight);
//   - /metrics counts every fail-mode decision the clients saw, and none outside the outage.
func TestHoldThroughFaults(t *testing.T) {
	// answerSlack is what a call may take beyond storeTimeout: the HTTP or gRPC round trip and the
	// scheduling of a test that shares two cores with the store and the service.
	const answerSlack = 250 * time.Millisecond
	bin := buildSluice(t)
	tests := []struct {
		name string
		// start starts a store and returns its URL, a probe of whether it answers, and the fault:
		// down takes the store away, up brings it back, returning once it answers.
		start func(t *testing.T) (url string, probe func() error, down, up func())
		// lossy is a fault that may lose answers in flight: a check the store counted whose answer
		// died with the server, or (PostgreSQL's fast shutdown) was replaced by FATAL 57P01 after
		// its statement committed. Up to one per check in flight may be counted but not admitted.
		lossy bool
	}{
		{"redis kill", func(t *testing.T) (string, func() error, func(), func()) {
			// An append-only file keeps what Redis counted across its SIGKILL (Redis writes it
			// before it answers; a process's death does not undo a write), so that the store's
			// count can be compared with what clients were told.
			srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "no")
			return srv.URL(), redisProbe(srv.Addr()), srv.Kill, srv.Start
		}, true},
		{"redis freeze", func(t *testing.T) (string, func() error, func(), func()) {
			srv := redistest.StartServer(t)
			return srv.URL(), redisProbe(srv.Addr()), srv.Freeze, srv.Thaw
		}, false},
		{"postgres restart", func(t *testing.T) (string, func() error, func(), func()) {
			pg := pgtest.StartServer(t)
			return pg.URL(), pgProbe(pg.URL()), pg.Stop, pg.Start
		}, true},
		{"postgres crash", func(t *testing.T) (string, func() error, func(), func()) {
			pg := pgtest.StartServer(t)
			return pg.URL(), pgProbe(pg.URL()), pg.Kill, pg.Start
		}, true},
	}
	const limit = 1_000_000_000 // never reached: every admission is the store's count
	limits := map[string]int64{"open": limit, "closed": limit}
	keys := []string{"k0", "k1"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, probe, down, up := tt.start(t)
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			// No storeTimeout and no top-level failMode: the shipped defaults.
			writeConfig(t, config, fmt.Sprintf(`store: %s
policies:
  open: {strategy: fixedWindow, limit: %d, window: 1h}
  closed: {strategy: fixedWindow, limit: %d, window: 1h, failMode: closed}
`, url, limit, limit))
			proc := spawnSluice(t, bin, config)
			storeTimeout := proc.storeTimeout
			awaitWindow(t, time.Hour, 30*time.Second)

			var stop atomic.Bool
			policies := []string{"open", "closed"}
			turns := make([]int, 32)
			spec := loadSpec{
				procs: []*serveProc{proc}, clients: len(turns), limits: limits, pace: 5 * time.Millisecond,
				next: func(c int) (string, string, bool) {
					turns[c]++ // each client alternates the policies, on a key of its own
					return policies[(c+turns[c])%2], keys[c/2%len(keys)], !stop.Load()
				},
			}
			done := make(chan []call, 1)
			go runLoad(t, spec, done)
			t.Cleanup(func() { stop.Store(true) }) // should the test end early

			time.Sleep(time.Second) // the steady state
			faultAt := time.Now()
			down()
			downAt := time.Now()
			backc := make(chan time.Time, 1)
			go func() {
				for probe() != nil && !stop.Load() {
					time.Sleep(2 * time.Millisecond)
				}
				backc <- time.Now()
			}()
			time.Sleep(time.Second) // the outage
			up()
			backAt := <-backc
			time.Sleep(2500 * time.Millisecond) // the recovery and the steady state again
			stop.Store(true)
			calls := <-done
			endAt := time.Now()

			n := tally(calls)
			t.Logf("%d checks; store timeout %v; outage %v (down in %v); open %v; closed %v",
				len(calls), storeTimeout, backAt.Sub(faultAt).Round(time.Millisecond), downAt.Sub(faultAt).Round(time.Millisecond),
				n["open"], n["closed"])
			if errs := brokenCalls(calls); len(errs) > 0 {
				t.Errorf("%d of %d checks failed, e.g. %v", len(errs), len(calls), errs[:min(5, len(errs))])
			}

			// (a) Every call answers within storeTimeout and the slack, during the outage too.
			phases := []struct {
				name     string
				from, to time.Time
			}{{"before", time.Time{}, faultAt}, {"outage", faultAt, backAt}, {"after", backAt, endAt}}
			for _, ph := range phases {
				in := callsBetween(calls, ph.from, ph.to)
				t.Logf("%s: %d calls, fail mode %d, p50 %v p99 %v max %v", ph.name, len(in), countFailMode(in),
					quantile(in, 0.5), quantile(in, 0.99), quantile(in, 1))
			}
			if slow := slowerThan(calls, storeTimeout+answerSlack); len(slow) > 0 {
				t.Errorf("%d calls took longer than storeTimeout %v + %v, the slowest:", len(slow), storeTimeout, answerSlack)
				for _, c := range slow[:min(5, len(slow))] {
					t.Errorf("  %s %s, %v, started %v after the fault, took %v", c.proto, c.policy, c.outcome,
						c.start.Sub(faultAt).Round(time.Millisecond), c.end.Sub(c.start).Round(time.Millisecond))
				}
			}

			// The fault was seen, and only while the store was away.
			if n["open"][failedOpen] == 0 || n["closed"][failedClosed] == 0 {
				t.Errorf("the outage was not seen: open %v, closed %v", n["open"], n["closed"])
			}
			if before := countFailMode(callsBetween(calls, time.Time{}, faultAt)); before > 0 {
				t.Errorf("%d checks answered by the fail mode before the fault, with the store up", before)
			}

			// (b) The service decides again within 1 s of the store answering again (each policy's
			// first store decision of a check sent after that), and from then on only decides.
			var lastFail time.Time
			for _, c := range calls {
				if c.outcome.failMode() && c.end.After(lastFail) {
					lastFail = c.end
				}
			}
			t.Logf("store back %v after the fault; the last fail-mode answer %v after that",
				backAt.Sub(faultAt).Round(time.Millisecond), since(backAt, lastFail))
			for _, p := range policies {
				var first time.Time
				for _, c := range calls {
					if c.policy == p && c.start.After(backAt) && (c.outcome == storeAllowed || c.outcome == storeDenied) &&
						(first.IsZero() || c.end.Before(first)) {
						first = c.end
					}
				}
				t.Logf("%s: the first store decision %v after the store was back", p, since(backAt, first))
				if first.IsZero() || first.Sub(backAt) > time.Second {
					t.Errorf("%s: the first store decision came %v after the store was back, want within 1s", p, since(backAt, first))
				}
				if late := tally(callsBetween(calls, backAt.Add(time.Second), endAt))[p]; late[failedOpen]+late[failedClosed] > 0 {
					t.Errorf("%s: fail-mode answers from 1 s after the store was back: %v", p, late)
				}
			}

			// (c) What clients saw admitted is what the store counted.
			for _, p := range policies {
				var counted int64
				for _, k := range keys {
					// A few tries: a peek has the store timeout too, and a slow store is (b)'s to report.
					remaining, err := peekRemaining(proc, p, k)
					for try := 0; err != nil && try < 20; try++ {
						time.Sleep(100 * time.Millisecond)
						remaining, err = peekRemaining(proc, p, k)
					}
					if err != nil {
						t.Errorf("peek %s %s after the run: %v", p, k, err)
						continue
					}
					counted += limit - remaining
				}
				admitted := int64(n[p][storeAllowed])
				// Calls in flight while the store went down, not told they were admitted: what a
				// lossy fault may have counted without its answer reaching the client.
				var inFlight int64
				for _, c := range calls {
					if c.policy == p && c.start.Before(downAt) && c.end.After(faultAt) && c.outcome != storeAllowed {
						inFlight++
					}
				}
				switch {
				case counted < admitted:
					t.Errorf("%s: the store counts %d checks but clients were told %d were admitted: it forgot %d",
						p, counted, admitted, admitted-counted)
				case p == "open":
					// A fail-open answer admits anyway: the store may have counted it or not.
					if extra := counted - admitted; extra > int64(n[p][failedOpen]) {
						t.Errorf("open: the store counts %d checks beyond the %d admitted, more than the %d fail-open answers",
							extra, admitted, n[p][failedOpen])
					}
				case tt.lossy && counted-admitted > inFlight:
					t.Errorf("closed: the store counts %d checks beyond the %d admitted, more than the %d in flight at the fault",
						counted-admitted, admitted, inFlight)
				case !tt.lossy && counted != admitted:
					t.Errorf("closed: the store counts %d checks but clients were told %d were admitted: %d were counted after their caller was told no",
						counted, admitted, counted-admitted)
				}
				t.Logf("%s: %d admitted by the store, %d counted (%d in flight at the fault)", p, admitted, counted, inFlight)
			}

			// /metrics counts every fail-mode decision the clients saw.
			for _, m := range []struct {
				policy string
				seen   outcome
			}{{"open", failedOpen}, {"closed", failedClosed}} {
				got := metricSum(t, proc.http, "sluice_fail_mode_decisions_total", `policy="`+m.policy+`"`)
				if got != float64(n[m.policy][m.seen]) {
					t.Errorf("/metrics counts %v fail-mode decisions of %s, clients saw %d", got, m.policy, n[m.policy][m.seen])
				}
			}
		})
	}
}

// serveProc is a sluice serve process started by spawnSluice.
type serveProc struct {
	http, grpc string
	cmd        *exec.Cmd
	// storeTimeout is the bound on store calls in force, as its log says: the config's, else the
	// store's own default.
	storeTimeout time.Duration
}

var (
	listening       = regexp.MustCompile(`listening"? http=(\S+) grpc=(\S+)`)
	storeTimeoutLog = regexp.MustCompile(`listening"? .*storeTimeout=(\S+)`)
)

// spawnSluice runs `bin serve --config config` as its own process on free ports, waits until it is
// ready (its store answers), and kills it at cleanup, logging its output if the test failed.
func spawnSluice(t *testing.T, bin, config string) *serveProc {
	t.Helper()
	log := &syncBuffer{}
	cmd := exec.Command(bin, "serve", "--config", config, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			out := log.String()
			if len(out) > 20_000 { // an outage logs a line per failed call
				out = out[:10_000] + "\n…\n" + out[len(out)-10_000:]
			}
			t.Logf("sluice serve (pid %d) log:\n%s", cmd.Process.Pid, out)
		}
	})
	p := &serveProc{cmd: cmd}
	eventually(t, "sluice serve to listen", func() bool {
		if m := listening.FindStringSubmatch(log.String()); m != nil {
			p.http, p.grpc = m[1], m[2]
		}
		return p.http != ""
	})
	m := storeTimeoutLog.FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("sluice serve's listening line names no storeTimeout:\n%s", log.String())
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("sluice serve's storeTimeout: %v", err)
	}
	p.storeTimeout = d
	eventually(t, "sluice serve to be ready", func() bool {
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// awaitWindow waits, if need be, until the current epoch-aligned window of length w has at least
// need left, so that the test's checks all fall in one fixed window.
func awaitWindow(t *testing.T, w, need time.Duration) {
	t.Helper()
	if left := w - time.Duration(time.Now().UnixNano())%w; left < need {
		t.Logf("waiting %v for the next %v window", left, w)
		time.Sleep(left + 50*time.Millisecond)
	}
}

// outcome is how a check was answered.
type outcome uint8

const (
	storeAllowed outcome = iota // the store's decision: allowed
	storeDenied                 // the store's decision: denied
	failedOpen                  // the fail mode's: allowed, failOpen, every number zero
	failedClosed                // the fail mode's: 503 unavailable, or gRPC UNAVAILABLE
	broken                      // anything else: an error
	outcomes
)

func (o outcome) failMode() bool { return o == failedOpen || o == failedClosed }

func (o outcome) String() string {
	return [...]string{"allowed", "denied", "fail-open", "fail-closed", "broken"}[o]
}

// call is one check as its client saw it.
type call struct {
	start, end time.Time
	proto      string // HTTP or gRPC
	policy     string
	outcome    outcome
	err        error // when broken
}

// counts are calls by outcome.
type counts [outcomes]int

func (n counts) String() string {
	var parts []string
	for o, c := range n {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%v %d", outcome(o), c))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// tally counts calls by policy and outcome.
func tally(calls []call) map[string]counts {
	m := map[string]counts{}
	for _, c := range calls {
		n := m[c.policy]
		n[c.outcome]++
		m[c.policy] = n
	}
	return m
}

func brokenCalls(calls []call) []error {
	var errs []error
	for _, c := range calls {
		if c.outcome == broken {
			errs = append(errs, c.err)
		}
	}
	return errs
}

func countFailMode(calls []call) int {
	n := 0
	for _, c := range calls {
		if c.outcome.failMode() {
			n++
		}
	}
	return n
}

// slowerThan are the calls that took longer than d, the slowest first.
func slowerThan(calls []call, d time.Duration) []call {
	var slow []call
	for _, c := range calls {
		if c.end.Sub(c.start) > d {
			slow = append(slow, c)
		}
	}
	slices.SortFunc(slow, func(a, b call) int { return cmp.Compare(b.end.Sub(b.start), a.end.Sub(a.start)) })
	return slow
}

// since is how long after from the instant at came, or "never" for the zero instant.
func since(from, at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

// callsBetween are the calls that ended in [from, to).
func callsBetween(calls []call, from, to time.Time) []call {
	var in []call
	for _, c := range calls {
		if !c.end.Before(from) && c.end.Before(to) {
			in = append(in, c)
		}
	}
	return in
}

// quantile is the q-quantile of the calls' durations (1 is the slowest).
func quantile(calls []call, q float64) time.Duration {
	if len(calls) == 0 {
		return 0
	}
	d := make([]time.Duration, len(calls))
	for i, c := range calls {
		d[i] = c.end.Sub(c.start)
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))].Round(10 * time.Microsecond)
}

// loadSpec is a load on sluice serve processes: concurrent clients, half over HTTP and half over
// gRPC, spread evenly over the processes.
type loadSpec struct {
	procs   []*serveProc
	clients int
	// limits are the policies' limits, to tell the store's answers from the fail mode's.
	limits map[string]int64
	// next says what client c checks next, or false to stop; each client calls it from its own
	// goroutine.
	next func(c int) (policy, key string, more bool)
	// pace is a pause between a client's checks.
	pace time.Duration
}

// runLoad runs the clients until next stops them all, and returns every check they made; sent to
// done instead when done is not nil, for a load run in a goroutine of its own.
func runLoad(t *testing.T, spec loadSpec, done chan<- []call) []call {
	httpClient := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: spec.clients},
		Timeout:   10 * time.Second,
	}
	defer httpClient.CloseIdleConnections()
	var rpc []sluicev1.RateLimiterClient
	for _, p := range spec.procs {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Error(err) // not Fatal: the load may run in a goroutine of its own
			if done != nil {
				done <- nil
			}
			return nil
		}
		defer conn.Close()
		rpc = append(rpc, sluicev1.NewRateLimiterClient(conn))
	}
	results := make([][]call, spec.clients)
	var wg sync.WaitGroup
	for c := range spec.clients {
		p := c / 2 % len(spec.procs)
		proto, check := "HTTP", httpCheck(httpClient, spec.procs[p].http, spec.limits)
		if c%2 == 1 {
			proto, check = "gRPC", grpcCheck(rpc[p], spec.limits)
		}
		wg.Go(func() {
			for {
				policy, key, more := spec.next(c)
				if !more {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				o, err := check(ctx, policy, key)
				results[c] = append(results[c], call{start: start, end: time.Now(), proto: proto, policy: policy, outcome: o, err: err})
				cancel()
				if spec.pace > 0 {
					time.Sleep(spec.pace)
				}
			}
		})
	}
	wg.Wait()
	calls := slices.Concat(results...)
	if done != nil {
		done <- calls
	}
	return calls
}

// httpCheck checks over POST /v1/check at addr.
func httpCheck(client *http.Client, addr string, limits map[string]int64) func(context.Context, string, string) (outcome, error) {
	url := "http://" + addr + "/v1/check"
	return func(ctx context.Context, policy, key string) (outcome, error) {
		body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return broken, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return broken, err
		}
		defer resp.Body.Close()
		var d struct {
			Allowed   bool   `json:"allowed"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
			FailOpen  bool   `json:"failOpen"`
			Code      string `json:"code"`
			FailMode  string `json:"failMode"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			return broken, fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
		}
		// A fail-mode answer says so, in its body and its header; the store's says nothing.
		mode := resp.Header.Get("Sluice-Fail-Mode")
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			if d.Code == "unavailable" && d.FailMode == "closed" && mode == "closed" {
				return failedClosed, nil
			}
		case resp.StatusCode != http.StatusOK:
		case d.FailOpen:
			if d.Allowed && d.Limit == 0 && d.Remaining == 0 && mode == "open" {
				return failedOpen, nil
			}
		case d.Limit == limits[policy] && mode == "":
			if d.Allowed {
				return storeAllowed, nil
			}
			return storeDenied, nil
		}
		return broken, fmt.Errorf("HTTP %d, Sluice-Fail-Mode %q, %+v", resp.StatusCode, mode, d)
	}
}

// grpcCheck checks over the Check RPC.
func grpcCheck(client sluicev1.RateLimiterClient, limits map[string]int64) func(context.Context, string, string) (outcome, error) {
	return func(ctx context.Context, policy, key string) (outcome, error) {
		var md metadata.MD
		d, err := client.Check(ctx, &sluicev1.CheckRequest{Policy: policy, Key: key}, grpc.Header(&md))
		mode := strings.Join(md.Get("sluice-fail-mode"), ",")
		switch {
		case status.Code(err) == codes.Unavailable:
			if mode == "closed" {
				return failedClosed, nil
			}
		case err != nil:
		case d.GetFailOpen():
			if d.GetAllowed() && d.GetLimit() == 0 && d.GetRemaining() == 0 && mode == "open" {
				return failedOpen, nil
			}
		case d.GetLimit() == limits[policy] && mode == "":
			if d.GetAllowed() {
				return storeAllowed, nil
			}
			return storeDenied, nil
		}
		return broken, fmt.Errorf("gRPC sluice-fail-mode %q, %v, %v", mode, d, err)
	}
}

// peekRemaining is what the store says is left of policy's key, through /v1/peek.
func peekRemaining(p *serveProc, policy, key string) (int64, error) {
	body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
	resp, err := http.Post("http://"+p.http+"/v1/peek", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var d struct {
		Limit     int64 `json:"limit"`
		Remaining int64 `json:"remaining"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.Limit == 0 {
		return 0, fmt.Errorf("HTTP %d %+v %v", resp.StatusCode, d, err)
	}
	return d.Remaining, nil
}

// failModeDecisions is the process's count of fail-mode decisions, over every policy and mode.
func failModeDecisions(t *testing.T, p *serveProc) float64 {
	t.Helper()
	return metricSum(t, p.http, "sluice_fail_mode_decisions_total")
}

// metricSum adds up the samples of the metric name on addr's /metrics whose labels include every
// one of labels (`policy="x"`); a series never written is absent, which counts as 0.
func metricSum(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(rest[:i], l) }) {
			continue
		}
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// redisProbe says whether Redis at addr answers PING now, giving up after 50 ms.
func redisProbe(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "+PONG\r\n" {
			return fmt.Errorf("PING: %q %v", line, err)
		}
		return nil
	}
}

// pgProbe says whether PostgreSQL at url accepts a connection now, as pg_isready would.
func pgProbe(url string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		conn, err := pgconn.Connect(ctx, url)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}
}
