package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// benchSummary is the JSON of sluice bench --json, as a reader would take it.
type benchSummary struct {
	Proto        string  `json:"proto"`
	Batch        int     `json:"batch"`
	Calls        int64   `json:"calls"`
	Checks       int64   `json:"checks"`
	ChecksPerSec float64 `json:"checksPerSec"`
	Allowed      int64   `json:"allowed"`
	Denied       int64   `json:"denied"`
	FailOpen     int64   `json:"failOpen"`
	Errors       int64   `json:"errors"`
	Latency      struct {
		P50, P90, P99, Max float64
	} `json:"latencyMs"`
}

func TestBench(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n"+
		"  generous: {strategy: tokenBucket, capacity: 1000000000, refillPerSec: 1000000000}\n"+
		"  tight: {strategy: fixedWindow, limit: 1, window: 1h}\n")
	r := startServe(t, "--config", path)
	tests := []struct {
		name, proto, policy string
		batch               int
		wantDenied          bool
	}{
		{"grpc unary", "grpc", "generous", 0, false},
		{"grpc batch", "grpc", "generous", 50, false},
		{"http unary", "http", "generous", 1, false},
		{"http batch", "http", "generous", 50, false},
		{"grpc denials", "grpc", "tight", 0, true},
		{"http denials", "http", "tight", 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := r.grpc
			if tt.proto == "http" {
				target = r.http
			}
			var stdout, stderr bytes.Buffer
			code := run([]string{"bench", "--target", target, "--proto", tt.proto, "--policy", tt.policy,
				"--keys", "100", "--concurrency", "8", "--conns", "2", "--duration", "1500ms",
				"--batch", itoa(tt.batch), "--json"}, &stdout, &stderr)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			var s benchSummary
			if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
				t.Fatalf("the JSON summary does not parse: %v\n%s", err, stdout.String())
			}
			batch := int64(max(tt.batch, 1))
			switch {
			case s.Calls == 0:
				t.Errorf("no calls: %s", stdout.String())
			case s.Checks != s.Calls*batch:
				t.Errorf("checks %d, want calls %d × batch %d", s.Checks, s.Calls, batch)
			case s.Allowed+s.Denied != s.Checks:
				t.Errorf("allowed %d + denied %d != checks %d", s.Allowed, s.Denied, s.Checks)
			case s.Errors != 0:
				t.Errorf("errors %d", s.Errors)
			case s.Proto != tt.proto || s.Batch != int(batch):
				t.Errorf("proto %q batch %d, want %q %d", s.Proto, s.Batch, tt.proto, batch)
			case !(s.Latency.P50 > 0 && s.Latency.P50 <= s.Latency.P90 && s.Latency.P90 <= s.Latency.P99 && s.Latency.P99 <= s.Latency.Max):
				t.Errorf("latency quantiles out of order: %+v", s.Latency)
			case tt.wantDenied != (s.Denied > 0):
				t.Errorf("denied %d, want denials %v", s.Denied, tt.wantDenied)
			}
			// stderr is not a terminal here: progress comes as whole lines, one after ~1 s.
			if strings.Contains(stderr.String(), "\r") || !strings.Contains(stderr.String(), "checks/s") {
				t.Errorf("progress on stderr: %q", stderr.String())
			}
		})
	}
}

// runBenchJSON runs sluice bench with args and --json, and returns its summary.
func runBenchJSON(t *testing.T, args ...string) benchSummary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"bench", "--json"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var s benchSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("the JSON summary does not parse: %v\n%s", err, stdout.String())
	}
	return s
}

// With --calls, a run makes exactly that many calls, its first included: the summary accounts for
// every check the server saw.
func TestBenchCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  counted: {strategy: fixedWindow, limit: 1000000, window: 1h}\n")
	r := startServe(t, "--config", path)
	for _, tt := range []struct{ proto, target string }{{"grpc", r.grpc}, {"http", r.http}} {
		t.Run(tt.proto, func(t *testing.T) {
			s := runBenchJSON(t, "--target", tt.target, "--proto", tt.proto, "--policy", "counted", "--keys", "1",
				"--concurrency", "8", "--calls", "37", "--batch", "3")
			if s.Calls != 37 || s.Checks != 111 || s.Allowed != 111 {
				t.Errorf("calls %d checks %d allowed %d, want 37, 111, 111", s.Calls, s.Checks, s.Allowed)
			}
		})
	}
	_, d := r.check(t, "counted", "bench-0")
	if spent := 1_000_000 - d["remaining"].(float64); spent != 2*111+1 {
		t.Errorf("the server counted %v checks, want 2 runs of 111 and this one", spent)
	}
}

// With --rate, a run makes no more calls than the rate allows, however fast the server answers.
func TestBenchRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  paced: {strategy: fixedWindow, limit: 1000000, window: 1h}\n")
	r := startServe(t, "--config", path)
	s := runBenchJSON(t, "--target", r.grpc, "--policy", "paced", "--concurrency", "4", "--rate", "40", "--duration", "1s")
	// 40 in the second, and the first call made before it; a slow machine may make fewer.
	if s.Calls < 20 || s.Calls > 42 {
		t.Errorf("%d calls in 1 s at --rate 40", s.Calls)
	}
}

// A store that does not answer has its checks allowed by the fail mode: the summary tells them
// apart from the limit's admissions.
func TestBenchCountsFailOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	// Nothing listens on port 1: every store call fails at once.
	writeConfig(t, path, "store: redis://127.0.0.1:1\nstoreTimeout: 50ms\n"+
		"policies:\n  p: {strategy: fixedWindow, limit: 10, window: 1h}\n")
	r := startServe(t, "--config", path)
	for _, tt := range []struct {
		proto, target string
		batch         int
	}{{"grpc", r.grpc, 0}, {"grpc", r.grpc, 5}, {"http", r.http, 0}, {"http", r.http, 5}} {
		t.Run(fmt.Sprint(tt.proto, tt.batch), func(t *testing.T) {
			s := runBenchJSON(t, "--target", tt.target, "--proto", tt.proto, "--policy", "p", "--keys", "3",
				"--concurrency", "2", "--calls", "20", "--batch", itoa(tt.batch))
			if s.Checks == 0 || s.FailOpen != s.Checks || s.Allowed != s.Checks {
				t.Errorf("checks %d allowed %d failOpen %d, want every check allowed by the fail mode", s.Checks, s.Allowed, s.FailOpen)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	run([]string{"bench", "--target", r.grpc, "--policy", "p", "--calls", "3"}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "by fail mode") {
		t.Errorf("the table does not say the fail mode allowed the checks:\n%s", stdout.String())
	}
}

func TestBenchTable(t *testing.T) {
	r := startServe(t, "--config", "../../examples/serve/sluice.yaml")
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "--target", r.grpc, "--policy", "partner-api", "--keys", "10",
		"--concurrency", "4", "--duration", "300ms"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !regexp.MustCompile(`(?m)^errors +0$`).MatchString(stdout.String()) {
		t.Errorf("the summary lacks a row of 0 errors:\n%s", stdout.String())
	}
	for _, row := range []string{"calls", "checks", "checks/s", "allowed", "denied", "p50", "p90", "p99", "max"} {
		if !strings.Contains(stdout.String(), row) {
			t.Errorf("the summary lacks %q:\n%s", row, stdout.String())
		}
	}
}

// TestBenchEnvoy drives sluice serve's Envoy service with --proto envoy, as scripts/servicepath.sh
// does: the domain is --policy, each key one descriptor (key, bench-N).
func TestBenchEnvoy(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("store: memory\nenvoy: ["+rules+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, "--config", cfg)
	tests := []struct {
		name        string
		batch       int
		calls       int
		wantCall    string
		wantAllowed int64
	}{
		// 3 keys × 2 an hour, one descriptor a request: 6 allowed of 60. The bench picks keys at
		// random: in 20 calls a key came up once about one run in a hundred (seen in CI); in 60,
		// one in a hundred million.
		{"unary", 1, 60, "ShouldRateLimit of 1 descriptor,", 6},
		// Nothing is left: every descriptor of every request is denied.
		{"batch", 4, 20, "ShouldRateLimit of 4 descriptors", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := runBenchJSON(t, "--target", r.grpc, "--proto", "envoy", "--policy", "bench", "--keys", "3",
				"--concurrency", "2", "--calls", itoa(tt.calls), "--batch", itoa(tt.batch))
			if want := int64(tt.calls * tt.batch); s.Allowed != tt.wantAllowed || s.Checks != want || s.Errors != 0 {
				t.Errorf("allowed %d of %d checks (errors %d), want %d of %d", s.Allowed, s.Checks, s.Errors, tt.wantAllowed, want)
			}
			var stdout, stderr bytes.Buffer
			run([]string{"bench", "--target", r.grpc, "--proto", "envoy", "--policy", "bench", "--calls", "2", "--batch", itoa(tt.batch)}, &stdout, &stderr)
			if !strings.Contains(stdout.String(), tt.wantCall) {
				t.Errorf("the table does not say %q:\n%s", tt.wantCall, stdout.String())
			}
		})
	}
}

func TestBenchErrors(t *testing.T) {
	r := startServe(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"unknown policy over grpc", []string{"--target", r.grpc, "--policy", "nope"}, 2, "NotFound"},
		{"unknown policy over http", []string{"--target", r.http, "--proto", "http", "--policy", "nope"}, 2, "404"},
		{"no target", []string{"--policy", "p"}, 2, "no target"},
		{"bad proto", []string{"--target", r.grpc, "--policy", "p", "--proto", "quic"}, 2, "want grpc, http, gubernator or envoy"},
		{"gubernator without limit", []string{"--target", r.grpc, "--policy", "p", "--proto", "gubernator", "--period", "1s"}, 2, "needs --limit"},
		{"gubernator without period", []string{"--target", r.grpc, "--policy", "p", "--proto", "gubernator", "--limit", "5"}, 2, "needs --period"},
		{"gubernator against sluice", []string{"--target", r.grpc, "--policy", "p", "--proto", "gubernator", "--limit", "5", "--period", "1s"}, 2, "Unimplemented"},
		{"stray argument", []string{"--target", r.grpc, "--policy", "p", "extra"}, 2, "unexpected arguments"},
		{"help", []string{"-h"}, 0, "--concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := runBench(context.Background(), tt.args, &out, &out); code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, out.String())
			}
			if !strings.Contains(out.String(), tt.contains) {
				t.Errorf("output %q lacks %q", out.String(), tt.contains)
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
