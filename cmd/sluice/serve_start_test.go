package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// readyz answers the HTTP status of r's /readyz, or 0 when the request fails.
func (r *running) readyz(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + r.http + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// deadPort returns a loopback address where nothing listens, as a misnamed store URL would name.
func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeStoreUnreachableAtStart starts sluice serve on a Redis that is down: it logs an ERROR
// naming the store, and /readyz is 503, although every policy fails open, until the Redis comes
// up on that port and answers; then 200.
func TestServeStoreUnreachableAtStart(t *testing.T) {
	redistest.Require(t, "redis-server")
	rs := redistest.StartServer(t)
	rs.Kill() // the port is known and nothing listens on it
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  a: {strategy: gcra, limit: 10, period: 1s, burst: 10}\n")
	r := startServe(t, "--config", path, "--store", rs.URL())

	if log := r.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "store="+rs.URL()) ||
		!strings.Contains(log, "cannot answer") {
		t.Errorf("no ERROR line naming the store %s at start:\n%s", rs.URL(), log)
	}
	for range 3 {
		if code := r.readyz(t); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz %d with the store never answered, want 503 even though every policy fails open", code)
		}
		time.Sleep(50 * time.Millisecond)
	}

	rs.Start()
	eventually(t, "/readyz 200 once the store answers", func() bool { return r.readyz(t) == http.StatusOK })
	eventually(t, "the log to say the store answers", func() bool {
		return strings.Contains(r.log.String(), "store answering")
	})

	// Once it has answered, the existing rule holds: a fail-open config stays ready through an outage.
	rs.Kill()
	for range 3 {
		if code := r.readyz(t); code != http.StatusOK {
			t.Fatalf("/readyz %d in an outage after the store answered, with every policy failing open; want 200", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServeRequireStore(t *testing.T) {
	dead := "redis://u:s3cret@" + deadPort(t)
	dir := t.TempDir()
	required := filepath.Join(dir, "required.yaml")
	writeConfig(t, required, "requireStore: true\npolicies:\n  a: {strategy: gcra, limit: 10, period: 1s, burst: 10}\n")
	plain := filepath.Join(dir, "plain.yaml")
	writeConfig(t, plain, "policies:\n  a: {strategy: gcra, limit: 10, period: 1s, burst: 10}\n")
	tests := []struct {
		name string
		args []string
	}{
		{"flag", []string{"--config", plain, "--require-store"}},
		{"config field", []string{"--config", required}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &syncBuffer{}
			args := append([]string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--store", dead}, tt.args...)
			exit := make(chan int, 1)
			go func() { exit <- runServe(context.Background(), args, log, log) }()
			select {
			case code := <-exit:
				if code == 0 {
					t.Errorf("exit 0 with the store unreachable and required")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("sluice serve did not exit with the store unreachable and required")
			}
			out := log.String()
			if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "cannot answer") || !strings.Contains(out, "xxxxx@") {
				t.Errorf("log lacks an ERROR naming the redacted store:\n%s", out)
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("log shows the store's password:\n%s", out)
			}
			if strings.Contains(out, "listening") {
				t.Errorf("listened before exiting:\n%s", out)
			}
		})
	}
}

// TestServeWarnsOfIdleOptions starts on the embedded store with lease and nearCache set: each is
// a WARN naming the policy and the option, and serving goes on.
func TestServeWarnsOfIdleOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  hot: {strategy: gcra, limit: 10, period: 1s, burst: 10, lease: true, nearCache: true}\n")
	r := startServe(t, "--config", path)
	log := r.log.String()
	for _, want := range []string{"policies.hot.lease: does nothing on the embedded store", "policies.hot.nearCache: does nothing on the embedded store"} {
		if !strings.Contains(log, want) || !strings.Contains(log, "level=WARN") {
			t.Errorf("log lacks a WARN %q:\n%s", want, log)
		}
	}
	if code, d := r.check(t, "hot", "k"); code != 200 || d["allowed"] != true {
		t.Errorf("check: %d %v, want allowed", code, d)
	}
	if code := r.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz %d on the embedded store, want 200", code)
	}
}

// TestServePprof: --pprof serves Go's profiles on a listener of its own, and the API's port does
// not serve them.
func TestServePprof(t *testing.T) {
	addr := deadPort(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  a: {strategy: gcra, limit: 10, period: 1s, burst: 10}\n")
	r := startServe(t, "--config", path, "--pprof", addr)
	tests := []struct {
		name string
		url  string
		want int
	}{
		{"the profiles' index", "http://" + addr + "/debug/pprof/", http.StatusOK},
		{"a goroutine profile", "http://" + addr + "/debug/pprof/goroutine?debug=1", http.StatusOK},
		{"not on the API's port", "http://" + r.http + "/debug/pprof/", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var code int
			eventually(t, tt.url, func() bool {
				resp, err := http.Get(tt.url)
				if err != nil {
					return false
				}
				resp.Body.Close()
				code = resp.StatusCode
				return true
			})
			if code != tt.want {
				t.Errorf("GET %s: %d, want %d", tt.url, code, tt.want)
			}
		})
	}
	if !strings.Contains(r.log.String(), "sluice serve: profiles") {
		t.Errorf("the log does not say where the profiles are:\n%s", r.log.String())
	}
}
