package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the instant the fake's store clock is pinned at: 2023-11-14T22:13:20Z in epoch ms.
const t0 int64 = 1_700_000_000_000

// policies are what the fake serves: a small token bucket, the login pair and the
// per-model composite.
func policies() []*sluice.Policy {
	return []*sluice.Policy{
		sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 1}}),
		sluice.MustPolicy("login-ip", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 50, WindowMs: 15 * 60_000}}),
		sluice.MustPolicy("login-account", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 5, WindowMs: 15 * 60_000}}),
		sluice.MustPolicy("model:gpt",
			sluice.Limit{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}},
			sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}}),
	}
}

// newLimiter is a Limiter over a memory store whose clock stands still at t0.
func newLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	lim, store := frozenLimiter()
	t.Cleanup(func() { store.Close() })
	return lim
}

func frozenLimiter() (*sluice.Limiter, *memory.Store) {
	store := memory.New(memory.Config{Now: func() int64 { return t0 }, SweepInterval: -1})
	lim, err := sluice.New(store, policies()...)
	if err != nil {
		panic(err) // the policies are distinct and valid
	}
	return lim, store
}

// fake is a stand-in for sluice serve --allow-client-time: the HTTP JSON API's routes over a real
// Limiter, strict about the fields it accepts, with knobs to fail on purpose.
type fake struct {
	lim   *sluice.Limiter
	token string // required bearer token, if set

	mu      sync.Mutex
	status  int               // answer every call with this status (and code) when set
	raw     string            // ... and this body instead of the API's, when set
	hang    bool              // block every call until the client gives up
	release chan struct{}     // closed when the test ends, to free calls still hanging
	auth    []string          // Authorization headers seen
	nows    map[string]*int64 // the "now" of the last call per route, nil when absent
	calls   int
}

type fakeRequest struct {
	Policy string        `json:"policy"`
	Key    string        `json:"key"`
	Keys   []string      `json:"keys"`
	Cost   *int64        `json:"cost"`
	Items  []sluice.Item `json:"items"`
	Now    *int64        `json:"now"`
	// Settle's
	Reserved int64 `json:"reserved"`
	Actual   int64 `json:"actual"`
}

func (f *fake) fail(status int, raw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.raw = status, raw
}

func (f *fake) lastNow(route string) (now int64, sent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.nows[route]; p != nil {
		return *p, true
	}
	return 0, false
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls++
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	status, raw, hang := f.status, f.raw, f.hang
	f.mu.Unlock()

	if hang {
		// The server watches for the client going away only once the body has been read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	}
	if status != 0 {
		if raw != "" {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(raw))
			return
		}
		code := map[int]string{400: "invalid_argument", 401: "unauthorized", 404: "not_found", 501: "unimplemented", 503: "unavailable"}[status]
		if code == "" {
			code = "internal"
		}
		writeJSON(w, status, map[string]string{"error": "fake: failing on purpose", "code": code})
		return
	}
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "bad or missing bearer token", "code": "unauthorized"})
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want a POST of application/json", "code": "invalid_argument"})
		return
	}
	body, _ := io.ReadAll(r.Body)
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "httpapi: body: " + err.Error(), "code": "invalid_argument"})
		return
	}
	// Like the API, exactly the route's members, the required ones present and none null.
	fields, known := routeFields[r.URL.Path]
	if !known {
		http.NotFound(w, r)
		return
	}
	for name, raw := range members {
		if _, ok := fields[name]; !ok || string(raw) == "null" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("httpapi: unknown or null field %q", name), "code": "invalid_argument"})
			return
		}
	}
	for name, required := range fields {
		if _, ok := members[name]; required && !ok {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "httpapi: " + name + ": is missing", "code": "invalid_argument"})
			return
		}
	}
	var req fakeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "httpapi: body: " + err.Error(), "code": "invalid_argument"})
		return
	}
	f.mu.Lock()
	if f.nows == nil {
		f.nows = map[string]*int64{}
	}
	f.nows[r.URL.Path] = req.Now
	f.mu.Unlock()

	ctx := r.Context()
	if req.Now != nil {
		ctx = sluice.WithNow(ctx, *req.Now)
	}
	cost := int64(1) // the API's default
	if req.Cost != nil {
		cost = *req.Cost
	}
	var (
		out any
		err error
	)
	switch r.URL.Path {
	case "/v1/check":
		var d sluice.Decision
		d, err = f.lim.Check(ctx, req.Policy, req.Key, cost)
		out = wire(d)
	case "/v1/check-many":
		var ds []sluice.Decision
		ds, err = f.lim.CheckMany(ctx, req.Policy, req.Keys, cost)
		out = map[string]any{"decisions": wireAll(ds)}
	case "/v1/check-all":
		var d sluice.Decision
		d, err = f.lim.CheckAll(ctx, req.Items...)
		out = map[string]any{"allowed": d.Allowed, "deniedBy": d.DeniedBy, "decisions": wireAll(d.Parts)}
	case "/v1/peek":
		var d sluice.Decision
		d, err = f.lim.Peek(ctx, req.Policy, req.Key)
		out = wire(d)
	case "/v1/forecast":
		out, err = f.lim.Forecast(ctx, req.Policy, req.Key, cost)
	case "/v1/refund":
		err = f.lim.Refund(ctx, req.Policy, req.Key, cost)
		out = struct{}{}
	case "/v1/settle":
		err = f.lim.Settle(ctx, req.Policy, req.Key, req.Reserved, req.Actual)
		out = struct{}{}
	case "/v1/reset":
		err = f.lim.Reset(ctx, req.Policy, req.Key)
		out = struct{}{}
	default:
		http.NotFound(w, r)
		return
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, out)
	case errors.Is(err, sluice.ErrInvalid):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "code": "invalid_argument"})
	case errors.Is(err, sluice.ErrUnknownPolicy):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error(), "code": "not_found"})
	case errors.Is(err, sluice.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "code": "unavailable"})
	default:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error(), "code": "internal"})
	}
}

// routeFields are the members each route takes, and whether each is required.
var routeFields = map[string]map[string]bool{
	"/v1/check":      {"policy": true, "key": true, "cost": false, "now": false},
	"/v1/check-many": {"policy": true, "keys": true, "cost": false, "now": false},
	"/v1/check-all":  {"items": true, "now": false},
	"/v1/peek":       {"policy": true, "key": true, "now": false},
	"/v1/forecast":   {"policy": true, "key": true, "cost": false, "now": false},
	"/v1/refund":     {"policy": true, "key": true, "cost": false, "now": false},
	"/v1/settle":     {"policy": true, "key": true, "reserved": true, "actual": true, "now": false},
	"/v1/reset":      {"policy": true, "key": true},
}

// wire is a decision as the API writes it: deniedBy and parts only for a decision with parts.
func wire(d sluice.Decision) map[string]any {
	out := map[string]any{"allowed": d.Allowed, "limit": d.Limit, "remaining": d.Remaining, "resetAt": d.ResetAt, "retryAfterMs": d.RetryAfterMs}
	if len(d.Parts) > 0 {
		out["deniedBy"] = d.DeniedBy
		out["parts"] = wireAll(d.Parts)
	}
	return out
}

func wireAll(ds []sluice.Decision) []map[string]any {
	out := make([]map[string]any, len(ds))
	for i, d := range ds {
		out[i] = wire(d)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// startFake serves a fresh fake and closes it when the test ends.
func startFake(t testing.TB, token string) (*fake, *httptest.Server) {
	t.Helper()
	f := &fake{lim: newLimiter(t), token: token, release: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs first
	return f, srv
}
