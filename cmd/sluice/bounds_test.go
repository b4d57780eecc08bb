package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// post sends body as JSON to path and returns the status and the decoded answer.
func (r *running) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+r.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// metric reads one series' value from /metrics.
func (r *running) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no series %s in /metrics", series)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestServeRefusesEmptyReload: a config emptied (or left with no policies) is refused on reload,
// counted, and the old one keeps serving; at start an empty config is still accepted.
func TestServeRefusesEmptyReload(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"empty file", ""},
		{"no policies", "policies: {}\n"},
		{"comment only", "# nothing\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sluice.yaml")
			writeConfig(t, path, "policies:\n  a: {strategy: fixedWindow, limit: 5, window: 1h}\n")
			r := startServe(t, "--config", path, "--reload-every", "20ms")
			writeConfig(t, path, tc.text)
			eventually(t, "the rejection to be logged", func() bool {
				return strings.Contains(r.log.String(), "no policies")
			})
			if code, _ := r.check(t, "a", "k"); code != 200 {
				t.Errorf("a after an empty reload: %d, want the old config serving", code)
			}
			if n := r.metric(t, `sluice_config_reloads_total{result="error"}`); n < 1 {
				t.Errorf("reload errors counted %v, want at least 1", n)
			}
		})
	}
	t.Run("empty at start", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		writeConfig(t, path, "")
		r := startServe(t, "--config", path)
		if code, _ := r.check(t, "a", "k"); code != 404 {
			t.Errorf("check with no policies: %d, want 404", code)
		}
	})
}

// TestServeDurationFlags: a duration flag out of range is refused, naming the flag, with exit
// code 2 and before anything listens (NewTicker used to panic after "listening").
func TestServeDurationFlags(t *testing.T) {
	for _, tc := range []struct{ name, flag, value string }{
		{"reload-every zero", "--reload-every", "0"},
		{"reload-every negative", "--reload-every", "-1s"},
		{"max-keys negative", "--max-keys", "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := runServe(context.Background(), []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", tc.flag, tc.value}, &out, &out)
			if code != 2 || !strings.Contains(out.String(), tc.flag) || strings.Contains(out.String(), "listening") {
				t.Fatalf("exit %d, output %q: want 2, naming %s, before listening", code, out.String(), tc.flag)
			}
		})
	}
}

// TestServeCeilings: a slot's ttlMs and limit, and a settle's actual, are refused over the config's
// ceilings with a 400 naming the field; the defaults apply without a config.
func TestServeCeilings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "maxSlotTtl: 1m\nmaxSlotLimit: 10\nmaxSettle: 1000\npolicies:\n  a: {strategy: tokenBucket, capacity: 100, refillPerSec: 1}\n")
	r := startServe(t, "--config", path)
	bare := startServe(t)
	for _, tc := range []struct {
		name  string
		r     *running
		path  string
		body  string
		field string
	}{
		{"ttlMs above maxSlotTtl", r, "/v1/admit", `{"name":"n","key":"k","holder":"h","limit":1,"ttlMs":60001}`, "ttlMs"},
		{"ttlMs 2^40 by default", bare, "/v1/admit", `{"name":"n","key":"k","holder":"h","limit":1,"ttlMs":1099511627776}`, "ttlMs"},
		{"limit above maxSlotLimit", r, "/v1/admit", `{"name":"n","key":"k","holder":"h","limit":11,"ttlMs":1000}`, "limit"},
		{"heartbeat ttlMs above maxSlotTtl", r, "/v1/heartbeat", `{"name":"n","key":"k","holder":"h","ttlMs":60001}`, "ttlMs"},
		{"actual above maxSettle", r, "/v1/settle", `{"policy":"a","key":"k","reserved":1,"actual":1001}`, "actual"},
		{"reserved above maxSettle", r, "/v1/settle", `{"policy":"a","key":"k","reserved":1001,"actual":1}`, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := tc.r.post(t, tc.path, tc.body)
			if msg, _ := out["error"].(string); code != 400 || !strings.Contains(msg, tc.field) {
				t.Fatalf("%s %s = %d %v, want 400 naming %s", tc.path, tc.body, code, out, tc.field)
			}
		})
	}
	if code, _ := r.post(t, "/v1/admit", `{"name":"n","key":"k","holder":"h","limit":10,"ttlMs":60000}`); code != 200 {
		t.Errorf("admit at the ceilings: %d, want 200", code)
	}
	if code, _ := r.post(t, "/v1/settle", `{"policy":"a","key":"k","reserved":1,"actual":1000}`); code != 200 {
		t.Errorf("settle at the ceiling: %d, want 200", code)
	}
	if n := r.metric(t, "sluice_keys"); n != 2 {
		t.Errorf("sluice_keys = %v, want 2: the slot's key counts", n)
	}
}

// flood checks n distinct keys of policy in batches of 1000 over the HTTP API.
func flood(t *testing.T, r *running, policy string, n int) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	var body bytes.Buffer
	for i := 0; i < n; i += 1000 {
		body.Reset()
		fmt.Fprintf(&body, `{"policy":%q,"keys":[`, policy)
		for j := i; j < min(i+1000, n); j++ {
			if j > i {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `"flood-%d"`, j)
		}
		body.WriteString("]}")
		resp, err := client.Post("http://"+r.http+"/v1/check-many", "application/json", &body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("check-many at key %d: %d", i, resp.StatusCode)
		}
	}
}

// testFlood: a flood of distinct keys under a daily window stays under the key cap (sluice_keys and
// the server's RSS), is counted as refusals, and never evicts a key still spending: its limit
// holds. The server is a process of its own, so that its RSS is its alone.
func testFlood(t *testing.T, keys, maxKeys int, rssBoundMB float64, config string) {
	bin := buildSluice(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, config+"policies:\n  daily: {strategy: fixedWindow, limit: 3, window: 24h}\n")
	p := spawnSluice(t, bin, path)
	r := &running{http: p.http, grpc: p.grpc}
	for range 3 {
		if code, d := r.check(t, "daily", "victim"); code != 200 || d["allowed"] != true {
			t.Fatalf("victim's budget: %d %v", code, d)
		}
	}
	start := time.Now()
	flood(t, r, "daily", keys)
	rss := r.metric(t, "process_resident_memory_bytes") / (1 << 20)
	t.Logf("%d keys in %v; the server's RSS %.0f MB", keys, time.Since(start), rss)
	if n := r.metric(t, "sluice_keys"); n > float64(maxKeys) {
		t.Errorf("sluice_keys = %v, above the bound %d", n, maxKeys)
	}
	if n := r.metric(t, "sluice_key_refusals_total"); n < float64(keys+1-maxKeys) {
		t.Errorf("sluice_key_refusals_total = %v, want at least %d", n, keys+1-maxKeys)
	}
	if code, d := r.check(t, "daily", "victim"); code != 200 || d["allowed"] != false {
		t.Errorf("victim after the flood: %d %v, want still denied (its spending kept)", code, d)
	}
	if rss > rssBoundMB {
		t.Errorf("the server's RSS %.0f MB after the flood, want under %.0f", rss, rssBoundMB)
	}
}

func TestServeKeyFloodSmall(t *testing.T) {
	testFlood(t, 50_000, 10_000, 100, "maxKeys: 10000\n")
}

// TestServeKeyFloodDefault floods 1.2M keys at the default bound of 1M.
func TestServeKeyFloodDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("1.2M keys: skipped under -short")
	}
	testFlood(t, 1_200_000, 1_000_000, 400, "")
}
