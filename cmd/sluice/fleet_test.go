package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// buildSluice builds this command into a temporary directory, for tests that run it as separate
// processes.
func buildSluice(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs sluice processes")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var listening = regexp.MustCompile(`listening"? http=(\S+) grpc=(\S+)`)

// startProcess runs `bin serve --config config` as its own process on free ports, waits until it is
// ready (its store answers), and kills it at cleanup. It returns the HTTP address.
func startProcess(t *testing.T, bin, config string) string {
	t.Helper()
	addr, _ := startSluice(t, bin, config)
	return addr
}

// startSluice is startProcess returning the process too, for tests that kill it themselves.
func startSluice(t *testing.T, bin, config string) (string, *exec.Cmd) {
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
			t.Logf("sluice serve (pid %d) log:\n%s", cmd.Process.Pid, log.String())
		}
	})
	var addr string
	eventually(t, "sluice serve to listen", func() bool {
		if m := listening.FindStringSubmatch(log.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	eventually(t, "sluice serve to be ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr, cmd
}

// TestFleetExact runs three sluice serve processes on one shared store (Redis, a Redis Cluster,
// PostgreSQL) and has 200 clients spread over them check one key: the fleet admits exactly the
// limit, as one process would.
func TestFleetExact(t *testing.T) {
	bin := buildSluice(t)
	tests := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"standalone", func(t *testing.T) string { return redistest.StartServer(t).URL() }},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t, 3).URL() }},
		{"postgres", func(t *testing.T) string { return pgtest.StartServer(t).URL() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			// Fail closed with a generous timeout: a store failure must show as an error, never as
			// a fail-open admission that would pass for a decision.
			writeConfig(t, config, fmt.Sprintf(`store: %s
failMode: closed
storeTimeout: 5s
policies:
  fleet: {strategy: fixedWindow, limit: 1000, window: 1h}
`, tt.store(t)))
			var fleet []string
			for range 3 {
				fleet = append(fleet, startProcess(t, bin, config))
			}
			const clients, requests = 200, 3000
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()
			var sent, allowed atomic.Int64
			var mu sync.Mutex
			var failures []string
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					url := "http://" + fleet[c%len(fleet)] + "/v1/check"
					for sent.Add(1) <= requests {
						d, err := fleetCheck(client, url)
						switch {
						case err != nil:
							mu.Lock()
							failures = append(failures, err.Error())
							mu.Unlock()
						case d.Allowed:
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if len(failures) > 0 {
				t.Fatalf("%d of %d checks failed, e.g. %v", len(failures), requests, failures[:min(5, len(failures))])
			}
			if got := allowed.Load(); got != 1000 {
				t.Errorf("the fleet admitted %d of %d checks, want exactly 1000", got, requests)
			}
		})
	}
}

// decision is the part of a /v1/check answer the fleet test reads.
type decision struct {
	Allowed bool  `json:"allowed"`
	Limit   int64 `json:"limit"`
}

// fleetCheck sends one check of the fleet policy's hot key; an answer that is not a decision of the
// store (a failure, or a fail-open admission with limit 0) is an error.
func fleetCheck(client *http.Client, url string) (decision, error) {
	var d decision
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"policy":"fleet","key":"hot"}`))
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.Limit != 1000 {
		return d, fmt.Errorf("status %d, %+v, %v", resp.StatusCode, d, err)
	}
	return d, nil
}

// TestFailModesDuringOutage kills the store under a sluice serve: a fail-open policy admits with
// every number zero, a fail-closed one answers 503, each within the store timeout; once the store
// is back, both decide again, the store's client reconnecting by itself.
func TestFailModesDuringOutage(t *testing.T) {
	const storeTimeout, slack = 100 * time.Millisecond, 300 * time.Millisecond
	stores := []struct {
		name string
		// start starts a store and returns its URL and how to crash and restart it.
		start func(t *testing.T) (url string, kill, restart func())
	}{
		{"redis", func(t *testing.T) (string, func(), func()) {
			srv := redistest.StartServer(t)
			return srv.URL(), srv.Kill, srv.Start
		}},
		{"postgres", func(t *testing.T) (string, func(), func()) {
			pg := pgtest.StartServer(t)
			return pg.URL(), pg.Kill, pg.Start
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			url, kill, restart := st.start(t)
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			writeConfig(t, config, fmt.Sprintf(`store: %s
storeTimeout: %v
policies:
  open: {strategy: fixedWindow, limit: 1000, window: 1h, failMode: open}
  closed: {strategy: fixedWindow, limit: 1000, window: 1h, failMode: closed}
`, url, storeTimeout))
			r := startServe(t, "--config", config)

			// decided reports whether the policy's answer is the store's decision.
			decided := func(policy string) bool {
				code, d := r.check(t, policy, "k")
				return code == http.StatusOK && d["allowed"] == true && d["limit"] == float64(1000)
			}
			for _, p := range []string{"open", "closed"} {
				if !decided(p) {
					t.Fatalf("%s before the outage: not a decision", p)
				}
			}

			kill()
			tests := []struct {
				policy string
				want   func(code int, d map[string]any) bool
			}{
				{"open", func(code int, d map[string]any) bool {
					return code == http.StatusOK && d["allowed"] == true && d["limit"] == float64(0) && d["remaining"] == float64(0)
				}},
				{"closed", func(code int, d map[string]any) bool {
					return code == http.StatusServiceUnavailable && d["code"] == "unavailable"
				}},
			}
			for range 10 {
				for _, tt := range tests {
					start := time.Now()
					code, d := r.check(t, tt.policy, "k")
					if took := time.Since(start); took > storeTimeout+slack {
						t.Errorf("%s during the outage answered after %v", tt.policy, took)
					}
					if !tt.want(code, d) {
						t.Errorf("%s during the outage: %d %v", tt.policy, code, d)
					}
				}
			}

			restart()
			restarted := time.Now()
			eventually(t, "both policies to decide again", func() bool { return decided("open") && decided("closed") })
			if took := time.Since(restarted); took > 5*time.Second {
				t.Errorf("deciding again took %v after the store restarted", took)
			}
		})
	}
}
