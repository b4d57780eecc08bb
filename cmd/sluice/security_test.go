package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// raiseFileLimit lifts the process's open-file limit to at least n, or skips the test.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("open-file limit %d, need %d", lim.Max, n)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// configFile writes text to a config file in a temporary directory and returns its path.
func configFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, text)
	return path
}

// closedByServer waits up to d for the server to close c: a read that ends in EOF or a reset.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c) // whatever answer came first, then the end
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// 2,000 keep-alive connections left idle are closed by the server after idleTimeout.
func TestServeReclaimsIdleConnections(t *testing.T) {
	const n = 2000
	raiseFileLimit(t, 2*n+256)
	r := startServe(t, "--config", configFile(t, "idleTimeout: 1s\nmaxConnections: 2500\n"))
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range conns {
		c, err := net.Dial("tcp", r.http)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns[i] = c
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			// One request, so that the connection is an idle keep-alive one.
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", r.http)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	start := time.Now()
	open := 0
	for _, c := range conns {
		if !closedByServer(c, time.Until(start.Add(10*time.Second))) {
			open++
		}
	}
	if open > 0 {
		t.Fatalf("%d of %d idle connections still open 10s after a 1s idleTimeout", open, n)
	}
	t.Logf("%d idle connections reclaimed in %v", n, time.Since(start).Round(time.Millisecond))
}

// A body sent a byte a second, or announced and never sent, is cut off after readTimeout, before
// authentication answers too.
func TestServeCutsOffSlowBodies(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := configFile(t, "readTimeout: 1s\npolicies:\n  api: {strategy: fixedWindow, limit: 10, window: 1m}\n")
	open := startServe(t, "--config", cfg)
	authed := startServe(t, "--config", cfg, "--auth-token-file", tokens)
	tests := []struct {
		name    string
		addr    string
		header  string
		trickle bool // send a byte a second; else send nothing after the headers
	}{
		{"a byte a second", open.http, "", true},
		{"a body announced, never sent", open.http, "", false},
		{"a byte a second, no token", authed.http, "", true},
		{"a body announced, never sent, no token", authed.http, "", false},
		{"a byte a second, with a token", authed.http, "Authorization: Bearer secret\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			body := `{"policy":"api","key":"k"}`
			fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", tt.header, len(body)+100)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.trickle {
				go func() {
					for i := 0; ctx.Err() == nil; i++ {
						if _, err := c.Write([]byte{body[i%len(body)]}); err != nil {
							return
						}
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					}
				}()
			}
			start := time.Now()
			if !closedByServer(c, 8*time.Second) {
				t.Fatalf("the connection is still open after %v, with readTimeout 1s", time.Since(start).Round(time.Millisecond))
			}
		})
	}
}

// Through sluice serve: a text/plain POST is 415 and changes nothing, another Host is 403, the
// gate believes X-Forwarded-For from a trusted proxy, and an empty key is a 400.
func TestServeSecurity(t *testing.T) {
	path := configFile(t, `
allowedHosts: [sluice.test, 127.0.0.1]
trustedProxies: [127.0.0.1/32]
policies:
  api: {strategy: fixedWindow, limit: 10, window: 1m}
`)
	r := startServe(t, "--config", path)
	do := func(method, target, ctype, host, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+r.http+target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, _ := do("GET", "/v1/gate/api?key=victim", "", "", ""); code != 200 {
		t.Fatalf("gate: %d", code)
	}
	if code, body := do("POST", "/v1/reset", "text/plain", "", `{"policy":"api","key":"victim"}`); code != 415 || !strings.Contains(body, "Content-Type") {
		t.Errorf("text/plain reset: %d %s, want 415", code, body)
	}
	if code, body := do("POST", "/v1/reset", "application/json", "evil.example", `{"policy":"api","key":"victim"}`); code != 403 || !strings.Contains(body, "evil.example") {
		t.Errorf("reset for another host: %d %s, want 403", code, body)
	}
	if code, body := do("POST", "/v1/peek", "application/json", "sluice.test:80", `{"policy":"api","key":"victim"}`); code != 200 || !strings.Contains(body, `"remaining":9`) {
		t.Errorf("peek: %d %s, want 9 remaining: a refused reset went through", code, body)
	}
	// The peer, 127.0.0.1, is a trusted proxy: the forwarded address is the key.
	if code, _ := do("GET", "/v1/gate/api", "", "", "", "X-Forwarded-For", "198.51.100.7"); code != 200 {
		t.Fatalf("gate: %d", code)
	}
	if _, body := do("POST", "/v1/peek", "application/json", "", `{"policy":"api","key":"198.51.100.7"}`); !strings.Contains(body, `"remaining":9`) {
		t.Errorf("the forwarded address was not the key: %s", body)
	}
	if code, body := do("GET", "/v1/gate/api?key=", "", "", ""); code != 400 || !strings.Contains(body, "key: given empty") {
		t.Errorf("gate of an empty key: %d %s, want 400", code, body)
	}
}

// A store that is down answers 503 with a stable message, and the log shows no password.
func TestServeStoreDownRedacted(t *testing.T) {
	path := configFile(t, "store: redis://default:hunter2@127.0.0.1:6390\npolicies:\n  api: {strategy: fixedWindow, limit: 10, window: 1m}\n")
	r := startServe(t, "--config", path, "--reload-every", "50ms")
	resp, err := http.Post("http://"+r.http+"/v1/peek", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "store unavailable") || strings.Contains(string(body), "6390") {
		t.Errorf("peek: %d %s, want 503 store unavailable and no address", resp.StatusCode, body)
	}
	if log := r.log.String(); strings.Contains(log, "hunter2") || !strings.Contains(log, "xxxxx@127.0.0.1:6390") {
		t.Errorf("the log carries the store's password, or no store:\n%s", log)
	}
	// A reload that changes the store warns, with the password redacted.
	writeConfig(t, path, strings.Replace(mustRead(t, path), "hunter2", "hunter3", 1))
	eventually(t, "the reload warning", func() bool { return strings.Contains(r.log.String(), "change only at restart") })
	if log := r.log.String(); strings.Contains(log, "hunter") {
		t.Errorf("the log carries the store's password:\n%s", log)
	}
	// A store URL that does not parse names the store without its password.
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := runServe(ctx, []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--store", "redis://default:hunter2@127.0.0.1:port/x"}, &out, &out); code == 0 || strings.Contains(out.String(), "hunter2") {
		t.Errorf("exit %d, log:\n%s", code, out.String())
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
