package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the instant every replay starts at (epoch ms), on a minute boundary so that fixed windows
// start with it.
const t0 = 1_700_000_040_000

// testConfig holds the policies of the scenarios below.
const testConfig = `
policies:
  partner-api: {strategy: tokenBucket, capacity: 100, refillPerSec: 1.6666666666666667}
  fixed: {strategy: fixedWindow, limit: 100, window: 1m}
  gcra: {strategy: gcra, limit: 10, periodMs: 1000, burst: 5}
  login-ip: {strategy: tokenBucket, capacity: 50, refillPerSec: 0.05555555555555555}
  login-account: {strategy: tokenBucket, capacity: 5, refillPerSec: 0.005555555555555556}
  gpt-4o:
    limits:
      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}
      - {name: tokens, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}
`

type env struct {
	t   *testing.T
	url string
}

type setup struct {
	config          string
	allowClientTime bool
	store           sluice.Store // nil: a fresh memory store
	opts            httpapi.Options
}

func start(t *testing.T, s setup) *env {
	t.Helper()
	if s.config == "" {
		s.config = testConfig
	}
	cfg, err := config.Parse([]byte(s.config))
	if err != nil {
		t.Fatal(err)
	}
	if s.store == nil {
		mem := memory.New(memory.Config{SweepInterval: -1})
		t.Cleanup(func() { mem.Close() })
		s.store = mem
	}
	srv, err := server.New(cfg, s.store, server.Options{
		AllowClientTime: s.allowClientTime,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpapi.New(srv, s.opts))
	t.Cleanup(ts.Close)
	return &env{t: t, url: ts.URL}
}

// replay starts the scenario server: client time allowed.
func replay(t *testing.T) *env {
	t.Helper()
	return start(t, setup{allowClientTime: true})
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; header holds name, value pairs.
func (e *env) do(method, path, body string, header ...string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json") // unless header says otherwise
	}
	for i := 0; i+1 < len(header); i += 2 {
		switch {
		case strings.EqualFold(header[i], "Host"):
			req.Host = header[i+1]
			continue
		case strings.EqualFold(header[i], "Content-Type"):
			req.Header.Del(header[i])
		}
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, data}
}

func (e *env) post(path, body string) reply {
	e.t.Helper()
	return e.do("POST", path, body)
}

// decision is a decision as the wire has it; absent fields stay nil.
type decision struct {
	Allowed      bool       `json:"allowed"`
	Limit        int64      `json:"limit"`
	Remaining    int64      `json:"remaining"`
	ResetAt      int64      `json:"resetAt"`
	RetryAfterMs int64      `json:"retryAfterMs"`
	DeniedBy     *int       `json:"deniedBy"`
	Parts        []decision `json:"parts"`
}

// check posts to /v1/check and decodes the decision, failing on any status but 200.
func (e *env) check(policy, key string, cost, now int64) decision {
	e.t.Helper()
	r := e.post("/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q,"cost":%d,"now":%d}`, policy, key, cost, now))
	if r.status != http.StatusOK {
		e.t.Fatalf("check %s/%s: %d %s", policy, key, r.status, r.body)
	}
	var d decision
	decode(e.t, r.body, &d)
	return d
}

func (e *env) peek(policy, key string, now int64) decision {
	e.t.Helper()
	r := e.post("/v1/peek", fmt.Sprintf(`{"policy":%q,"key":%q,"now":%d}`, policy, key, now))
	if r.status != http.StatusOK {
		e.t.Fatalf("peek %s/%s: %d %s", policy, key, r.status, r.body)
	}
	var d decision
	decode(e.t, r.body, &d)
	return d
}

func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
}

// sameJSON reports whether a and b hold equal JSON values.
func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("body\n got %s\nwant %s", bytes.TrimSpace(got), want)
	}
}

// wantError checks an error answer's status, code, and that its message contains part.
func wantError(t *testing.T, r reply, status int, code, part string) {
	t.Helper()
	var body httpapi.ErrorBody
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("status %d, body %s: not an error body: %v", r.status, r.body, err)
	}
	if r.status != status || body.Code != code || !strings.Contains(body.Error, part) {
		t.Errorf("got %d %+v, want %d %q with an error containing %q", r.status, body, status, code, part)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

func TestRoutes(t *testing.T) {
	e := replay(t)
	tests := []struct {
		name, path, body string
		want             string
	}{
		{"check, cost defaults to 1", "/v1/check", `{"policy":"partner-api","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":99,"resetAt":1700000040600,"retryAfterMs":0}`},
		{"check with cost", "/v1/check", `{"policy":"fixed","key":"k","cost":30,"now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":70,"resetAt":1700000100000,"retryAfterMs":0}`},
		{"check of a composite", "/v1/check", `{"policy":"gpt-4o","key":"k","cost":100,"now":1700000040000}`,
			// A sliding window is full again one bucket after the window (docs/semantics.md).
			`{"allowed":true,"limit":2,"remaining":1,"resetAt":1700000101000,"retryAfterMs":0,"deniedBy":-1,"parts":[
				{"allowed":true,"limit":2,"remaining":1,"resetAt":1700000101000,"retryAfterMs":0},
				{"allowed":true,"limit":1000,"remaining":900,"resetAt":1700000046000,"retryAfterMs":0}]}`},
		{"check-many", "/v1/check-many", `{"policy":"fixed","keys":["k","other"],"cost":10,"now":1700000040000}`,
			`{"decisions":[
				{"allowed":true,"limit":100,"remaining":60,"resetAt":1700000100000,"retryAfterMs":0},
				{"allowed":true,"limit":100,"remaining":90,"resetAt":1700000100000,"retryAfterMs":0}]}`},
		{"check-many of no keys", "/v1/check-many", `{"policy":"fixed","keys":[]}`, `{"decisions":[]}`},
		{"check-all", "/v1/check-all", `{"items":[{"policy":"fixed","key":"k","cost":60},{"policy":"gcra","key":"k"}],"now":1700000040000}`,
			`{"allowed":true,"deniedBy":-1,"decisions":[
				{"allowed":true,"limit":100,"remaining":0,"resetAt":1700000100000,"retryAfterMs":0},
				{"allowed":true,"limit":5,"remaining":4,"resetAt":1700000040100,"retryAfterMs":0}]}`},
		{"check-all denied", "/v1/check-all", `{"items":[{"policy":"gcra","key":"k"},{"policy":"fixed","key":"k"}],"now":1700000040000}`,
			`{"allowed":false,"deniedBy":1,"decisions":[
				{"allowed":true,"limit":5,"remaining":4,"resetAt":1700000040200,"retryAfterMs":0},
				{"allowed":false,"limit":100,"remaining":0,"resetAt":1700000100000,"retryAfterMs":60000}]}`},
		{"peek", "/v1/peek", `{"policy":"gcra","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":5,"remaining":4,"resetAt":1700000040100,"retryAfterMs":0}`},
		{"forecast", "/v1/forecast", `{"policy":"gcra","key":"k","cost":2,"now":1700000040000}`,
			`{"spendableNow":2,"nextReplenishAt":1700000040100,"fullAt":1700000040100}`},
		{"refund", "/v1/refund", `{"policy":"fixed","key":"k","cost":40,"now":1700000040000}`, `{}`},
		{"after the refund", "/v1/peek", `{"policy":"fixed","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":40,"resetAt":1700000100000,"retryAfterMs":0}`},
		{"settle past the reservation", "/v1/settle", `{"policy":"fixed","key":"k","reserved":10,"actual":30,"now":1700000040000}`, `{}`},
		{"after the settle: 20 more spent", "/v1/peek", `{"policy":"fixed","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":20,"resetAt":1700000100000,"retryAfterMs":0}`},
		{"settle under the reservation", "/v1/settle", `{"policy":"fixed","key":"k","reserved":30,"actual":5,"now":1700000040000}`, `{}`},
		{"after the settle: 25 back", "/v1/peek", `{"policy":"fixed","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":45,"resetAt":1700000100000,"retryAfterMs":0}`},
		{"reset, with the reason logged", "/v1/reset", `{"policy":"fixed","key":"k","reason":"ticket 42"}`, `{}`},
		{"after the reset: full now", "/v1/peek", `{"policy":"fixed","key":"k","now":1700000040000}`,
			`{"allowed":true,"limit":100,"remaining":100,"resetAt":1700000040000,"retryAfterMs":0}`},
	}
	for _, tt := range tests { // in order: each builds on the state the ones before left
		r := e.post(tt.path, tt.body)
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d, body %s", tt.name, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tt.name, ct)
		}
		t.Run(tt.name, func(t *testing.T) { sameJSON(t, r.body, tt.want) })
	}
}

func TestErrors(t *testing.T) {
	e := start(t, setup{allowClientTime: true, opts: httpapi.Options{MaxBodyBytes: 4096}})
	many := func(n int) string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%q", fmt.Sprint("k", i))
		}
		return `{"policy":"fixed","keys":[` + strings.Join(keys, ",") + `]}`
	}
	items := func(n int) string {
		its := make([]string, n)
		for i := range its {
			its[i] = `{"policy":"fixed","key":"k"}`
		}
		return `{"items":[` + strings.Join(its, ",") + `]}`
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		code, part               string
	}{
		{"unknown field", "POST", "/v1/check", `{"policy":"fixed","key":"k","bogus":1}`, 400, "invalid_argument", `unknown field "bogus"`},
		{"field of another cased", "POST", "/v1/check", `{"Policy":"fixed","key":"k"}`, 400, "invalid_argument", `unknown field "Policy"`},
		{"field twice", "POST", "/v1/check", `{"policy":"fixed","key":"k","key":"j"}`, 400, "invalid_argument", `field "key" appears twice`},
		{"null", "POST", "/v1/check", `{"policy":"fixed","key":"k","cost":null}`, 400, "invalid_argument", "cost: must be an integer, not null"},
		{"trailing data", "POST", "/v1/check", `{"policy":"fixed","key":"k"} {}`, 400, "invalid_argument", "unexpected data after the JSON object"},
		{"trailing garbage", "POST", "/v1/check", `{"policy":"fixed","key":"k"}x`, 400, "invalid_argument", "unexpected data"},
		{"not JSON", "POST", "/v1/check", `policy=fixed`, 400, "invalid_argument", "body: is not valid JSON"},
		{"cut short", "POST", "/v1/check", `{"policy":"fixed",`, 400, "invalid_argument", "body: is not complete JSON"},
		{"empty body", "POST", "/v1/check", ``, 400, "invalid_argument", "body: is not complete JSON"},
		{"not an object", "POST", "/v1/check", `["fixed","k"]`, 400, "invalid_argument", "body: must be a JSON object"},
		{"cost of another type", "POST", "/v1/check", `{"policy":"fixed","key":"k","cost":"1"}`, 400, "invalid_argument", "cost: must be an integer"},
		{"fractional cost", "POST", "/v1/check", `{"policy":"fixed","key":"k","cost":1.5}`, 400, "invalid_argument", "cost: must be an integer"},
		{"negative cost", "POST", "/v1/check", `{"policy":"fixed","key":"k","cost":-1}`, 400, "invalid_argument", "invalid cost"},
		{"cost above the ceiling", "POST", "/v1/check", `{"policy":"fixed","key":"k","cost":101}`, 400, "invalid_argument", "invalid cost"},
		{"key missing", "POST", "/v1/check", `{"policy":"fixed"}`, 400, "invalid_argument", "key: is missing"},
		{"policy missing", "POST", "/v1/check", `{"key":"k"}`, 400, "invalid_argument", "policy: is missing"},
		{"empty key", "POST", "/v1/check", `{"policy":"fixed","key":""}`, 400, "invalid_argument", "invalid key"},
		{"negative now", "POST", "/v1/check", `{"policy":"fixed","key":"k","now":-5}`, 400, "invalid_argument", "invalid now"},
		{"unknown policy", "POST", "/v1/check", `{"policy":"nope","key":"k"}`, 404, "not_found", `unknown policy "nope"`},
		{"peek takes no cost", "POST", "/v1/peek", `{"policy":"fixed","key":"k","cost":1}`, 400, "invalid_argument", `unknown field "cost"`},
		{"peek of an unknown policy", "POST", "/v1/peek", `{"policy":"nope","key":"k"}`, 404, "not_found", "unknown policy"},
		{"forecast of an unknown policy", "POST", "/v1/forecast", `{"policy":"nope","key":"k"}`, 404, "not_found", "unknown policy"},
		{"refund of a negative cost", "POST", "/v1/refund", `{"policy":"fixed","key":"k","cost":-1}`, 400, "invalid_argument", "invalid cost"},
		{"refund of an unknown policy", "POST", "/v1/refund", `{"policy":"nope","key":"k"}`, 404, "not_found", "unknown policy"},
		{"settle without actual", "POST", "/v1/settle", `{"policy":"fixed","key":"k","reserved":1}`, 400, "invalid_argument", "actual: is missing"},
		{"settle of reserved 0", "POST", "/v1/settle", `{"policy":"fixed","key":"k","reserved":0,"actual":1}`, 400, "invalid_argument", "invalid reserved"},
		{"settle of an unknown policy", "POST", "/v1/settle", `{"policy":"nope","key":"k","reserved":1,"actual":2}`, 404, "not_found", "unknown policy"},
		{"reset takes no now", "POST", "/v1/reset", `{"policy":"fixed","key":"k","now":1700000040000}`, 400, "invalid_argument", `unknown field "now"`},
		{"reset of an unknown policy", "POST", "/v1/reset", `{"policy":"nope","key":"k"}`, 404, "not_found", "unknown policy"},
		{"reset reason not a string", "POST", "/v1/reset", `{"policy":"fixed","key":"k","reason":42}`, 400, "invalid_argument", "reason: must be a string"},
		{"refund reason too long", "POST", "/v1/refund", `{"policy":"fixed","key":"k","reason":"` + strings.Repeat("r", 1025) + `"}`, 400, "invalid_argument", "reason: at most 1024 bytes"},
		{"keys missing", "POST", "/v1/check-many", `{"policy":"fixed"}`, 400, "invalid_argument", "keys: is missing"},
		{"keys of another type", "POST", "/v1/check-many", `{"policy":"fixed","keys":"k"}`, 400, "invalid_argument", "keys: must be an array of strings"},
		{"an empty key of many", "POST", "/v1/check-many", `{"policy":"fixed","keys":["a",""]}`, 400, "invalid_argument", "keys[1]"},
		{"no items", "POST", "/v1/check-all", `{"items":[]}`, 400, "invalid_argument", "items"},
		{"unknown field of an item", "POST", "/v1/check-all", `{"items":[{"policy":"fixed","key":"k"},{"policy":"fixed","key":"k","bogus":1}]}`, 400, "invalid_argument", `unknown field "items[1].bogus"`},
		{"an item not an object", "POST", "/v1/check-all", `{"items":[1]}`, 400, "invalid_argument", "items[0]: must be a JSON object"},
		{"an item without a key", "POST", "/v1/check-all", `{"items":[{"policy":"fixed"}]}`, 400, "invalid_argument", "items[0].key: is missing"},
		{"an item of a negative cost", "POST", "/v1/check-all", `{"items":[{"policy":"fixed","key":"k","cost":-1}]}`, 400, "invalid_argument", "items[0].cost"},
		{"an item of an unknown policy", "POST", "/v1/check-all", `{"items":[{"policy":"fixed","key":"k"},{"policy":"nope","key":"k"}]}`, 404, "not_found", "unknown policy"},
		{"body too large", "POST", "/v1/check", `{"policy":"fixed","key":"` + strings.Repeat("k", 5000) + `"}`, 400, "too_large", "larger than 4096 bytes"},
		{"GET of a POST route", "GET", "/v1/check", ``, 405, "method_not_allowed", "use POST"},
		{"POST of a GET route", "POST", "/healthz", ``, 405, "method_not_allowed", "use GET"},
		{"POST to the gate", "POST", "/v1/gate/fixed", ``, 405, "method_not_allowed", "use GET"},
		{"no such route", "GET", "/v2/check", ``, 404, "not_found", "no route /v2/check"},
		{"gate of an unknown policy", "GET", "/v1/gate/nope?key=k", ``, 404, "not_found", "unknown policy"},
		{"gate of no policy", "GET", "/v1/gate/?key=k", ``, 404, "not_found", "unknown policy"},
		{"gate cost not a number", "GET", "/v1/gate/fixed?key=k&cost=two", ``, 400, "invalid_argument", `cost: must be an integer, got "two"`},
		{"gate negative cost", "GET", "/v1/gate/fixed?key=k&cost=-1", ``, 400, "invalid_argument", "invalid cost"},
		{"gate deny status other than 403 or 429", "GET", "/v1/gate/fixed?key=k&denyStatus=500", ``, 400, "invalid_argument", "denyStatus: must be 429 or 403"},
		{"gate now not a number", "GET", "/v1/gate/fixed?key=k&now=soon", ``, 400, "invalid_argument", "now: must be an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(tt.method, tt.path, tt.body), tt.status, tt.code, tt.part)
		})
	}

	t.Run("at most 1000 keys and items", func(t *testing.T) {
		e := start(t, setup{}) // the default body limit, 1 MiB, holds 1001 of each
		if r := e.post("/v1/check-many", many(1000)); r.status != 200 {
			t.Errorf("1000 keys: %d %.200s", r.status, r.body)
		}
		wantError(t, e.post("/v1/check-many", many(1001)), 400, "invalid_argument", "1001 keys, at most 1000")
		if r := e.post("/v1/check-all", items(1000)); r.status != 200 {
			t.Errorf("1000 items: %d %.200s", r.status, r.body)
		}
		wantError(t, e.post("/v1/check-all", items(1001)), 400, "invalid_argument", "1001 items, at most 1000")
	})

	t.Run("Allow header of a 405", func(t *testing.T) {
		if got := e.do("DELETE", "/v1/reset", "").header.Get("Allow"); got != "POST" {
			t.Errorf("Allow %q, want POST", got)
		}
		if got := e.do("PUT", "/v1/gate/fixed", "").header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("Allow %q, want GET, HEAD", got)
		}
	})
}

func TestClientTime(t *testing.T) {
	body := `{"policy":"fixed","key":"k","now":1700000040000}`
	routes := []string{"/v1/check", "/v1/peek", "/v1/forecast", "/v1/refund"}
	t.Run("refused without AllowClientTime", func(t *testing.T) {
		e := start(t, setup{})
		for _, path := range routes {
			wantError(t, e.post(path, body), 400, "invalid_argument", "--allow-client-time")
		}
		wantError(t, e.post("/v1/check-many", `{"policy":"fixed","keys":["k"],"now":1700000040000}`), 400, "invalid_argument", "invalid now")
		wantError(t, e.post("/v1/check-all", `{"items":[{"policy":"fixed","key":"k"}],"now":1700000040000}`), 400, "invalid_argument", "invalid now")
		wantError(t, e.do("GET", "/v1/gate/fixed?key=k&now=1700000040000", ""), 400, "invalid_argument", "invalid now")
		// now 0 is the server's clock, whatever the option.
		if r := e.post("/v1/check", `{"policy":"fixed","key":"k","now":0}`); r.status != 200 {
			t.Errorf("now 0: %d %s", r.status, r.body)
		}
	})
	t.Run("honoured with AllowClientTime", func(t *testing.T) {
		e := replay(t)
		// A window that ended long ago and the current one are different windows.
		old := e.check("fixed", "k", 100, 60_000)
		if !old.Allowed || old.ResetAt != 120_000 {
			t.Fatalf("check at 60000 = %+v, want allowed, reset at 120000", old)
		}
		if d := e.check("fixed", "k", 100, t0); !d.Allowed || d.ResetAt != t0+60_000 {
			t.Errorf("check at t0 = %+v, want a fresh window reset at t0+60000", d)
		}
		if d := e.check("fixed", "k", 1, t0+59_999); d.Allowed {
			t.Errorf("check at t0+59999 = %+v, want denied: the window is spent", d)
		}
	})
}

// Over HTTP: the partner API's token bucket of 100 a minute, burst 100.
func TestScenarioPartnerAPI(t *testing.T) {
	e := replay(t)
	for i := 1; i <= 100; i++ {
		if d := e.check("partner-api", "key42", 1, t0); !d.Allowed || d.Remaining != int64(100-i) {
			t.Fatalf("check %d = %+v, want allowed with %d remaining", i, d, 100-i)
		}
	}
	d := e.check("partner-api", "key42", 1, t0)
	if d.Allowed || d.Remaining != 0 || d.RetryAfterMs != 600 || d.DeniedBy != nil || d.Parts != nil {
		t.Fatalf("101st check = %+v, want denied with retryAfterMs 600 and no deniedBy or parts", d)
	}
	if d := e.check("partner-api", "key42", 1, t0+599); d.Allowed {
		t.Errorf("check at t0+599 allowed, before the retry")
	}
	if d := e.check("partner-api", "key42", 1, t0+600); !d.Allowed {
		t.Errorf("check at t0+600 = %+v, want allowed", d)
	}
}

// Over HTTP: 20 concurrent checks on a key with 95 of 100 used admit exactly 5.
func TestScenarioConcurrentChecks(t *testing.T) {
	e := replay(t)
	const concurrent = 20
	for round := range 10 {
		key := fmt.Sprint("round-", round)
		if d := e.check("fixed", key, 95, t0); !d.Allowed || d.Remaining != 5 {
			t.Fatalf("using 95 = %+v", d)
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
		)
		start := make(chan struct{})
		for range concurrent {
			wg.Go(func() {
				<-start
				d := e.check("fixed", key, 1, t0+1)
				mu.Lock()
				defer mu.Unlock()
				if d.Allowed {
					allowed++
				}
			})
		}
		close(start)
		wg.Wait()
		if allowed != 5 {
			t.Fatalf("round %d: %d of %d concurrent checks admitted, want exactly 5", round, allowed, concurrent)
		}
	}
}

// Over HTTP: login attempts checked with check-all against the IP and the spent account
// rule spend nothing of the IP's budget.
func TestScenarioLoginPair(t *testing.T) {
	e := replay(t)
	for i := range 5 {
		if d := e.check("login-account", "asha", 1, t0); !d.Allowed {
			t.Fatalf("account login %d denied", i)
		}
	}
	body := fmt.Sprintf(`{"items":[{"policy":"login-ip","key":"1.2.3.4"},{"policy":"login-account","key":"asha"}],"now":%d}`, t0+1000)
	for i := range 10 {
		r := e.post("/v1/check-all", body)
		var got struct {
			Allowed   bool       `json:"allowed"`
			DeniedBy  int        `json:"deniedBy"`
			Decisions []decision `json:"decisions"`
		}
		decode(t, r.body, &got)
		if r.status != 200 || got.Allowed || got.DeniedBy != 1 || len(got.Decisions) != 2 ||
			!got.Decisions[0].Allowed || got.Decisions[1].Allowed || got.Decisions[1].RetryAfterMs < 1 {
			t.Fatalf("attempt %d: %d %s, want denied by item 1, the account", i, r.status, r.body)
		}
	}
	if d := e.peek("login-ip", "1.2.3.4", t0+1000); !d.Allowed || d.Remaining != 50 {
		t.Errorf("IP budget after 10 denied attempts = %+v, want 50 remaining", d)
	}
}

// Over HTTP: a per-model registry, 2 requests a minute and 1000 tokens a minute.
func TestScenarioPerModelRegistry(t *testing.T) {
	e := replay(t)
	for i := range 2 {
		d := e.check("gpt-4o", "tenant", 1, t0)
		if !d.Allowed || d.DeniedBy == nil || *d.DeniedBy != -1 || len(d.Parts) != 2 {
			t.Fatalf("request %d = %+v, want allowed with deniedBy -1 and 2 parts", i, d)
		}
	}
	d := e.check("gpt-4o", "tenant", 1, t0)
	if d.Allowed || d.DeniedBy == nil || *d.DeniedBy != 0 || d.Limit != 2 || d.RetryAfterMs < 1 {
		t.Fatalf("third request = %+v, want denied by limit 0 (requests)", d)
	}
	if d.Parts[0].Allowed || !d.Parts[1].Allowed {
		t.Errorf("third request's parts = %+v, want requests denying and tokens allowing", d.Parts)
	}
	if pk := e.peek("gpt-4o", "tenant", t0); pk.Parts[1].Remaining != 998 {
		t.Errorf("tokens remaining %d, want 998: the denied request spent tokens", pk.Parts[1].Remaining)
	}
}

func TestScenarioUnknownModel(t *testing.T) {
	e := replay(t)
	wantError(t, e.post("/v1/check", `{"policy":"gpt-5","key":"tenant","now":1700000040000}`), 404, "not_found", `unknown policy "gpt-5"`)
	wantError(t, e.post("/v1/check", `{"policy":"gpt-4o","key":"tenant","cost":1001,"now":1700000040000}`), 400, "invalid_argument", "invalid cost")
}

func TestGateHeaders(t *testing.T) {
	e := replay(t)
	for range 100 {
		if r := e.do("GET", fmt.Sprintf("/v1/gate/partner-api?key=k&now=%d", t0), ""); r.status != 200 {
			t.Fatalf("gate: %d %s", r.status, r.body)
		}
	}
	tests := []struct {
		name, path string
		status     int
		want       http.Header
	}{
		{"denied", fmt.Sprintf("/v1/gate/partner-api?key=k&now=%d", t0), 429, http.Header{
			"Ratelimit-Policy": {`"partner-api";q=100;w=60`},
			"Ratelimit":        {`"partner-api";r=0;t=60`},
			"Retry-After":      {"1"},
		}},
		{"allowed at the retry", fmt.Sprintf("/v1/gate/partner-api?key=k&now=%d", t0+600), 200, http.Header{
			"Ratelimit-Policy": {`"partner-api";q=100;w=60`},
			"Ratelimit":        {`"partner-api";r=0;t=60`},
		}},
		{"fixed window", fmt.Sprintf("/v1/gate/fixed?key=k&cost=10&now=%d", t0+15_500), 200, http.Header{
			"Ratelimit-Policy": {`"fixed";q=100;w=60`},
			"Ratelimit":        {`"fixed";r=90;t=45`},
		}},
		{"gcra", fmt.Sprintf("/v1/gate/gcra?key=k&cost=5&now=%d", t0), 200, http.Header{
			"Ratelimit-Policy": {`"gcra";q=5;w=1`},
			"Ratelimit":        {`"gcra";r=0;t=1`},
		}},
		{"gcra denied", fmt.Sprintf("/v1/gate/gcra?key=k&now=%d", t0), 429, http.Header{
			"Ratelimit-Policy": {`"gcra";q=5;w=1`},
			"Ratelimit":        {`"gcra";r=0;t=1`},
			"Retry-After":      {"1"},
		}},
		{"denied with 403 for nginx", fmt.Sprintf("/v1/gate/gcra?key=k&now=%d&denyStatus=403", t0), 403, http.Header{
			"Ratelimit-Policy": {`"gcra";q=5;w=1`},
			"Ratelimit":        {`"gcra";r=0;t=1`},
			"Retry-After":      {"1"},
		}},
		{"composite", fmt.Sprintf("/v1/gate/gpt-4o?key=k&cost=250&now=%d", t0), 200, http.Header{
			"Ratelimit-Policy": {`"gpt-4o#requests";q=2;w=60, "gpt-4o#tokens";q=1000;w=60`},
			"Ratelimit":        {`"gpt-4o#requests";r=1;t=61, "gpt-4o#tokens";r=750;t=15`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", tt.path, "")
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			for _, name := range []string{"Ratelimit-Policy", "Ratelimit", "Retry-After", "Sluice-Fail-Mode"} {
				if got, want := r.header.Values(name), tt.want.Values(name); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestGateKey(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		query   string
		header  []string
		wantKey string
	}{
		{"query", nil, "?key=q", []string{"X-Api-Key", "h"}, "q"},
		{"header", nil, "", []string{"X-Api-Key", "h"}, "h"},
		{"escaped query", nil, "?key=a%2Fb", nil, "a/b"},
		{"client address", nil, "", nil, "127.0.0.1"},
		{"forwarded from an untrusted peer", nil, "", []string{"X-Forwarded-For", "198.51.100.7"}, "127.0.0.1"},
		{"forwarded from a trusted peer", loopback, "", []string{"X-Forwarded-For", "6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, setup{allowClientTime: true, opts: httpapi.Options{GateKeyHeader: "X-Api-Key", TrustedProxies: tt.trusted}})
			if r := e.do("GET", "/v1/gate/fixed"+tt.query, "", tt.header...); r.status != 200 {
				t.Fatalf("gate: %d %s", r.status, r.body)
			}
			// The key the gate charged is the one with 99 left.
			if d := e.peek("fixed", tt.wantKey, 0); d.Remaining != 99 {
				t.Errorf("key %q has %d remaining, want 99: the gate charged another key", tt.wantKey, d.Remaining)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	e := start(t, setup{opts: httpapi.Options{BearerTokens: []string{"s3cret", "", "other"}}})
	body := `{"policy":"fixed","key":"k"}`
	tests := []struct {
		name, method, path, body string
		auth                     []string
		status                   int
	}{
		{"no token", "POST", "/v1/check", body, nil, 401},
		{"wrong token", "POST", "/v1/check", body, []string{"Authorization", "Bearer nope"}, 401},
		{"prefix of a token", "POST", "/v1/check", body, []string{"Authorization", "Bearer s3cre"}, 401},
		{"empty token", "POST", "/v1/check", body, []string{"Authorization", "Bearer "}, 401},
		{"another scheme", "POST", "/v1/check", body, []string{"Authorization", "Basic czNjcmV0"}, 401},
		{"token", "POST", "/v1/check", body, []string{"Authorization", "Bearer s3cret"}, 200},
		{"second token, scheme in lower case", "POST", "/v1/check", body, []string{"Authorization", "bearer other"}, 200},
		{"gate", "GET", "/v1/gate/fixed?key=k", "", nil, 401},
		{"gate with a token", "GET", "/v1/gate/fixed?key=k", "", []string{"Authorization", "Bearer s3cret"}, 200},
		{"405 only once authorized", "GET", "/v1/check", "", nil, 401},
		{"healthz is open", "GET", "/healthz", "", nil, 200},
		{"readyz is open", "GET", "/readyz", "", nil, 200},
		{"metrics are open", "GET", "/metrics", "", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tt.body, tt.auth...)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status == 401 {
				wantError(t, r, 401, "unauthorized", "bearer token")
				if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="sluice"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
			}
		})
	}
}

func TestOperational(t *testing.T) {
	e := start(t, setup{})
	e.post("/v1/check", `{"policy":"fixed","key":"k"}`)
	tests := []struct {
		name, path string
		status     int
		body       string // contained in the body
	}{
		{"healthz", "/healthz", 200, "ok"},
		{"readyz", "/readyz", 200, "ok"},
		{"metrics", "/metrics", 200, `sluice_decisions_total{outcome="allowed",policy="fixed"} 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", tt.path, "")
			if r.status != tt.status || !strings.Contains(string(r.body), tt.body) {
				t.Errorf("%d %.300s, want %d containing %q", r.status, r.body, tt.status, tt.body)
			}
		})
	}
}

// failing is a store that cannot answer; Ping fails too, so the server is not ready.
type failing struct{ sluice.Store }

var errDown = errors.New("failing: store down")

func (failing) Check(context.Context, int64, *sluice.Policy, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}
func (failing) CheckMany(context.Context, int64, *sluice.Policy, []string, int64, []sluice.Decision) error {
	return errDown
}
func (failing) CheckAll(context.Context, int64, []*sluice.Policy, []sluice.Item, []sluice.Decision) error {
	return errDown
}
func (failing) Peek(context.Context, int64, *sluice.Policy, string) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}
func (failing) Forecast(context.Context, int64, *sluice.Policy, string, int64) (sluice.Forecast, error) {
	return sluice.Forecast{}, errDown
}
func (failing) Refund(context.Context, int64, *sluice.Policy, string, int64) error { return errDown }
func (failing) Reset(context.Context, *sluice.Policy, string) error                { return errDown }
func (failing) Ping(context.Context) error                                         { return errDown }

func TestStoreDown(t *testing.T) {
	const cfg = `
failMode: closed
policies:
  closed: {strategy: fixedWindow, limit: 10, windowMs: 1000}
  open: {strategy: fixedWindow, limit: 10, windowMs: 1000, failMode: open}
`
	e := start(t, setup{config: cfg, store: failing{}})
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		failMode                 string // failMode of the body and Sluice-Fail-Mode
	}{
		{"check, fail closed", "POST", "/v1/check", `{"policy":"closed","key":"k"}`, 503, "unavailable", "closed"},
		{"check-many, fail closed", "POST", "/v1/check-many", `{"policy":"closed","keys":["k"]}`, 503, "unavailable", "closed"},
		{"check-all, one fails closed", "POST", "/v1/check-all", `{"items":[{"policy":"open","key":"k"},{"policy":"closed","key":"k"}]}`, 503, "unavailable", "closed"},
		{"gate, fail closed", "GET", "/v1/gate/closed?key=k", "", 503, "unavailable", "closed"},
		{"peek, whatever the mode", "POST", "/v1/peek", `{"policy":"open","key":"k"}`, 503, "unavailable", ""},
		{"forecast", "POST", "/v1/forecast", `{"policy":"open","key":"k"}`, 503, "unavailable", ""},
		{"refund", "POST", "/v1/refund", `{"policy":"open","key":"k"}`, 503, "unavailable", ""},
		{"reset", "POST", "/v1/reset", `{"policy":"open","key":"k"}`, 503, "unavailable", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tt.body)
			wantError(t, r, tt.status, tt.code, "store unavailable")
			if strings.Contains(string(r.body), errDown.Error()) {
				t.Errorf("body %s carries the store's error", r.body)
			}
			var body httpapi.ErrorBody
			decode(t, r.body, &body)
			if body.FailMode != tt.failMode || r.header.Get("Sluice-Fail-Mode") != tt.failMode {
				t.Errorf("failMode %q, Sluice-Fail-Mode %q; want %q", body.FailMode, r.header.Get("Sluice-Fail-Mode"), tt.failMode)
			}
		})
	}
	open := []struct {
		name, path, body, want string
	}{
		{"check, fail open", "/v1/check", `{"policy":"open","key":"k"}`,
			`{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true}`},
		{"check-many, fail open", "/v1/check-many", `{"policy":"open","keys":["a","b"]}`,
			`{"decisions":[{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true},
				{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true}]}`},
		{"check-all, fail open", "/v1/check-all", `{"items":[{"policy":"open","key":"a"},{"policy":"open","key":"b"}]}`,
			`{"allowed":true,"deniedBy":-1,"failOpen":true,"decisions":[
				{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true},
				{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true}]}`},
	}
	for _, tt := range open {
		t.Run(tt.name, func(t *testing.T) {
			r := e.post(tt.path, tt.body)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			sameJSON(t, r.body, tt.want)
			if got := r.header.Get("Sluice-Fail-Mode"); got != "open" {
				t.Errorf("Sluice-Fail-Mode %q, want open", got)
			}
		})
	}
	t.Run("gate, fail open", func(t *testing.T) {
		r := e.do("GET", "/v1/gate/open?key=k", "")
		if r.status != 200 || r.header.Get("Sluice-Fail-Mode") != "open" {
			t.Errorf("%d %v, want 200 with Sluice-Fail-Mode: open", r.status, r.header)
		}
		// No limit was consulted: nothing to say of one, least of all that none remains.
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := r.header.Values(name); v != nil {
				t.Errorf("%s: %q on a fail-open answer", name, v)
			}
		}
		sameJSON(t, r.body, `{"allowed":true,"limit":0,"remaining":0,"resetAt":0,"retryAfterMs":0,"failOpen":true}`)
	})
	t.Run("readyz", func(t *testing.T) {
		if r := e.do("GET", "/readyz", ""); r.status != 503 || string(r.body) != "not ready" {
			t.Errorf("readyz: %d %q, want 503 not ready", r.status, r.body)
		}
	})
}

// FuzzHandler posts any body to every JSON route of a live server. Every answer is 200 with a JSON
// body or an error body with a code that matches its status, never a 500.
func FuzzHandler(f *testing.F) {
	for _, seed := range []string{
		`{"policy":"fixed","key":"k"}`,
		`{"policy":"gpt-4o","key":"k","cost":5}`,
		`{"policy":"fixed","keys":["a","b"]}`,
		`{"items":[{"policy":"fixed","key":"k"},{"policy":"gcra","key":"k"}]}`,
		`{"policy":"nope","key":"k"}`,
		`{"policy":"fixed","key":"k","now":5}`,
	} {
		f.Add(seed)
	}
	cfg, err := config.Parse([]byte(testConfig))
	if err != nil {
		f.Fatal(err)
	}
	mem := memory.New(memory.Config{SweepInterval: -1})
	defer mem.Close()
	srv, err := server.New(cfg, mem, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	h := httpapi.New(srv, httpapi.Options{MaxBodyBytes: 1 << 16})
	codes := map[int]string{400: "invalid_argument", 404: "not_found"}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/check", "/v1/check-many", "/v1/check-all", "/v1/peek", "/v1/forecast", "/v1/refund", "/v1/reset"} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			if rec.Code == 200 {
				if !json.Valid(rec.Body.Bytes()) {
					t.Fatalf("%s %q: 200 with %q", path, body, rec.Body)
				}
				continue
			}
			var e httpapi.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" ||
				e.Code != codes[rec.Code] && !(rec.Code == 400 && e.Code == "too_large") {
				t.Fatalf("%s %q: %d %q", path, body, rec.Code, rec.Body)
			}
		}
	})
}

// The gate never keys a check on the client address when the caller tried to name a key: a bad,
// empty or repeated parameter is a 400 naming it, and charges nothing.
func TestGateStrictQuery(t *testing.T) {
	e := start(t, setup{allowClientTime: true, opts: httpapi.Options{GateKeyHeader: "X-Api-Key"}})
	tests := []struct {
		name, query string
		header      []string
		part        string
	}{
		{"empty key", "?key=", nil, "key: given empty"},
		{"empty key beside a header", "?key=", []string{"X-Api-Key", "h"}, "key: given empty"},
		{"undecodable escape", "?key=%zz", nil, "query: "},
		{"semicolon", "?key=a;b", nil, "query: "},
		{"key twice", "?key=a&key=b", nil, "key: given 2 times"},
		{"cost twice", "?key=a&cost=1&cost=2", nil, "cost: given 2 times"},
		{"empty cost", "?key=a&cost=", nil, "cost: given empty"},
		{"bad cost", "?key=a&cost=1e3", nil, `cost: must be an integer, got "1e3"`},
		{"negative cost", "?key=a&cost=-1", nil, "invalid cost"},
		{"now twice", "?key=a&now=1&now=2", nil, "now: given 2 times"},
		{"denyStatus twice", "?key=a&denyStatus=403&denyStatus=429", nil, "denyStatus: given 2 times"},
		{"key not UTF-8", "?key=x%FFy", nil, "key: is not valid UTF-8"},
		{"key header empty", "", []string{"X-Api-Key", ""}, "header X-Api-Key: given empty"},
		{"key header twice", "", []string{"X-Api-Key", "a", "X-Api-Key", "b"}, "header X-Api-Key: given 2 times"},
		{"key header not UTF-8", "", []string{"X-Api-Key", "x\xffy"}, "header X-Api-Key: is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do("GET", "/v1/gate/fixed"+tt.query, "", tt.header...), 400, "invalid_argument", tt.part)
		})
	}
	// None of them charged the client address, or any key.
	for _, key := range []string{"127.0.0.1", "a", "b", "h", "x\ufffdy"} {
		if d := e.peek("fixed", key, 0); d.Remaining != 100 {
			t.Errorf("key %q: %d remaining, want 100", key, d.Remaining)
		}
	}
}

// A HEAD on the gate answers as a peek: it spends nothing.
func TestGateHead(t *testing.T) {
	e := start(t, setup{})
	for i := range 3 {
		r := e.do("HEAD", "/v1/gate/fixed?key=k", "")
		if r.status != 200 || r.header.Get("RateLimit") == "" {
			t.Fatalf("HEAD %d: %d %v, want 200 with RateLimit", i, r.status, r.header)
		}
	}
	if d := e.peek("fixed", "k", 0); d.Remaining != 100 {
		t.Errorf("%d remaining after three HEADs, want 100", d.Remaining)
	}
	if r := e.do("GET", "/v1/gate/fixed?key=k", ""); r.status != 200 {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	if d := e.peek("fixed", "k", 0); d.Remaining != 99 {
		t.Errorf("%d remaining after a GET, want 99", d.Remaining)
	}
}

// A key holding invalid UTF-8 or a lone surrogate is refused, by the JSON API and the gate alike,
// rather than decoded to U+FFFD into another key's bucket.
func TestKeysNotUTF8(t *testing.T) {
	e := start(t, setup{})
	tests := []struct {
		name, path, body, part string
	}{
		{"invalid byte", "/v1/check", "{\"policy\":\"fixed\",\"key\":\"x\xffy\"}", "key: holds invalid UTF-8"},
		{"another invalid byte", "/v1/check", "{\"policy\":\"fixed\",\"key\":\"x\xfey\"}", "key: holds invalid UTF-8"},
		{"lone low surrogate", "/v1/check", `{"policy":"fixed","key":"x\udc00y"}`, "key: holds invalid UTF-8 or an unpaired surrogate"},
		{"lone high surrogate", "/v1/check", `{"policy":"fixed","key":"x\ud800y"}`, "key: holds"},
		{"high surrogate at the end", "/v1/check", `{"policy":"fixed","key":"x\ud800"}`, "key: holds"},
		{"two high surrogates", "/v1/check", `{"policy":"fixed","key":"\ud800\ud800"}`, "key: holds"},
		{"in the policy", "/v1/peek", "{\"policy\":\"fi\xffxed\",\"key\":\"k\"}", "policy: holds"},
		{"in one of many keys", "/v1/check-many", `{"policy":"fixed","keys":["a","\udfff"]}`, "keys: holds"},
		{"in an item", "/v1/check-all", `{"items":[{"policy":"fixed","key":"\udc00"}]}`, "items[0].key: holds"},
		{"in a reset", "/v1/reset", "{\"policy\":\"fixed\",\"key\":\"x\xffy\"}", "key: holds"},
		{"in a holder", "/v1/admit", "{\"name\":\"c\",\"key\":\"k\",\"holder\":\"\xff\",\"limit\":1,\"ttlMs\":1000}", "holder: holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.post(tt.path, tt.body), 400, "invalid_argument", tt.part)
		})
	}
	// Escaped pairs and the replacement character itself are keys like any other.
	for _, key := range []string{`\ud83d\ude00`, `\ufffd`, "\u00e9"} {
		if r := e.post("/v1/check", `{"policy":"fixed","key":"`+key+`"}`); r.status != 200 {
			t.Errorf("key %s: %d %s", key, r.status, r.body)
		}
	}
	if d := e.peek("fixed", "x\ufffdy", 0); d.Remaining != 100 {
		t.Errorf("x\\ufffdy: %d remaining, want 100: a refused key was charged to it", d.Remaining)
	}
}

// POST bodies come as JSON only, so that a web page cannot post a form or text/plain to the API.
func TestContentType(t *testing.T) {
	e := start(t, setup{})
	const body = `{"policy":"fixed","key":"k"}`
	tests := []struct {
		name   string
		header []string
		status int
	}{
		{"json", []string{"Content-Type", "application/json"}, 200},
		{"json with a charset", []string{"Content-Type", "application/json; charset=UTF-8"}, 200},
		{"a +json type", []string{"Content-Type", "application/merge-patch+json"}, 200},
		{"json in capitals", []string{"Content-Type", "Application/JSON"}, 200},
		{"text/plain", []string{"Content-Type", "text/plain"}, 415},
		{"a form", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415},
		{"none", []string{"Content-Type", ""}, 415},
		{"json in another charset", []string{"Content-Type", "application/json; charset=latin1"}, 415},
		{"twice", []string{"Content-Type", "application/json", "Content-Type", "text/plain"}, 415},
		{"malformed", []string{"Content-Type", "application/json; ;"}, 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/v1/reset", body, tt.header...)
			if tt.status == 200 {
				if r.status != 200 {
					t.Errorf("%d %s, want 200", r.status, r.body)
				}
				return
			}
			wantError(t, r, tt.status, "unsupported_media_type", "Content-Type")
		})
	}
	t.Run("a text/plain reset changes nothing", func(t *testing.T) {
		e.check("fixed", "victim", 1, 0)
		e.do("POST", "/v1/reset", `{"policy":"fixed","key":"victim"}`, "Content-Type", "text/plain")
		if d := e.peek("fixed", "victim", 0); d.Remaining != 99 {
			t.Errorf("%d remaining, want 99: the reset went through", d.Remaining)
		}
	})
}

// With AllowedHosts, a request naming another Host is refused; probes answer any host.
func TestAllowedHosts(t *testing.T) {
	e := start(t, setup{opts: httpapi.Options{AllowedHosts: []string{"sluice.internal", "localhost:1", "[::1]", "127.0.0.1"}}})
	tests := []struct {
		name, host, path string
		status           int
	}{
		{"a listed name", "sluice.internal", "/v1/gate/fixed?key=k", 200},
		{"a listed name with a port", "sluice.internal:8080", "/v1/gate/fixed?key=k", 200},
		{"a listed name in capitals", "SLUICE.internal", "/v1/gate/fixed?key=k", 200},
		{"a listed name and port", "localhost:1", "/metrics", 200},
		{"a listed IPv6 address", "[::1]:8080", "/v1/gate/fixed?key=k", 200},
		{"a listed name on another port", "localhost:2", "/v1/gate/fixed?key=k", 403},
		{"a rebound name", "evil.example", "/v1/gate/fixed?key=k", 403},
		{"a rebound name on metrics", "evil.example", "/metrics", 403},
		{"a suffix of a listed name", "x.sluice.internal", "/v1/gate/fixed?key=k", 403},
		{"healthz answers any host", "evil.example", "/healthz", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", tt.path, "", "Host", tt.host)
			if tt.status == 403 {
				wantError(t, r, 403, "host_not_allowed", "is not one of the allowed hosts")
			} else if r.status != tt.status {
				t.Errorf("%d %s, want %d", r.status, r.body, tt.status)
			}
		})
	}
	t.Run("a refused reset changes nothing", func(t *testing.T) {
		e.check("fixed", "victim", 1, 0)
		if r := e.do("POST", "/v1/reset", `{"policy":"fixed","key":"victim"}`, "Host", "evil.example"); r.status != 403 {
			t.Errorf("reset: %d", r.status)
		}
		if d := e.peek("fixed", "victim", 0); d.Remaining != 99 {
			t.Errorf("%d remaining, want 99", d.Remaining)
		}
	})
}
