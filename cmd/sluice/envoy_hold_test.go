package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestHoldExactEnvoy is TestHoldExact for Envoy's rate-limit API: three sluice serve processes with
// the shipped defaults share one store, and 96 Envoy clients spread over them send one-descriptor
// requests on one hot entry. The fleet admits exactly the rule's limit, and on Redis the processes
// decided the requests in far fewer script runs than requests: concurrent requests share runs.
func TestHoldExactEnvoy(t *testing.T) {
	bin := buildSluice(t)
	tests := []struct {
		name  string
		store func(t *testing.T) (url string, scriptRuns func() int64)
	}{
		{"redis", func(t *testing.T) (string, func() int64) {
			srv := redistest.StartServer(t)
			return srv.URL(), func() int64 { return evalshaCalls(t, srv.Addr()) }
		}},
		{"postgres", func(t *testing.T) (string, func() int64) { return pgtest.StartServer(t).URL(), nil }},
	}
	const limit, clients, calls = 1000, 96, 3000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rules := filepath.Join(dir, "rules.yaml")
			writeConfig(t, rules, fmt.Sprintf("domain: hot\ndescriptors:\n  - key: key\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit))
			url, scriptRuns := tt.store(t)
			config := filepath.Join(dir, "sluice.yaml")
			writeConfig(t, config, fmt.Sprintf("store: %s\nenvoy: [%s]\n", url, rules))
			var fleet []*serveProc
			for range 3 {
				fleet = append(fleet, spawnSluice(t, bin, config))
			}
			awaitWindow(t, time.Hour, 20*time.Second)
			var before int64
			if scriptRuns != nil {
				before = scriptRuns()
			}

			outs := make([]strings.Builder, len(fleet))
			errs := make([]error, len(fleet))
			var wg sync.WaitGroup
			for i, p := range fleet {
				wg.Go(func() {
					cmd := exec.Command(bin, "bench", "--json", "--target", p.grpc, "--proto", "envoy", "--policy", "hot",
						"--keys", "1", "--concurrency", strconv.Itoa(clients/len(fleet)), "--conns", "4",
						"--calls", strconv.Itoa(calls/len(fleet)), "--duration", "60s")
					cmd.Stdout = &outs[i]
					var stderr strings.Builder
					cmd.Stderr = &stderr
					if err := cmd.Run(); err != nil {
						errs[i] = fmt.Errorf("%v: %v\n%s", cmd.Args, err, stderr.String())
					}
				})
			}
			wg.Wait()

			var sum benchSummary
			for i := range fleet {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				var s benchSummary
				if err := json.Unmarshal([]byte(outs[i].String()), &s); err != nil {
					t.Fatalf("%v\n%s", err, outs[i].String())
				}
				t.Logf("process %d: %d checks, %d allowed, p50 %.1f ms, p99 %.1f ms", i, s.Checks, s.Allowed, s.Latency.P50, s.Latency.P99)
				sum.Checks += s.Checks
				sum.Allowed += s.Allowed
				sum.FailOpen += s.FailOpen
				sum.Errors += s.Errors
			}
			if sum.Checks != calls || sum.Errors != 0 || sum.FailOpen != 0 {
				t.Errorf("%d requests answered, %d failed, %d by the fail mode; want %d answered by the store", sum.Checks, sum.Errors, sum.FailOpen, calls)
			}
			if sum.Allowed != limit {
				t.Errorf("the fleet admitted %d of %d requests, want exactly %d", sum.Allowed, sum.Checks, limit)
			}
			if scriptRuns != nil {
				runs := scriptRuns() - before
				t.Logf("%d requests in %d script runs", sum.Checks, runs)
				if runs > sum.Checks/2 {
					t.Errorf("%d requests took %d script runs: concurrent requests did not share runs", sum.Checks, runs)
				}
			}
		})
	}
}

// evalshaCalls is how many EVALSHA the Redis at addr has run.
func evalshaCalls(t *testing.T, addr string) int64 {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
