package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNginxForwardAuth runs the nginx config of examples/nginx against a real nginx and sluice
// serve: the config that the docs show is the one tested.
func TestNginxForwardAuth(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, statErr := os.Stat(bin); statErr != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("nginx is not installed (apt-get install nginx-light); CI must run this test")
			}
			t.Skip("nginx is not installed (apt-get install nginx-light)")
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeConfig(t, cfg, "policies:\n  api: {strategy: fixedWindow, limit: 3, window: 1h}\n")
	sl := startServe(t, "--config", cfg)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer app.Close()

	example, err := os.ReadFile("../../examples/nginx/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	conf := strings.NewReplacer(
		"127.0.0.1:8080", sl.http,
		"listen 8000;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"http://127.0.0.1:9000", app.URL,
	).Replace(string(example))
	if conf == string(example) {
		t.Fatal("the example config no longer has the addresses this test replaces")
	}
	confPath := filepath.Join(dir, "nginx.conf")
	writeConfig(t, confPath, conf)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-g",
		fmt.Sprintf("daemon off; master_process off; pid %s/nginx.pid; error_log %s/error.log;", dir, dir))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "error.log")); err == nil {
				t.Logf("nginx error.log:\n%s", log)
			}
		}
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/hello", port)
	get := func() (*http.Response, string) {
		resp, err := http.Get(url)
		if err != nil {
			return nil, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	var first *http.Response
	var body string
	eventually(t, "nginx to answer", func() bool { first, body = get(); return first != nil })
	responses := []*http.Response{first}
	bodies := []string{body}
	for range 3 {
		resp, body := get()
		responses, bodies = append(responses, resp), append(bodies, body)
	}
	for i, resp := range responses[:3] {
		if resp.StatusCode != 200 || bodies[i] != "hello" {
			t.Errorf("request %d: %d %q, want 200 from the app", i+1, resp.StatusCode, bodies[i])
		}
		want := fmt.Sprintf(`"api";r=%d;t=`, 2-i)
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit %q, want %s…", i+1, got, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=3;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	denied := responses[3]
	if denied.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 4: %d %q, want 429", denied.StatusCode, bodies[3])
	}
	if denied.Header.Get("Retry-After") == "" || !strings.HasPrefix(denied.Header.Get("RateLimit"), `"api";r=0;t=`) {
		t.Errorf("request 4 headers: %v", denied.Header)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
