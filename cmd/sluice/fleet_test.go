package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
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

// startSluice runs `bin serve --config config` as its own process on free ports (spawnSluice) and
// returns its HTTP address and the process, for tests that kill it themselves.
func startSluice(t *testing.T, bin, config string) (string, *exec.Cmd) {
	t.Helper()
	p := spawnSluice(t, bin, config)
	return p.http, p.cmd
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
