package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the instant requests are pinned at: 2023-11-14T22:13:20Z in epoch ms.
const t0 int64 = 1_700_000_000_000

func newLimiter(t testing.TB, policies ...*sluice.Policy) *sluice.Limiter {
	t.Helper()
	store := memory.New(memory.Config{Now: func() int64 { return t0 }, SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := sluice.New(store, policies...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

var (
	apiPolicy   = sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}})
	modelPolicy = sluice.MustPolicy("model",
		sluice.Limit{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}},
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 10}})
)

// ok counts the requests that reached it.
type ok struct{ n atomic.Int32 }

func (h *ok) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.n.Add(1)
	_, _ = w.Write([]byte("ok"))
}

// get serves one GET from addr at the pinned instant now.
func get(h http.Handler, addr string, now int64, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = addr
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	if now != 0 {
		r = r.WithContext(sluice.WithNow(r.Context(), now))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type wantResponse struct {
	status                        int
	rateLimit, policy, retryAfter string
	failMode                      string // Sluice-Fail-Mode
	problemRetryMs                int64  // checked on 429
	reachedHandler                bool
}

func checkResponse(t *testing.T, w *httptest.ResponseRecorder, want wantResponse) {
	t.Helper()
	if w.Code != want.status {
		t.Errorf("status %d, want %d (body %s)", w.Code, want.status, w.Body)
	}
	for _, f := range []struct{ name, want string }{
		{"RateLimit", want.rateLimit}, {"RateLimit-Policy", want.policy}, {"Retry-After", want.retryAfter},
		{"Sluice-Fail-Mode", want.failMode},
	} {
		if got := w.Header().Get(f.name); got != f.want {
			t.Errorf("%s: %q, want %q", f.name, got, f.want)
		}
	}
	if want.status != http.StatusTooManyRequests {
		return
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p middleware.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if p.Type != "about:blank" || p.Title != "Too Many Requests" || p.Status != 429 || p.Detail == "" || p.RetryAfterMs != want.problemRetryMs {
		t.Errorf("problem %+v, want about:blank, Too Many Requests, 429, a detail and retryAfterMs %d", p, want.problemRetryMs)
	}
}

func TestLimit(t *testing.T) {
	type req struct {
		now  int64
		cost int64
		want wantResponse
	}
	tests := []struct {
		name   string
		policy *sluice.Policy
		window time.Duration
		reqs   []req
	}{
		{"token bucket until denied and after", apiPolicy, 0, []req{
			{t0, 1, wantResponse{status: 200, rateLimit: `"api";r=1;t=1`, policy: `"api";q=2;w=2`, reachedHandler: true}},
			{t0, 1, wantResponse{status: 200, rateLimit: `"api";r=0;t=2`, policy: `"api";q=2;w=2`, reachedHandler: true}},
			{t0 + 400, 1, wantResponse{status: 429, rateLimit: `"api";r=0;t=2`, policy: `"api";q=2;w=2`, retryAfter: "1", problemRetryMs: 600}},
			{t0 + 1000, 1, wantResponse{status: 200, rateLimit: `"api";r=0;t=2`, policy: `"api";q=2;w=2`, reachedHandler: true}},
		}},
		{"explicit window", apiPolicy, 90 * time.Second, []req{
			{t0, 1, wantResponse{status: 200, rateLimit: `"api";r=1;t=1`, policy: `"api";q=2;w=90`, reachedHandler: true}},
		}},
		{"composite lists every limit", modelPolicy, 0, []req{
			// requests: 1 left of 2 in 60 s; tokens: 100 left of 1000, full in 100 s.
			{t0, 900, wantResponse{status: 200, rateLimit: `"model#requests";r=1;t=61, "model#tokens";r=100;t=90`,
				policy: `"model#requests";q=2;w=60, "model#tokens";q=1000;w=100`, reachedHandler: true}},
			// 200 tokens are 100 short: the token bucket denies for 10 s. The denial spent nothing:
			// the request limit still has its 1.
			{t0, 200, wantResponse{status: 429, rateLimit: `"model#requests";r=1;t=61, "model#tokens";r=100;t=90`,
				policy: `"model#requests";q=2;w=60, "model#tokens";q=1000;w=100`, retryAfter: "10", problemRetryMs: 10_000}},
		}},
		{"explicit window: the binding part alone", modelPolicy, 30 * time.Second, []req{
			{t0, 900, wantResponse{status: 200, rateLimit: `"model";r=1;t=61`, policy: `"model";q=2;w=30`, reachedHandler: true}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter(t, tt.policy)
			next := &ok{}
			var cost atomic.Int64
			h := middleware.Limit(next, middleware.Options{
				Checker: lim, Policy: tt.policy.Name(), Window: tt.window,
				Cost: func(*http.Request) int64 { return cost.Load() },
			})
			for i, r := range tt.reqs {
				cost.Store(r.cost)
				before := next.n.Load()
				w := get(h, "192.0.2.1:4711", r.now)
				t.Run(fmt.Sprint("request ", i), func(t *testing.T) { checkResponse(t, w, r.want) })
				if reached := next.n.Load() > before; reached != r.want.reachedHandler {
					t.Errorf("request %d reached the handler: %v, want %v", i, reached, r.want.reachedHandler)
				}
			}
		})
	}
}

// TestLimitConcurrent: 20 concurrent requests against a key with 95 of 100 used admit exactly 5.
func TestLimitConcurrent(t *testing.T) {
	lim := newLimiter(t, sluice.MustPolicy("partner-api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}}))
	ctx := sluice.WithNow(context.Background(), t0)
	if _, err := lim.Check(ctx, "partner-api", "acme", 95); err != nil {
		t.Fatal(err)
	}
	next := &ok{}
	h := middleware.Limit(next, middleware.Options{Checker: lim, Policy: "partner-api", Key: middleware.KeyByHeader("X-Partner")})
	var wg sync.WaitGroup
	var denied atomic.Int32
	for range 20 {
		wg.Go(func() {
			if w := get(h, "192.0.2.1:1", t0, "X-Partner", "acme"); w.Code == http.StatusTooManyRequests {
				denied.Add(1)
			}
		})
	}
	wg.Wait()
	if next.n.Load() != 5 || denied.Load() != 15 {
		t.Fatalf("admitted %d and denied %d, want 5 and 15", next.n.Load(), denied.Load())
	}
}

// stub answers every check with err.
type stub struct{ err error }

func (s stub) Check(context.Context, string, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, s.err
}

func TestOnError(t *testing.T) {
	lim := newLimiter(t, apiPolicy)
	tests := []struct {
		name       string
		opts       middleware.Options
		header     []string
		wantStatus int
		wantRetry  string
		wantMode   string // Sluice-Fail-Mode
	}{
		{"unknown policy", middleware.Options{Checker: lim, Policy: "nope"}, nil, 500, "", ""},
		{"bad cost", middleware.Options{Checker: lim, Policy: "api", Cost: func(*http.Request) int64 { return 0 }}, nil, 500, "", ""},
		{"cost above the ceiling", middleware.Options{Checker: lim, Policy: "api", Cost: func(*http.Request) int64 { return 3 }}, nil, 500, "", ""},
		{"unavailable", middleware.Options{Checker: stub{fmt.Errorf("store: %w", sluice.ErrUnavailable)}, Policy: "api"}, nil, 503, "1", "closed"},
		{"anything else", middleware.Options{Checker: stub{errors.New("boom")}, Policy: "api"}, nil, 500, "", ""},
		{"no key header", middleware.Options{Checker: lim, Policy: "api", Key: middleware.KeyByHeader("X-Api-Key")}, nil, 400, "", ""},
		{"custom", middleware.Options{Checker: stub{sluice.ErrUnavailable}, Policy: "api", OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusTeapot)
		}}, nil, http.StatusTeapot, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &ok{}
			w := get(middleware.Limit(next, tt.opts), "192.0.2.1:1", t0, tt.header...)
			if w.Code != tt.wantStatus || w.Header().Get("Retry-After") != tt.wantRetry || w.Header().Get("Sluice-Fail-Mode") != tt.wantMode {
				t.Errorf("status %d, Retry-After %q, Sluice-Fail-Mode %q; want %d, %q, %q", w.Code, w.Header().Get("Retry-After"),
					w.Header().Get("Sluice-Fail-Mode"), tt.wantStatus, tt.wantRetry, tt.wantMode)
			}
			if next.n.Load() != 0 {
				t.Error("the request reached the handler")
			}
			if w.Header().Get("RateLimit") != "" {
				t.Error("RateLimit set without a decision")
			}
			if tt.opts.OnError == nil {
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type %q, want application/problem+json", ct)
				}
				if strings.Contains(w.Body.String(), "boom") || strings.Contains(w.Body.String(), "store:") {
					t.Errorf("body %s tells the error's text", w.Body)
				}
			}
		})
	}
}

// failOpen answers every check as a sluice server does when its store cannot answer and the policy
// fails open; it knows the policy's shape, as a Limiter does.
type failOpen struct{}

func (failOpen) Check(context.Context, string, string, int64) (sluice.Decision, error) {
	return sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}, nil
}

func (failOpen) Policy(name string) (*sluice.Policy, bool) { return apiPolicy, name == "api" }

// TestFailOpenDecision checks that a decision no limit was consulted for lets the request through,
// says so, and claims no limit, whatever the middleware knows of the policy.
func TestFailOpenDecision(t *testing.T) {
	tests := []struct {
		name string
		opts middleware.Options
	}{
		{"policy known", middleware.Options{Checker: failOpen{}, Policy: "api"}},
		{"window given", middleware.Options{Checker: failOpen{}, Policy: "api", Window: time.Minute}},
		{"policy unknown", middleware.Options{Checker: failOpen{}, Policy: "other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &ok{}
			w := get(middleware.Limit(next, tt.opts), "192.0.2.1:1", t0)
			checkResponse(t, w, wantResponse{status: 200, failMode: "open"})
			if next.n.Load() != 1 {
				t.Error("the request did not reach the handler")
			}
		})
	}
}

func TestLimitPanicsWithoutCheckerOrPolicy(t *testing.T) {
	tests := []struct {
		name string
		opts middleware.Options
	}{
		{"no checker", middleware.Options{Policy: "api"}},
		{"no policy", middleware.Options{Checker: stub{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			middleware.Limit(&ok{}, tt.opts)
		})
	}
}

// checkServer serves /v1/check of the HTTP JSON API over lim, enough for the client.
func checkServer(t *testing.T, lim *sluice.Limiter) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Policy, Key string
			Cost        int64
			Now         int64
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		if req.Now != 0 {
			ctx = sluice.WithNow(ctx, req.Now)
		}
		d, err := lim.Check(ctx, req.Policy, req.Key, req.Cost)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error(), "code": "invalid_argument"})
			return
		}
		_ = json.NewEncoder(w).Encode(d)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestWithClient puts the middleware in front of a sluice server, through the client.
func TestWithClient(t *testing.T) {
	srv := checkServer(t, newLimiter(t, apiPolicy))
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	tests := []struct {
		name     string
		url      string
		failOpen bool
		window   time.Duration
		want     []wantResponse
	}{
		{"decisions, no window known", srv.URL, false, 0, []wantResponse{
			{status: 200, rateLimit: `"api";r=1;t=1`, policy: `"api";q=2`},
			{status: 200, rateLimit: `"api";r=0;t=2`, policy: `"api";q=2`},
			{status: 429, rateLimit: `"api";r=0;t=2`, policy: `"api";q=2`, retryAfter: "1", problemRetryMs: 1000},
		}},
		{"service down, fail closed", down.URL, false, time.Minute, []wantResponse{{status: 503, retryAfter: "1", failMode: "closed"}}},
		{"service down, fail open", down.URL, true, time.Minute, []wantResponse{{status: 200, failMode: "open"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(tt.url, client.Options{FailOpen: tt.failOpen})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h := middleware.Limit(&ok{}, middleware.Options{Checker: c, Policy: "api", Window: tt.window})
			for i, want := range tt.want {
				w := get(h, "192.0.2.1:1", t0)
				t.Run(fmt.Sprint("request ", i), func(t *testing.T) { checkResponse(t, w, want) })
			}
		})
	}
}

// TestSetHeaders checks what SetHeaders adds to header.SetItems; package header tests the format.
func TestSetHeaders(t *testing.T) {
	now := time.UnixMilli(t0)
	tests := []struct {
		name                                string
		window                              time.Duration
		d                                   sluice.Decision
		wantRateLimit, wantPolicy, wantWait string
	}{
		{"allowed", time.Minute, sluice.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAt: t0 + 1, DeniedBy: -1},
			`"api";r=7;t=1`, `"api";q=10;w=60`, ""},
		{"no window", 0, sluice.Decision{Allowed: true, Limit: 10, Remaining: 10, ResetAt: t0, DeniedBy: -1},
			`"api";r=10;t=0`, `"api";q=10`, ""},
		{"denied", 0, sluice.Decision{Limit: 10, ResetAt: t0 + 9000, RetryAfterMs: 1500}, `"api";r=0;t=9`, `"api";q=10`, "2"},
		{"no limit known", time.Minute, sluice.Decision{Allowed: true, DeniedBy: -1}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			middleware.SetHeaders(h, "api", tt.window, tt.d, now)
			if h.Get("RateLimit") != tt.wantRateLimit || h.Get("RateLimit-Policy") != tt.wantPolicy || h.Get("Retry-After") != tt.wantWait {
				t.Errorf("RateLimit %q, RateLimit-Policy %q, Retry-After %q; want %q, %q, %q",
					h.Get("RateLimit"), h.Get("RateLimit-Policy"), h.Get("Retry-After"), tt.wantRateLimit, tt.wantPolicy, tt.wantWait)
			}
		})
	}
}

// TestWindowOf checks which limit WindowOf picks; package header tests the windows.
func TestWindowOf(t *testing.T) {
	tests := []struct {
		name string
		p    *sluice.Policy
		d    sluice.Decision
		want time.Duration
	}{
		{"single limit", apiPolicy, sluice.Decision{Allowed: true, DeniedBy: -1}, 2 * time.Second},
		{"composite, denied", modelPolicy, sluice.Decision{DeniedBy: 1, Parts: []sluice.Decision{{Remaining: 0}, {Remaining: 5}}}, 100 * time.Second},
		{"composite, least remaining", modelPolicy, sluice.Decision{Allowed: true, DeniedBy: -1, Parts: []sluice.Decision{{Remaining: 1}, {Remaining: 5}}}, time.Minute},
		{"composite without parts", modelPolicy, sluice.Decision{Allowed: true, DeniedBy: -1}, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := middleware.WindowOf(tt.p, tt.d); got != tt.want {
				t.Errorf("WindowOf: %v, want %v", got, tt.want)
			}
		})
	}
}
