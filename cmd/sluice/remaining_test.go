package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// gate sends one forward-auth request and returns its status and RateLimit field.
func (r *running) gate(t *testing.T, policy, key string, cost int) (int, string) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/gate/%s?key=%s&cost=%d", r.http, policy, key, cost))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("RateLimit")
}

// wireDecision is a decision as the JSON API answers it.
type wireDecision struct {
	Allowed   bool           `json:"allowed"`
	Remaining int64          `json:"remaining"`
	DeniedBy  int            `json:"deniedBy"`
	Parts     []wireDecision `json:"parts"`
	Decisions []wireDecision `json:"decisions"` // check-all's items
}

func (r *running) decide(t *testing.T, path, body string) wireDecision {
	t.Helper()
	resp, err := http.Post("http://"+r.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d wireDecision
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d, %v", path, body, resp.StatusCode, err)
	}
	return d
}

// remainings reads the r of every item of a RateLimit field.
var remainings = regexp.MustCompile(`;r=(\d+);`)

func rOf(t *testing.T, field string) []int64 {
	t.Helper()
	var out []int64
	for _, m := range remainings.FindAllStringSubmatch(field, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, n)
	}
	return out
}

// TestServeReportsWhatIsLeft runs sluice serve over each store and reads what its gate and JSON
// API report: a denied composite spends nothing, so its limit that would have allowed shows all it
// still has (the 429 of llm-proxy said "large#requests";r=7 with 8 left); and with lease: true,
// r is the key's remaining, not the count of the server's lease (five gate calls on a bucket of
// 1000 said r=999, r=1, r=0, r=2, r=1).
func TestServeReportsWhatIsLeft(t *testing.T) {
	tests := []struct {
		name  string
		store func(t *testing.T) string
		lease bool // leases do nothing over the embedded store
	}{
		{"memory", func(*testing.T) string { return "memory" }, false},
		{"redis", func(t *testing.T) string { return redistest.StartServer(t).URL() }, true},
		{"postgres", postgresURL, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			// The tokens refill a thousandth a second: never a whole token during the test.
			writeConfig(t, config, fmt.Sprintf(`store: %q
policies:
  llm:
    limits:
      - {name: requests, unit: request, strategy: fixedWindow, limit: 10, window: 1h}
      - {name: tokens, strategy: tokenBucket, capacity: 100, refillPerSec: 0.001}
  hot: {strategy: tokenBucket, capacity: 1000, refillPerSec: 0.001, lease: %v}
`, tt.store(t), tt.lease))
			awaitWindow(t, time.Hour, 30*time.Second)
			r := startServe(t, "--config", config)

			// 95 tokens of 100 and 1 request of 10 spent.
			if d := r.decide(t, "/v1/check", `{"policy":"llm","key":"alice","cost":95}`); !d.Allowed {
				t.Fatalf("the first check: %+v", d)
			}
			// 20 tokens are 15 short: denied by the tokens, and no request counted.
			code, field := r.gate(t, "llm", "alice", 20)
			if got := rOf(t, field); code != http.StatusTooManyRequests || len(got) != 2 || got[0] != 9 || got[1] != 5 {
				t.Errorf("gate, denied: %d, RateLimit %q; want 429 with r=9 requests (none spent) and r=5 tokens", code, field)
			}
			d := r.decide(t, "/v1/check", `{"policy":"llm","key":"alice","cost":20}`)
			if d.Allowed || d.DeniedBy != 1 || len(d.Parts) != 2 || !d.Parts[0].Allowed || d.Parts[0].Remaining != 9 || d.Parts[1].Remaining != 5 {
				t.Errorf("check, denied: %+v; want deniedBy 1, the request part allowed with 9 left, the tokens' with 5", d)
			}
			// A composite that allows, inside a check-all another item denies: its parts, and its
			// own decision, show what bob has, untouched.
			d = r.decide(t, "/v1/check-all", `{"items":[{"policy":"llm","key":"bob","cost":30},{"policy":"llm","key":"alice","cost":20}]}`)
			if d.Allowed || d.DeniedBy != 1 || len(d.Decisions) != 2 {
				t.Fatalf("check-all: %+v; want denied by its second item", d)
			}
			if bob := d.Decisions[0]; !bob.Allowed || len(bob.Parts) != 2 || bob.Parts[0].Remaining != 10 || bob.Parts[1].Remaining != 100 || bob.Remaining != 10 {
				t.Errorf("check-all, bob's item: %+v; want allowed, parts 10 and 100, remaining 10", bob)
			}

			// Five gate calls on a fresh key of 1000: what is left after each, leased or not.
			for i := range int64(5) {
				code, field := r.gate(t, "hot", "k", 1)
				if got := rOf(t, field); code != http.StatusOK || len(got) != 1 || got[0] != 999-i {
					t.Errorf("gate call %d on hot: %d, RateLimit %q; want 200 with r=%d", i+1, code, field, 999-i)
				}
			}
		})
	}
}
