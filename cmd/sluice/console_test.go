package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const consoleCheck, consoleAdmin = "console-check-token", "console-admin-token"

// startConsole runs sluice serve with a config of extra text and two tokens, check and admin.
func startConsole(t *testing.T, extra string) *running {
	t.Helper()
	dir := t.TempDir()
	cfg, tokens := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "tokens")
	writeConfig(t, cfg, "policies:\n  login: {strategy: fixedWindow, limit: 50, window: 1h}\n  api: {strategy: gcra, limit: 1000, period: 1s, burst: 1000}\n"+extra)
	writeConfig(t, tokens, "check:"+consoleCheck+"\nadmin:"+consoleAdmin+"\n")
	return startServe(t, "--config", cfg, "--auth-token-file", tokens)
}

// consoleGet asks a console route with the check token and decodes its JSON into out.
func consoleGet(t *testing.T, r *running, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+r.http+path, nil)
	req.Header.Set("Authorization", "Bearer "+consoleCheck)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %d: %v", path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

// feedOf opens the console's live feed and returns its events, name and data, until the test ends.
func feedOf(t *testing.T, r *running) (<-chan [2]string, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+r.http+"/v1/console/events", nil)
	req.Header.Set("Authorization", "Bearer "+consoleCheck)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan [2]string, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		var name, data string
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				events <- [2]string{name, data}
			case strings.HasPrefix(line, "event: "):
				name = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return events, resp.StatusCode
}

type consoleTick struct {
	Ready    bool `json:"ready"`
	Policies map[string]struct {
		Allowed, Denied, FailOpen, FailClosed uint64
	} `json:"policies"`
}

// TestConsoleCountsExactly drives sluice serve, with the shipped defaults and a console, from
// 32 concurrent clients on a hot key and a spread of others: the live feed counts every decision
// once, Top keys names the hot key with its exact counts, and /metrics names no key.
func TestConsoleCountsExactly(t *testing.T) {
	r := startConsole(t, "")
	events, status := feedOf(t, r)
	if status != 200 {
		t.Fatalf("feed: %d", status)
	}
	if e := <-events; e[0] != "history" {
		t.Fatalf("first event %q", e[0])
	}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for c := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				key := "hot-user"
				if i%2 == 1 {
					key = fmt.Sprintf("user-%d-%d", c, i)
				}
				req, _ := http.NewRequest("POST", "http://"+r.http+"/v1/check", strings.NewReader(`{"policy":"login","key":"`+key+`"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+consoleCheck)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var d struct{ Allowed bool }
				json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				if d.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 50+160 || denied.Load() != 160-50 {
		t.Fatalf("clients saw %d allowed, %d denied; want 210 and 110", allowed.Load(), denied.Load())
	}
	var a, d uint64
	deadline := time.After(10 * time.Second)
	for a+d < 320 {
		select {
		case e := <-events:
			var tick consoleTick
			if err := json.Unmarshal([]byte(e[1]), &tick); e[0] != "tick" || err != nil {
				t.Fatalf("event %s %s: %v", e[0], e[1], err)
			}
			a, d = a+tick.Policies["login"].Allowed, d+tick.Policies["login"].Denied
		case <-deadline:
			t.Fatalf("the feed counted %d allowed, %d denied of 320 in 10 s", a, d)
		}
	}
	if a != 210 || d != 110 {
		t.Errorf("the feed counted %d allowed, %d denied; want 210 and 110", a, d)
	}

	var top struct {
		Policies []struct {
			Policy          string
			Checked, Denied struct {
				Total int64
				Keys  []struct {
					Key          string
					Count, Error int64
				}
			}
		}
	}
	if code := consoleGet(t, r, "/v1/console/top?policy=login&limit=3", &top); code != 200 || len(top.Policies) != 1 {
		t.Fatalf("top: %d %+v", code, top)
	}
	login := top.Policies[0]
	if login.Checked.Total != 320 || login.Denied.Total != 110 || login.Checked.Keys[0].Key != "hot-user" ||
		login.Checked.Keys[0].Count != 160 || login.Denied.Keys[0].Key != "hot-user" || login.Denied.Keys[0].Error != 0 {
		t.Errorf("top of login: %+v; want hot-user first, 160 checks, 320 in all and 110 denied", login)
	}
	resp, err := http.Get("http://" + r.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(metrics), "hot-user") || strings.Contains(string(metrics), "user-1-") {
		t.Error("/metrics names a key")
	}
}

// TestConsoleStoreDown: over a Redis that never answers, the feed says the server is not ready
// and counts the fail-open decisions, and Top keys still names the keys.
func TestConsoleStoreDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r := startConsole(t, "store: redis://"+addr+"/0\nstoreTimeout: 20ms\n")
	events, _ := feedOf(t, r)
	<-events // the history
	for range 5 {
		if code, d := r.checkWith(t, consoleCheck, "api", "k"); code != 200 || d["allowed"] != true {
			t.Fatalf("a fail-open check: %d %v", code, d)
		}
	}
	var open uint64
	notReady := false
	for deadline := time.After(10 * time.Second); open < 5 || !notReady; {
		select {
		case e := <-events:
			var tick consoleTick
			json.Unmarshal([]byte(e[1]), &tick)
			open += tick.Policies["api"].FailOpen
			notReady = notReady || !tick.Ready
		case <-deadline:
			t.Fatalf("in 10 s the feed counted %d fail-open decisions of 5, not ready %v", open, notReady)
		}
	}
	var top struct {
		Policies []struct{ Checked struct{ Total int64 } }
	}
	if consoleGet(t, r, "/v1/console/top?policy=api", &top); len(top.Policies) != 1 || top.Policies[0].Checked.Total != 5 {
		t.Errorf("top of api: %+v, want the 5 fail-open checks", top)
	}
}

// TestConsoleHostile: floods of keys, feeds and idle feeds, and the switches.
func TestConsoleHostile(t *testing.T) {
	t.Run("a flood of keys keeps Top keys small", func(t *testing.T) {
		r := startConsole(t, "")
		keys := make([]string, 1000)
		for batch := range 20 {
			for i := range keys {
				keys[i] = fmt.Sprintf(`"flood-%d-%d"`, batch, i)
			}
			body := `{"policy":"api","keys":[` + strings.Join(keys, ",") + `]}`
			req, _ := http.NewRequest("POST", "http://"+r.http+"/v1/check-many", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+consoleCheck)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("check-many: %v %v", resp, err)
			}
			resp.Body.Close()
		}
		var top struct {
			Dropped  int64
			Policies []struct {
				Checked struct {
					Total, ErrorBound int64
					Keys              []json.RawMessage
				}
			}
		}
		consoleGet(t, r, "/v1/console/top?policy=api&limit=100", &top)
		// A busy machine may leave the drain behind a 1000-key batch: what it drops is counted.
		if c := top.Policies[0].Checked; c.Total+top.Dropped != 20_000 || top.Dropped > 2000 || len(c.Keys) != 100 || c.ErrorBound > 20_000/128+1 {
			t.Errorf("after 20,000 distinct keys: total %d, dropped %d, %d keys listed, error bound %d", c.Total, top.Dropped, len(c.Keys), c.ErrorBound)
		}
	})
	t.Run("feeds past the cap get 503, an idle feed stalls no other", func(t *testing.T) {
		r := startConsole(t, "")
		var live <-chan [2]string
		for i := range 64 {
			events, status := feedOf(t, r) // all but the last are never read again: idle
			if status != 200 {
				t.Fatalf("feed %d: %d", i, status)
			}
			live = events
		}
		if _, status := feedOf(t, r); status != 503 {
			t.Errorf("feed 65: %d, want 503", status)
		}
		for range 3 {
			select {
			case <-live:
			case <-time.After(10 * time.Second):
				t.Fatal("a read feed got no event in 10 s beside 63 idle ones")
			}
		}
	})
	t.Run("console off", func(t *testing.T) {
		r := startConsole(t, "console: {enabled: false}\n")
		for _, path := range []string{"/ui/", "/v1/console/session"} {
			if code := consoleGet(t, r, path, nil); code != 404 {
				t.Errorf("%s: %d, want 404", path, code)
			}
		}
	})
	t.Run("top keys off", func(t *testing.T) {
		r := startConsole(t, "console: {topKeys: false}\n")
		if code := consoleGet(t, r, "/v1/console/top", nil); code != 501 {
			t.Errorf("top: %d, want 501", code)
		}
		if code := consoleGet(t, r, "/ui/", nil); code != 200 {
			t.Errorf("/ui/: %d, want 200", code)
		}
	})
	t.Run("a check token cannot act", func(t *testing.T) {
		r := startConsole(t, "")
		if code, _ := r.checkWith(t, consoleCheck, "api", "k"); code != 200 {
			t.Fatalf("check: %d", code)
		}
		req, _ := http.NewRequest("POST", "http://"+r.http+"/v1/reset", strings.NewReader(`{"policy":"api","key":"k","reason":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+consoleCheck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("reset with a check token: %d, want 403", resp.StatusCode)
		}
	})
}

// checkWith checks key under policy with token.
func (r *running) checkWith(t *testing.T, token, policy, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+r.http+"/v1/check", strings.NewReader(fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}
