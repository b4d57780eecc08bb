package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/console"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/server/topkeys"
	"github.com/sluicehq/sluice/store/memory"
)

const policies = `
policies:
  api:
    plans:
      free: {strategy: fixedWindow, limit: 3, window: 1h}
      pro: {strategy: fixedWindow, limit: 100, window: 1h}
    plan: free
    failMode: closed
  other: {strategy: gcra, limit: 10, period: 1m, burst: 5}
`

const checkToken, adminToken = "check-token-0123456789", "admin-token-0123456789"

type fixture struct {
	url  string
	srv  *server.Server
	keys *topkeys.Tracker
}

// newFixture serves the HTTP API with the console over the memory store; tokens says whether
// the server asks for them; topKeys whether the tracker runs.
func newFixture(t *testing.T, tokens, topKeys bool, maxFeeds int) *fixture {
	t.Helper()
	cfg, err := config.Parse([]byte(policies))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	f := &fixture{}
	opts := server.Options{Local: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if topKeys {
		if f.keys, err = topkeys.New(topkeys.Config{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.keys.Close)
		opts.Keys = f.keys
	}
	if f.srv, err = server.New(cfg, store, opts); err != nil {
		t.Fatal(err)
	}
	ui, err := console.New(console.Config{Server: f.srv, Keys: f.keys, Store: "memory", MaxFeeds: maxFeeds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ui.Close)
	ho := httpapi.Options{Console: ui}
	if tokens {
		set, err := bearer.Parse([]byte("check:" + checkToken + "\nadmin:" + adminToken + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		ho.Tokens = bearer.NewLive(set)
	}
	hs := httptest.NewServer(httpapi.New(f.srv, ho))
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

// get asks path with token ("" for none) and decodes a JSON answer into out, if not nil.
func (f *fixture) get(t *testing.T, path, token string, out any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", f.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp
}

func TestSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens bool
		token  string
		status int
		want   string
	}{
		{"no tokens asked", false, "", 200, `{"auth":false,"scope":"admin"}`},
		{"check token", true, checkToken, 200, `{"auth":true,"scope":"check"}`},
		{"admin token", true, adminToken, 200, `{"auth":true,"scope":"admin"}`},
		{"no token", true, "", 401, ""},
		{"wrong token", true, "nope", 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.tokens, true, 0)
			var body json.RawMessage
			resp := f.get(t, "/v1/console/session", tc.token, &body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 && strings.TrimSpace(string(body)) != tc.want {
				t.Errorf("body %s, want %s", body, tc.want)
			}
		})
	}
}

func TestTokenNeverInURL(t *testing.T) {
	f := newFixture(t, true, true, 0)
	for _, q := range []string{"?access_token=" + adminToken, "?token=" + adminToken, "?authorization=Bearer+" + adminToken} {
		if resp := f.get(t, "/v1/console/session"+q, "", nil); resp.StatusCode != 401 {
			t.Errorf("token in the query %s: %d, want 401", q, resp.StatusCode)
		}
	}
}

func TestPolicies(t *testing.T) {
	f := newFixture(t, false, true, 0)
	if err := f.srv.Overrides().Set(context.Background(), overrides.Override{Policy: "api", Key: "vip", Plan: "pro", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Policies []struct {
			Name      string           `json:"name"`
			Limits    []map[string]any `json:"limits"`
			FailMode  string           `json:"failMode"`
			Plans     []string         `json:"plans"`
			Overrides int              `json:"overrides"`
		} `json:"policies"`
		Store   map[string]any `json:"store"`
		TopKeys bool           `json:"topKeys"`
	}
	f.get(t, "/v1/console/policies", "", &got)
	if len(got.Policies) != 2 || got.Policies[0].Name != "api" || got.Policies[1].Name != "other" {
		t.Fatalf("policies %+v, want api and other in order", got.Policies)
	}
	api := got.Policies[0]
	if api.FailMode != "closed" || len(api.Plans) != 2 || api.Plans[1] != "pro" || api.Overrides != 1 ||
		api.Limits[0]["strategy"] != "fixedWindow" || api.Limits[0]["limit"] != 3.0 || api.Limits[0]["windowMs"] != 3.6e6 {
		t.Errorf("api %+v", api)
	}
	if got.Store["kind"] != "memory" || got.Store["ready"] != true || !got.TopKeys {
		t.Errorf("store %v topKeys %v", got.Store, got.TopKeys)
	}
}

func TestTop(t *testing.T) {
	f := newFixture(t, true, true, 0)
	ctx := context.Background()
	for range 10 {
		_, _ = f.srv.Check(ctx, 0, "api", "hot", 1)
	}
	_, _ = f.srv.Check(ctx, 0, "api", "cold", 1)
	_, _ = f.srv.Check(ctx, 0, "other", "k", 1)
	type list struct {
		Total      int64 `json:"total"`
		ErrorBound int64 `json:"errorBound"`
		Keys       []struct {
			Key   string `json:"key"`
			Count int64  `json:"count"`
		} `json:"keys"`
	}
	var got struct {
		Window   string `json:"window"`
		Policies []struct {
			Policy  string `json:"policy"`
			Checked list   `json:"checked"`
			Denied  list   `json:"denied"`
		} `json:"policies"`
	}
	f.get(t, "/v1/console/top?window=1m&limit=5", checkToken, &got)
	if got.Window != "1m" || len(got.Policies) != 2 || got.Policies[0].Policy != "api" {
		t.Fatalf("top %+v: want api first, by denials", got)
	}
	api := got.Policies[0]
	if api.Checked.Total != 11 || api.Denied.Total != 7 || api.Checked.Keys[0].Key != "hot" || api.Checked.Keys[0].Count != 10 ||
		len(api.Denied.Keys) != 1 || api.Denied.Keys[0].Key != "hot" || api.Denied.Keys[0].Count != 7 {
		t.Errorf("api %+v", api)
	}
	f.get(t, "/v1/console/top?window=1h&policy=other", checkToken, &got)
	if got.Window != "1h" || len(got.Policies) != 1 || got.Policies[0].Checked.Total != 1 {
		t.Errorf("one policy over the hour: %+v", got)
	}
	// Keys are the console's alone: /metrics never names one.
	var metrics strings.Builder
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	if strings.Contains(metrics.String(), "hot") || strings.Contains(metrics.String(), "cold") {
		t.Error("/metrics names a key")
	}
}

func TestTopBadInput(t *testing.T) {
	f := newFixture(t, true, true, 0)
	off := newFixture(t, true, false, 0)
	for _, tc := range []struct {
		name, query string
		off         bool
		status      int
		code, names string
	}{
		{"bad window", "window=5m", false, 400, "invalid_argument", "window"},
		{"limit zero", "limit=0", false, 400, "invalid_argument", "limit"},
		{"limit too high", "limit=101", false, 400, "invalid_argument", "limit"},
		{"limit not a number", "limit=ten", false, 400, "invalid_argument", "limit"},
		{"limit overflow", "limit=99999999999999999999999", false, 400, "invalid_argument", "limit"},
		{"unknown parameter", "windw=1m", false, 400, "invalid_argument", `"windw"`},
		{"parameter twice", "window=1m&window=1h", false, 400, "invalid_argument", "window"},
		{"bad escape", "window=%zz", false, 400, "invalid_argument", "query string"},
		{"unknown policy", "policy=nope", false, 404, "not_found", "nope"},
		{"huge policy name", "policy=" + strings.Repeat("x", 100_000), false, 404, "not_found", "policy"},
		{"top keys off", "window=1m", true, 501, "unimplemented", "topKeys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := f
			if tc.off {
				fx = off
			}
			var body struct{ Error, Code string }
			resp := fx.get(t, "/v1/console/top?"+tc.query, checkToken, &body)
			if resp.StatusCode != tc.status || body.Code != tc.code || !strings.Contains(body.Error, tc.names) {
				t.Errorf("%d %+v, want %d %s naming %s", resp.StatusCode, body, tc.status, tc.code, tc.names)
			}
			if len(body.Error) > 300 {
				t.Errorf("the error echoes %d bytes of input", len(body.Error))
			}
		})
	}
}

// readEvent reads one server-sent event.
func readEvent(t *testing.T, r *bufio.Reader) (name string, data []byte) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the feed: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = []byte(line[len("data: "):])
		}
	}
}

func openFeed(t *testing.T, f *fixture, token string) (*http.Response, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/v1/console/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// TestFeed follows the live feed: the history first, then every decision counted once in the
// ticks that follow.
func TestFeed(t *testing.T) {
	f := newFixture(t, true, true, 0)
	resp, r := openFeed(t, f, checkToken)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	if name, data := readEvent(t, r); name != "history" || !json.Valid(data) {
		t.Fatalf("first event %s %s, want the history", name, data)
	}
	ctx := context.Background()
	for range 5 {
		_, _ = f.srv.Check(ctx, 0, "api", "k", 1) // 3 allowed, 2 denied
	}
	var allowed, denied uint64
	deadline := time.Now().Add(10 * time.Second)
	for allowed+denied < 5 && time.Now().Before(deadline) {
		name, data := readEvent(t, r)
		var tick struct {
			T        int64 `json:"t"`
			Ready    bool  `json:"ready"`
			Policies map[string]struct {
				Allowed uint64 `json:"allowed"`
				Denied  uint64 `json:"denied"`
			} `json:"policies"`
		}
		if err := json.Unmarshal(data, &tick); name != "tick" || err != nil || !tick.Ready || tick.T == 0 {
			t.Fatalf("event %s %s: %v", name, data, err)
		}
		allowed += tick.Policies["api"].Allowed
		denied += tick.Policies["api"].Denied
	}
	if allowed != 3 || denied != 2 {
		t.Errorf("the ticks counted %d allowed, %d denied; want 3 and 2", allowed, denied)
	}
}

func TestFeedCap(t *testing.T) {
	f := newFixture(t, true, true, 2)
	for range 2 {
		if resp, r := openFeed(t, f, checkToken); resp.StatusCode != 200 {
			t.Fatalf("feed: %d", resp.StatusCode)
		} else {
			readEvent(t, r)
		}
	}
	var body struct{ Code string }
	resp := f.get(t, "/v1/console/events", checkToken, &body)
	if resp.StatusCode != 503 || body.Code != "unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a third feed: %d %+v, want 503 with Retry-After", resp.StatusCode, body)
	}
}

func TestAssets(t *testing.T) {
	f := newFixture(t, true, true, 0)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name, method, path string
		status             int
		ctype              string
	}{
		{"the page, without a token", "GET", "/ui/", 200, "text/html"},
		{"a script", "GET", "/ui/app.js", 200, "javascript"},
		{"head", "HEAD", "/ui/", 200, "text/html"},
		{"without the slash", "GET", "/ui", 301, ""},
		{"no listing", "GET", "/ui/pages/", 404, "application/json"},
		{"missing file", "GET", "/ui/nope.js", 404, ""},
		{"no climbing out: cleaned to a path outside", "GET", "/ui/../console.go", 307, ""},
		{"no posting", "POST", "/ui/", 405, "application/json"},
		{"no preflight", "OPTIONS", "/v1/console/top", 401, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.url+tc.path, nil)
			req.Header.Set("Origin", "https://evil.example")
			req.Header.Set("Access-Control-Request-Method", "GET")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.ctype)
			}
			if h := resp.Header.Get("Access-Control-Allow-Origin"); h != "" {
				t.Errorf("Access-Control-Allow-Origin: %s", h)
			}
			if strings.HasPrefix(tc.path, "/ui") && tc.status < 300 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP: %q", resp.Header.Get("Content-Security-Policy"))
			}
		})
	}
}
