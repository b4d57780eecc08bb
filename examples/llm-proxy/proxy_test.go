package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the instant the tests start their clocks at: 2026-01-01T00:00:00Z in epoch ms.
const t0 int64 = 1_767_225_600_000

// testLimits are small enough to exhaust in a few calls.
var testLimits = []modelLimits{{Name: "m", RPM: 5, TPM: 1000}}

// harness is a proxy over a memory store in front of an upstream, deciding at a clock the test
// moves.
type harness struct {
	t     *testing.T
	p     *Proxy
	url   string
	clock atomic.Int64
	logs  bytes.Buffer // what the proxy logged; written under logMu
	logMu sync.Mutex
}

func newHarness(t *testing.T, upstream http.Handler, limits ...modelLimits) *harness {
	t.Helper()
	if upstream == nil {
		upstream = (&fakeModel{}).Handler()
	}
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	return newHarnessURL(t, up.URL, limits...)
}

// newHarnessURL is newHarness in front of the upstream at url.
func newHarnessURL(t *testing.T, url string, limits ...modelLimits) *harness {
	t.Helper()
	if len(limits) == 0 {
		limits = testLimits
	}
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	h := &harness{t: t}
	p, err := newProxy(store, proxyConfig{
		Limits: limits, Burst: 1, Upstream: url, DefaultMax: 100, UpstreamKey: "upstream-secret",
		Logf: func(format string, args ...any) {
			h.logMu.Lock()
			defer h.logMu.Unlock()
			fmt.Fprintf(&h.logs, format+"\n", args...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Store(t0)
	p.now = h.clock.Load
	h.p = p
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// post sends body to the proxy's chat API with the given headers (name, value, …).
func (h *harness) post(body string, hdr ...string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// chat sends one user message to model "m" as key; maxTokens 0 leaves max_tokens out.
func (h *harness) chat(key, text string, maxTokens int64) *http.Response {
	h.t.Helper()
	return h.post(chatBody("m", text, maxTokens), "Authorization", "Bearer "+key)
}

func chatBody(model, text string, maxTokens int64) string {
	msg := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}}
	if maxTokens > 0 {
		msg["max_tokens"] = maxTokens
	}
	b, _ := json.Marshal(msg)
	return string(b)
}

// tokensLeft is what key has left of model m's tokens, at the clock.
func (h *harness) tokensLeft(key string) int64 {
	h.t.Helper()
	d, err := h.p.lim.Peek(sluice.WithNow(context.Background(), h.clock.Load()), "m", tenantKey(key))
	if err != nil || len(d.Parts) != 2 {
		h.t.Fatalf("Peek: %+v, %v", d, err)
	}
	return d.Parts[1].Remaining
}

func readProblem(t *testing.T, resp *http.Response) problem {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Status != resp.StatusCode || p.Type != "about:blank" || p.Title != http.StatusText(resp.StatusCode) {
		t.Errorf("problem %+v does not match status %d", p, resp.StatusCode)
	}
	return p
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		defaultMax int64
		want       int64
	}{
		{"prompt and max_tokens", `{"model":"m","messages":[{"role":"user","content":"one two three"}],"max_tokens":50}`, 100, 53},
		{"no max_tokens takes the default", `{"model":"m","messages":[{"role":"user","content":"one two three"}]}`, 100, 103},
		{"max_tokens null takes the default", `{"model":"m","messages":[{"role":"user","content":"one"}],"max_tokens":null}`, 7, 8},
		{"max_completion_tokens wins", `{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":50,"max_completion_tokens":9}`, 100, 10},
		{"every message counts", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi\tthere\n now"}],"max_tokens":1}`, 100, 6},
		{"text parts count, others do not", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look at"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"this"}]}],"max_tokens":1}`, 100, 4},
		{"null content is empty", `{"model":"m","messages":[{"role":"assistant","content":null},{"role":"user","content":"go"}],"max_tokens":2}`, 100, 3},
		{"empty prompt", `{"model":"m","messages":[{"role":"user","content":"  "}]}`, 5, 5},
		{"unicode spaces split words", `{"model":"m","messages":[{"role":"user","content":"a\u00a0b\u3000c"}],"max_tokens":1}`, 100, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _, err := parseChatRequest([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := req.estimate(tt.defaultMax); got != tt.want {
				t.Errorf("estimate = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseChatRequestRejects(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		``, `null`, `[]`, `"x"`, `{`,
		`{"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"","messages":[{"role":"user","content":"x"}]}`,
		`{"model":7,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m"}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":{}}`,
		`{"model":"m","messages":[{"role":"user","content":7}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":16777217}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":"10"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`,
	} {
		if req, _, err := parseChatRequest([]byte(body)); err == nil {
			t.Errorf("parseChatRequest(%s) = %+v, want an error", body, req)
		}
	}
}

// TestForwardedBodyIsWhatWasChecked: the upstream must not read another model or max_tokens than
// the proxy checked, whatever duplicates or case variants the client sends.
func TestForwardedBodyIsWhatWasChecked(t *testing.T) {
	t.Parallel()
	body := `{"model":"large","model":"small","Model":"huge","max_tokens":9000,"max_tokens":5,` +
		`"messages":[{"role":"user","content":"<b>&</b>"}],"temperature":0.5}`
	req, fwd, err := parseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "small" || req.MaxTokens != 5 {
		t.Fatalf("parsed %+v, want model small and max_tokens 5 (the last of each)", req)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(fwd, &top); err != nil {
		t.Fatal(err)
	}
	if string(top["model"]) != `"small"` || string(top["max_tokens"]) != "5" || string(top["temperature"]) != "0.5" {
		t.Errorf("forwarded %s", fwd)
	}
	if n := strings.Count(string(fwd), `"model"`); n != 1 {
		t.Errorf("forwarded %d model members: %s", n, fwd)
	}
	if !strings.Contains(string(fwd), `"<b>&</b>"`) {
		t.Errorf("forwarded %s: text escaped", fwd)
	}
	again, _, err := parseChatRequest(fwd)
	if err != nil || again.Model != req.Model || again.MaxTokens != req.MaxTokens || again.estimate(1) != req.estimate(1) {
		t.Errorf("the forwarded body reads as %+v, %v; want %+v", again, err, req)
	}
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want int64
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, 7, true},
		{`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`, 7, true},
		{`{"usage":{"total_tokens":0}}`, 0, true},
		{`{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":10}}`, 10, true}, // total is what is billed
		{`{"usage":{"prompt_tokens":3}}`, 0, false},
		{`{"usage":{"total_tokens":-1}}`, 0, false},
		{`{"usage":{"total_tokens":1099511627777}}`, 0, false},
		{`{"usage":{"total_tokens":1.5}}`, 0, false},
		{`{"usage":null}`, 0, false},
		{`{"choices":[]}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
	}
	for _, tt := range tests {
		if got, ok := parseUsage([]byte(tt.body)); got != tt.want || ok != tt.ok {
			t.Errorf("parseUsage(%s) = %d, %v; want %d, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCharge(t *testing.T) {
	t.Parallel()
	withUsage := []byte(`{"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	tests := []struct {
		name string
		a    answer
		want int64
	}{
		{"short answer: its usage", answer{status: 200, body: withUsage}, 30},
		{"long answer: its usage", answer{status: 200, body: []byte(`{"usage":{"total_tokens":900}}`)}, 900},
		{"no usage keeps the reservation", answer{status: 200, body: []byte(`{"choices":[]}`)}, 100},
		{"unreadable usage keeps the reservation", answer{status: 200, body: []byte(`{"usage":{"total_tokens":"x"}}`)}, 100},
		{"an answer cut short keeps the reservation", answer{status: 200, body: withUsage[:20], err: io.ErrUnexpectedEOF}, 100},
		{"an error answer costs nothing", answer{status: 500, body: withUsage}, 0},
		{"a rejected request costs nothing", answer{status: 400}, 0},
		{"no answer costs nothing", answer{err: errors.New("connection refused")}, 0},
	}
	for _, tt := range tests {
		if got := charge(tt.a, 100); got != tt.want {
			t.Errorf("%s: charge = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestSettle runs calls through the proxy and the fake model and checks what each left of the
// key's tokens (model m: 1000 tokens a minute, the default max 100).
func TestSettle(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // a port nothing answers on
	tests := []struct {
		name      string
		upstream  string // "" for the fake model
		text      string
		maxTokens int64
		status    int
		reserved  int64
		charged   int64
	}{
		{"short answer refunds", "", "please answer with 10 tokens", 500, 200, 505, 15},
		{"exact answer", "", "please answer with 500 tokens", 500, 200, 505, 505},
		{"answer capped by max_tokens", "", "please answer with 900 tokens", 50, 200, 55, 55},
		{"long answer debits", "", "please answer with 3000 tokens", 0, 200, 105, 3005},
		{"failed answer costs nothing", "", "please fail with status 503", 500, 503, 505, 0},
		{"rejected request costs nothing", "", "please fail with status 400", 500, 400, 505, 0},
		{"answer without usage keeps the reservation", "", "please answer without usage", 500, 200, 504, 504},
		{"unreachable upstream costs nothing", down.URL, "hello", 500, 502, 501, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			if tt.upstream != "" {
				h = newHarnessURL(t, tt.upstream)
			}
			resp := h.chat("k", tt.text, tt.maxTokens)
			if resp.StatusCode != tt.status {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if r, c := resp.Header.Get("X-Tokens-Reserved"), resp.Header.Get("X-Tokens-Charged"); r != fmt.Sprint(tt.reserved) || c != fmt.Sprint(tt.charged) {
				t.Fatalf("reserved %s, charged %s; want %d, %d", r, c, tt.reserved, tt.charged)
			}
			if resp.Header.Get("RateLimit") == "" || resp.Header.Get("Retry-After") != "" {
				t.Errorf("an admitted call's fields: RateLimit %q, Retry-After %q", resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
			}
			if left := max(1000-tt.charged, 0); h.tokensLeft("k") != left {
				t.Errorf("tokens left %d, want %d", h.tokensLeft("k"), left)
			}
			if tt.charged > 1000 {
				// In debt: a request of 1 token waits for the debt and that token to be refilled.
				resp := h.post(chatBody("m", "", 1), "X-Api-Key", "k")
				want := (tt.charged - 1000 + 1) * 60 // ms per token at 1000 a minute
				if p := readProblem(t, resp); resp.StatusCode != 429 || p.Limit != "tokens" || p.RetryAfterMs < want-1 || p.RetryAfterMs > want+1 {
					t.Errorf("after a debt: %d %+v, want 429 by tokens in %d ms", resp.StatusCode, p, want)
				}
			}
		})
	}
}

// Test429 checks the answer to a denial by each limit, and the fields of an admitted call.
func Test429(t *testing.T) {
	t.Parallel()
	t.Run("requests", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		for i := range 5 {
			resp := h.chat("k", "please answer with 1 tokens", 1)
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i+1, resp.StatusCode)
			}
			want := fmt.Sprintf(`"m#requests";r=%d;t=60, "m#tokens";r=%d;t=`, 4-i, 1000-6*(i+1))
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
				t.Errorf("request %d: RateLimit %q, want it to start %q", i+1, got, want)
			}
		}
		h.clock.Add(1500)
		resp := h.chat("k", "please answer with 1 tokens", 1)
		checkDenied(t, resp, "requests", 58_500, "59", `"m#requests";q=5;w=60, "m#tokens";q=1000;w=60`, `"m#requests";r=0;t=59, "m#tokens";r=`)
	})
	t.Run("tokens", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		if resp := h.chat("k", "please answer with 900 tokens", 900); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		// 905 spent, 95 left; 100 more need 5 tokens, which take 300 ms at 1000 a minute.
		resp := h.chat("k", "please answer with 95 tokens", 95)
		checkDenied(t, resp, "tokens", 300, "1", `"m#requests";q=5;w=60, "m#tokens";q=1000;w=60`, `"m#requests";r=4;t=60, "m#tokens";r=95;t=55`) // the denial spent nothing: 4 requests left
		h.clock.Add(300)
		if resp := h.chat("k", "please answer with 95 tokens", 95); resp.StatusCode != 200 {
			t.Errorf("after retryAfterMs: %s", resp.Status)
		}
	})
}

func checkDenied(t *testing.T, resp *http.Response, limit string, retryMs int64, retryAfter, policy, rateLimit string) {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	p := readProblem(t, resp)
	if p.Limit != limit || p.Model != "m" || p.RetryAfterMs != retryMs || !strings.Contains(p.Detail, limit+" per minute") {
		t.Errorf("problem %+v, want model m, limit %s, retryAfterMs %d", p, limit, retryMs)
	}
	for _, f := range []struct{ name, want string }{{"Retry-After", retryAfter}, {"RateLimit-Policy", policy}} {
		if got := resp.Header.Get(f.name); got != f.want {
			t.Errorf("%s %q, want %q", f.name, got, f.want)
		}
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, rateLimit) {
		t.Errorf("RateLimit %q, want it to start %q", got, rateLimit)
	}
	if resp.Header.Get("X-Tokens-Charged") != "" {
		t.Error("a denied request was charged")
	}
}

// TestRefusals: requests the proxy refuses before checking spend nothing and are not throttles.
func TestRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ok := chatBody("m", "hi", 10)
	tests := []struct {
		name   string
		body   string
		hdr    []string
		status int
	}{
		{"no key", ok, nil, 401},
		{"basic auth is no key", ok, []string{"Authorization", "Basic a2V5Og=="}, 401},
		{"empty bearer", ok, []string{"Authorization", "Bearer  "}, 401},
		{"not JSON", "model=m", []string{"X-Api-Key", "k"}, 400},
		{"no messages", `{"model":"m"}`, []string{"X-Api-Key", "k"}, 400},
		{"unknown model", chatBody("other", "hi", 10), []string{"X-Api-Key", "k"}, 404},
		{"stream", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{"X-Api-Key", "k"}, 400},
		{"more tokens than the bucket", chatBody("m", "hi", 1000), []string{"X-Api-Key", "k"}, 413},
		{"body too big", `{"model":"m","x":"` + strings.Repeat("a", maxRequestBody) + `"}`, []string{"X-Api-Key", "k"}, 413},
	}
	for _, tt := range tests {
		resp := h.post(tt.body, tt.hdr...)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
			continue
		}
		readProblem(t, resp)
		if resp.Header.Get("RateLimit") != "" || resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s: rate limit fields on a request never checked", tt.name)
		}
	}
	if st, _ := h.p.lim.Stats("m"); st != (sluice.Stats{}) || h.tokensLeft("k") != 1000 {
		t.Errorf("refusals were checked: %+v, %d tokens left", st, h.tokensLeft("k"))
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		hdr  []string
		want string
	}{
		{[]string{"Authorization", "Bearer sk-1"}, "sk-1"},
		{[]string{"Authorization", "bearer  sk-1 "}, "sk-1"},
		{[]string{"X-Api-Key", "sk-2"}, "sk-2"},
		{[]string{"Authorization", "Bearer sk-1", "X-Api-Key", "sk-2"}, "sk-1"},
		{[]string{"Authorization", "Basic eDp5", "X-Api-Key", "sk-2"}, "sk-2"},
		{[]string{"Authorization", "Bearer"}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for i := 0; i+1 < len(tt.hdr); i += 2 {
			r.Header.Set(tt.hdr[i], tt.hdr[i+1])
		}
		if got, ok := clientKey(r); got != tt.want || ok != (tt.want != "") {
			t.Errorf("clientKey(%q) = %q, %v; want %q", tt.hdr, got, ok, tt.want)
		}
	}
	if a, b := tenantKey("sk-1"), tenantKey("sk-2"); a == b || len(a) != 16 || strings.Contains(a, "sk-") {
		t.Errorf("tenantKey: %q, %q", a, b)
	}
}

// TestUpstreamSeesOnlyItsKey: the client's key stays with the proxy.
func TestUpstreamSeesOnlyItsKey(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	fake := (&fakeModel{}).Handler()
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("X-Api-Key"))
		fake.ServeHTTP(w, r)
	}))
	if resp := h.post(chatBody("m", "hi", 10), "Authorization", "Bearer client-secret", "X-Api-Key", "client-secret"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if got.Load() != "Bearer upstream-secret|" {
		t.Errorf("the upstream saw %q", got.Load())
	}
}

// TestConcurrent: checks racing at one instant admit exactly the budget, and the counts add up.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, modelLimits{Name: "m", RPM: 20, TPM: 100_000})
	var wg sync.WaitGroup
	var allowed, denied atomic.Int64
	for range 50 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(chatBody("m", "please answer with 3 tokens", 10)))
			req.Header.Set("X-Api-Key", "k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			switch resp.StatusCode {
			case 200:
				allowed.Add(1)
			case 429:
				denied.Add(1)
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 20 || denied.Load() != 30 {
		t.Fatalf("allowed %d, denied %d; want 20 and 30", allowed.Load(), denied.Load())
	}
	st := readStats(t, h.url)["m"]
	if st.Allowed != 20 || st.Throttled != 30 || st.ThrottledBy["requests"] != 30 || st.ThrottledBy["tokens"] != 0 ||
		st.TokensRefunded != 20*(15-8) || st.TokensDebited != 0 {
		t.Errorf("stats %+v", st)
	}
	if left := h.tokensLeft("k"); left != 100_000-20*8 {
		t.Errorf("tokens left %d, want %d", left, 100_000-20*8)
	}
}

func readStats(t *testing.T, url string) map[string]modelStats {
	t.Helper()
	resp, err := http.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Models map[string]modelStats }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Models
}

// downStore is a store that cannot decide.
type downStore struct{ sluice.Store }

func (downStore) Check(context.Context, int64, *sluice.Policy, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, fmt.Errorf("store: %w", sluice.ErrUnavailable)
}

// TestStoreUnavailable: the proxy fails closed, and nothing reaches the model.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	t.Cleanup(up.Close)
	p, err := newProxy(downStore{}, proxyConfig{Limits: testLimits, Burst: 1, Upstream: up.URL, DefaultMax: 10})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody("m", "hi", 5)))
	req.Header.Set("X-Api-Key", "k")
	p.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || calls.Load() != 0 {
		t.Errorf("status %d, Retry-After %q, %d upstream calls", rec.Code, rec.Header().Get("Retry-After"), calls.Load())
	}
}

func TestNewProxyRejects(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	defer store.Close()
	for _, cfg := range []proxyConfig{
		{Limits: testLimits, Burst: 1, DefaultMax: 0},
		{Limits: testLimits, Burst: 0, DefaultMax: 10},
		{Limits: nil, Burst: 1, DefaultMax: 10},
		{Limits: append(testLimits, testLimits...), Burst: 1, DefaultMax: 10},
		{Limits: []modelLimits{{Name: "bad name", RPM: 1, TPM: 1}}, Burst: 1, DefaultMax: 10},
		{Limits: testLimits, Burst: 0.0001, DefaultMax: 10}, // a bucket of 0 tokens
	} {
		if _, err := newProxy(store, cfg); err == nil || !strings.HasPrefix(err.Error(), "llm-proxy: ") {
			t.Errorf("newProxy(%+v) = %v, want an llm-proxy error", cfg, err)
		}
	}
}

func TestBurst(t *testing.T) {
	t.Parallel()
	pol, err := modelLimits{Name: "m", RPM: 3, TPM: 1000}.policy(2.5)
	if err != nil {
		t.Fatal(err)
	}
	if pol.MaxCost() != 2500 {
		t.Errorf("a burst of 2.5 × 1000 TPM holds %d tokens", pol.MaxCost())
	}
	if got := strconv.Quote(pol.Limits()[0].Name + "," + pol.Limits()[1].Name); got != `"requests,tokens"` {
		t.Errorf("limits named %s", got)
	}
}
