package httpapi_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// plansConfig has a policy with plans (free by default, pro) and one without.
const plansConfig = `
policies:
  tiers:
    plans:
      free: {strategy: gcra, limit: 60, period: 1m, burst: 5}
      pro: {strategy: gcra, limit: 600, period: 1m, burst: 50}
    plan: free
  fixed: {strategy: fixedWindow, limit: 100, window: 1m}
`

// startOverrides is start over plansConfig, with client time, returning the server too so that
// tests can see what its Table holds.
func startOverrides(t *testing.T, opts httpapi.Options) (*env, *server.Server) {
	t.Helper()
	cfg, err := config.Parse([]byte(plansConfig))
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	srv, err := server.New(cfg, mem, server.Options{AllowClientTime: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpapi.New(srv, opts))
	t.Cleanup(ts.Close)
	return &env{t: t, url: ts.URL}, srv
}

// overridePath is the route of one override, its segments escaped.
func overridePath(policy, key string) string {
	return "/v1/overrides/" + url.PathEscape(policy) + "/" + url.PathEscape(key)
}

// put sends a PUT of body as JSON.
func (e *env) put(path, body string, header ...string) reply {
	e.t.Helper()
	return e.do("PUT", path, body, append([]string{"Content-Type", "application/json"}, header...)...)
}

// wantOverride decodes r as a 200 override.
func wantOverride(t *testing.T, r reply) overrides.Override {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	var o overrides.Override
	decode(t, r.body, &o)
	return o
}

type overridePage struct {
	Overrides     []overrides.Override `json:"overrides"`
	NextPageToken *string              `json:"nextPageToken"`
}

func (e *env) listOverrides(query string) overridePage {
	e.t.Helper()
	r := e.do("GET", "/v1/overrides?"+query, "")
	if r.status != http.StatusOK {
		e.t.Fatalf("list %s: %d %s", query, r.status, r.body)
	}
	var p overridePage
	decode(e.t, r.body, &p)
	if p.Overrides == nil {
		e.t.Fatalf("list %s: overrides is not an array: %s", query, r.body)
	}
	return p
}

func TestOverridesRoundTrip(t *testing.T) {
	e, _ := startOverrides(t, httpapi.Options{})
	const ttl = int64(time.Hour / time.Millisecond)
	tests := []struct {
		name, policy, key, body string
		want                    overrides.Override // its Policy and Key are the case's; UpdatedAt unchecked
		ttl                     bool               // ExpiresAt is ttl from the server's clock
	}{
		{"plan", "tiers", "acme", `{"plan":"pro","reason":"contract 42"}`,
			overrides.Override{Plan: "pro", Reason: "contract 42"}, false},
		{"plan for an hour", "tiers", "trial", fmt.Sprintf(`{"plan":"pro","ttlMs":%d}`, ttl),
			overrides.Override{Plan: "pro"}, true},
		{"plan until an instant", "tiers", "until-2100", `{"plan":"pro","expiresAt":4102444800000}`,
			overrides.Override{Plan: "pro", ExpiresAt: 4102444800000}, false},
		{"own limits", "fixed", "scraper", `{"limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1,"name":"slow","unit":"request"}]}`,
			overrides.Override{Limits: []overrides.Limit{{Strategy: "gcra", Limit: 1, PeriodMs: 1000, Burst: 1, Name: "slow", Unit: "request"}}}, false},
		{"calendar limit", "fixed", "monthly", `{"limits":[{"strategy":"fixedWindow","limit":1000,"calendar":"month","timezone":"Europe/Paris"}]}`,
			overrides.Override{Limits: []overrides.Limit{{Strategy: "fixedWindow", Limit: 1000, Calendar: "month", TimeZone: "Europe/Paris"}}}, false},
		{"key with slashes", "tiers", "org/acme/team", `{"plan":"pro"}`, overrides.Override{Plan: "pro"}, false},
		{"key with escapes", "tiers", "a b%?#ü", `{"plan":"free"}`, overrides.Override{Plan: "free"}, false},
		{"key of dots", "tiers", "a/../b", `{"plan":"pro"}`, overrides.Override{Plan: "pro"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := overridePath(tt.policy, tt.key)
			before := time.Now().UnixMilli()
			got := wantOverride(t, e.put(path, tt.body))
			after := time.Now().UnixMilli()
			want := tt.want
			want.Policy, want.Key, want.UpdatedAt = tt.policy, tt.key, got.UpdatedAt
			if tt.ttl {
				if got.ExpiresAt < before+ttl || got.ExpiresAt > after+ttl {
					t.Errorf("expiresAt %d, want %d to %d", got.ExpiresAt, before+ttl, after+ttl)
				}
				want.ExpiresAt = got.ExpiresAt
			}
			if got.UpdatedAt < before || got.UpdatedAt > after {
				t.Errorf("updatedAt %d, want %d to %d", got.UpdatedAt, before, after)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("PUT answered %+v, want %+v", got, want)
			}
			if read := wantOverride(t, e.do("GET", path, "")); fmt.Sprint(read) != fmt.Sprint(got) {
				t.Errorf("GET answered %+v, want %+v", read, got)
			}
			list := e.listOverrides("policy=" + url.QueryEscape(tt.policy) + "&prefix=" + url.QueryEscape(tt.key))
			if len(list.Overrides) != 1 || fmt.Sprint(list.Overrides[0]) != fmt.Sprint(got) {
				t.Errorf("list answered %+v, want [%+v]", list.Overrides, got)
			}
			if r := e.do("DELETE", path+"?reason=ticket+7", ""); r.status != 200 {
				t.Fatalf("DELETE: %d %s", r.status, r.body)
			} else {
				sameJSON(t, r.body, `{"deleted":true}`)
			}
			wantError(t, e.do("GET", path, ""), 404, httpapi.CodeNotFound, "no override")
			wantError(t, e.do("DELETE", path, ""), 404, httpapi.CodeNotFound, "no override")
		})
	}
}

func TestOverridesReplace(t *testing.T) {
	e, srv := startOverrides(t, httpapi.Options{})
	path := overridePath("tiers", "acme")
	wantOverride(t, e.put(path, `{"plan":"pro","reason":"trial"}`))
	got := wantOverride(t, e.put(path, `{"limits":[{"strategy":"tokenBucket","capacity":3,"refillPerSec":1}]}`))
	if got.Plan != "" || len(got.Limits) != 1 || got.Reason != "" {
		t.Errorf("the second PUT answered %+v, want its limits alone", got)
	}
	if n := srv.Overrides().Len(); n != 1 {
		t.Errorf("the Table holds %d overrides, want 1", n)
	}
}

func TestOverridesPaging(t *testing.T) {
	e, _ := startOverrides(t, httpapi.Options{})
	for _, key := range []string{"a/3", "a/1", "b/1", "a/5", "a/2", "a/4", "ab"} {
		wantOverride(t, e.put(overridePath("tiers", key), `{"plan":"pro"}`))
	}
	tests := []struct {
		name, query string
		pages       [][]string
	}{
		{"all, default limit", "policy=tiers", [][]string{{"a/1", "a/2", "a/3", "a/4", "a/5", "ab", "b/1"}}},
		{"prefix in pages of 2", "policy=tiers&prefix=a%2F&limit=2", [][]string{{"a/1", "a/2"}, {"a/3", "a/4"}, {"a/5"}}},
		{"prefix in one exact page", "policy=tiers&prefix=a%2F&limit=5", [][]string{{"a/1", "a/2", "a/3", "a/4", "a/5"}}},
		{"no match", "policy=tiers&prefix=z", [][]string{{}}},
		{"other policy", "policy=fixed", [][]string{{}}},
		{"unknown policy", "policy=nope", [][]string{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			query := tt.query
			for i, want := range tt.pages {
				p := e.listOverrides(query)
				var keys []string
				for _, o := range p.Overrides {
					keys = append(keys, o.Key)
				}
				if strings.Join(keys, " ") != strings.Join(want, " ") {
					t.Fatalf("page %d: keys %q, want %q", i, keys, want)
				}
				last := i == len(tt.pages)-1
				if last != (p.NextPageToken == nil) {
					t.Fatalf("page %d: nextPageToken %v, want one only before the last page", i, p.NextPageToken)
				}
				if !last {
					query = tt.query + "&pageToken=" + url.QueryEscape(*p.NextPageToken)
				}
			}
		})
	}
}

// TestOverridesBadInput sends every kind of bad input: each is refused naming its field, and
// stores nothing.
func TestOverridesBadInput(t *testing.T) {
	const maxBody = 4096
	e, srv := startOverrides(t, httpapi.Options{MaxBodyBytes: maxBody})
	acme := overridePath("tiers", "acme")
	long := overridePath("tiers", strings.Repeat("k", sluice.MaxKeyLen+1))
	tests := []struct {
		name, method, path, body string
		header                   []string // beside Content-Type: application/json, which a header here replaces
		status                   int
		code, part               string
	}{
		{"unknown plan", "PUT", acme, `{"plan":"gold"}`, nil, 400, httpapi.CodeInvalid, "plan"},
		{"plan of a policy without plans", "PUT", overridePath("fixed", "k"), `{"plan":"pro"}`, nil, 400, httpapi.CodeInvalid, "plan"},
		{"unknown policy", "PUT", overridePath("nope", "k"), `{"plan":"pro"}`, nil, 400, httpapi.CodeInvalid, "policy"},
		{"neither plan nor limits", "PUT", acme, `{"reason":"x"}`, nil, 400, httpapi.CodeInvalid, "plan"},
		{"plan and limits", "PUT", acme, `{"plan":"pro","limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1}]}`, nil, 400, httpapi.CodeInvalid, "plan"},
		{"negative capacity", "PUT", acme, `{"limits":[{"strategy":"tokenBucket","capacity":-1,"refillPerSec":1}]}`, nil, 400, httpapi.CodeInvalid, "limits[0]"},
		{"parameter of another strategy", "PUT", acme, `{"limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"capacity":3}]}`, nil, 400, httpapi.CodeInvalid, "limits[0].capacity"},
		{"unknown strategy", "PUT", acme, `{"limits":[{"strategy":"leaky"}]}`, nil, 400, httpapi.CodeInvalid, "limits[0].strategy"},
		{"unknown limit member", "PUT", acme, `{"limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1,"rate":2}]}`, nil, 400, httpapi.CodeInvalid, "limits[0].rate"},
		{"limit without strategy", "PUT", acme, `{"limits":[{"limit":1}]}`, nil, 400, httpapi.CodeInvalid, "limits[0].strategy"},
		{"ttlMs 0", "PUT", acme, `{"plan":"pro","ttlMs":0}`, nil, 400, httpapi.CodeInvalid, "ttlMs"},
		{"ttlMs -1", "PUT", acme, `{"plan":"pro","ttlMs":-1}`, nil, 400, httpapi.CodeInvalid, "ttlMs"},
		{"ttlMs too big", "PUT", acme, fmt.Sprintf(`{"plan":"pro","ttlMs":%d}`, int64(overrides.MaxTTLMs)+1), nil, 400, httpapi.CodeInvalid, "ttlMs"},
		{"ttlMs not an integer", "PUT", acme, `{"plan":"pro","ttlMs":1.5}`, nil, 400, httpapi.CodeInvalid, "ttlMs"},
		{"ttlMs and expiresAt", "PUT", acme, `{"plan":"pro","ttlMs":1000,"expiresAt":4102444800000}`, nil, 400, httpapi.CodeInvalid, "expiresAt"},
		{"expiresAt past", "PUT", acme, `{"plan":"pro","expiresAt":1000}`, nil, 400, httpapi.CodeInvalid, "expiresAt"},
		{"expiresAt negative", "PUT", acme, `{"plan":"pro","expiresAt":-5}`, nil, 400, httpapi.CodeInvalid, "expiresAt"},
		{"reason too long", "PUT", acme, `{"plan":"pro","reason":"` + strings.Repeat("r", overrides.MaxReasonLen+1) + `"}`, nil, 400, httpapi.CodeInvalid, "reason"},
		{"empty key", "PUT", "/v1/overrides/tiers/", `{"plan":"pro"}`, nil, 400, httpapi.CodeInvalid, "key"},
		{"key over MaxKeyLen", "PUT", long, `{"plan":"pro"}`, nil, 400, httpapi.CodeInvalid, "key"},
		{"key not UTF-8", "PUT", "/v1/overrides/tiers/%FF", `{"plan":"pro"}`, nil, 400, httpapi.CodeInvalid, "key"},
		{"policy in the body", "PUT", acme, `{"policy":"tiers","plan":"pro"}`, nil, 400, httpapi.CodeInvalid, `"policy"`},
		{"key in the body", "PUT", acme, `{"key":"acme","plan":"pro"}`, nil, 400, httpapi.CodeInvalid, `"key"`},
		{"unknown member", "PUT", acme, `{"plan":"pro","tier":"x"}`, nil, 400, httpapi.CodeInvalid, `"tier"`},
		{"member twice", "PUT", acme, `{"plan":"pro","plan":"free"}`, nil, 400, httpapi.CodeInvalid, `"plan"`},
		{"null member", "PUT", acme, `{"plan":null}`, nil, 400, httpapi.CodeInvalid, "plan"},
		{"not JSON", "PUT", acme, `{"plan":`, nil, 400, httpapi.CodeInvalid, "body"},
		{"trailing data", "PUT", acme, `{"plan":"pro"} {}`, nil, 400, httpapi.CodeInvalid, "body"},
		{"invalid UTF-8 in reason", "PUT", acme, "{\"plan\":\"pro\",\"reason\":\"\xff\"}", nil, 400, httpapi.CodeInvalid, "reason"},
		{"wrong content type", "PUT", acme, `{"plan":"pro"}`, []string{"Content-Type", "text/plain"}, 415, httpapi.CodeMediaType, "Content-Type"},
		{"oversized body", "PUT", acme, `{"plan":"pro","reason":"` + strings.Repeat("r", maxBody) + `"}`, nil, 400, httpapi.CodeTooLarge, "body"},
		{"GET of an empty key", "GET", "/v1/overrides/tiers/", "", nil, 400, httpapi.CodeInvalid, "key"},
		{"GET of a long key", "GET", long, "", nil, 400, httpapi.CodeInvalid, "key"},
		{"DELETE of an empty key", "DELETE", "/v1/overrides/tiers/", "", nil, 400, httpapi.CodeInvalid, "key"},
		{"DELETE with an unknown parameter", "DELETE", acme + "?why=x", "", nil, 400, httpapi.CodeInvalid, `"why"`},
		{"DELETE with two reasons", "DELETE", acme + "?reason=a&reason=b", "", nil, 400, httpapi.CodeInvalid, "reason"},
		{"DELETE with a long reason", "DELETE", acme + "?reason=" + strings.Repeat("r", 1025), "", nil, 400, httpapi.CodeInvalid, "reason"},
		{"DELETE with a bad query", "DELETE", acme + "?reason=%zz", "", nil, 400, httpapi.CodeInvalid, "query"},
		{"PATCH", "PATCH", acme, `{"plan":"pro"}`, nil, 405, httpapi.CodeMethodNotAllowed, "use PUT or GET or DELETE"},
		{"list without policy", "GET", "/v1/overrides", "", nil, 400, httpapi.CodeInvalid, "policy"},
		{"list with empty policy", "GET", "/v1/overrides?policy=", "", nil, 400, httpapi.CodeInvalid, "policy"},
		{"list limit 0", "GET", "/v1/overrides?policy=tiers&limit=0", "", nil, 400, httpapi.CodeInvalid, "limit"},
		{"list limit 1001", "GET", "/v1/overrides?policy=tiers&limit=1001", "", nil, 400, httpapi.CodeInvalid, "limit"},
		{"list limit not a number", "GET", "/v1/overrides?policy=tiers&limit=ten", "", nil, 400, httpapi.CodeInvalid, "limit"},
		{"list limit empty", "GET", "/v1/overrides?policy=tiers&limit=", "", nil, 400, httpapi.CodeInvalid, "limit"},
		{"list unknown parameter", "GET", "/v1/overrides?policy=tiers&plan=pro", "", nil, 400, httpapi.CodeInvalid, "plan"},
		{"list repeated parameter", "GET", "/v1/overrides?policy=tiers&policy=fixed", "", nil, 400, httpapi.CodeInvalid, "policy"},
		{"list bad query", "GET", "/v1/overrides?policy=%zz", "", nil, 400, httpapi.CodeInvalid, "query"},
		{"POST to the list", "POST", "/v1/overrides?policy=tiers", `{}`, nil, 405, httpapi.CodeMethodNotAllowed, "use GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := append([]string{"Content-Type", "application/json"}, tt.header...)
			if tt.method == "GET" || tt.method == "DELETE" {
				header = nil
			}
			wantError(t, e.do(tt.method, tt.path, tt.body, header...), tt.status, tt.code, tt.part)
			if n := srv.Overrides().Len(); n != 0 {
				t.Errorf("the Table holds %d overrides, want none", n)
			}
		})
	}
	t.Run("Allow header of a 405", func(t *testing.T) {
		if got := e.do("PATCH", acme, "").header.Get("Allow"); got != "PUT, GET, HEAD, DELETE" {
			t.Errorf("Allow %q, want PUT, GET, HEAD, DELETE", got)
		}
	})
}

func TestOverridesScopes(t *testing.T) {
	set, err := bearer.Parse([]byte("check:c1\nadmin:a1\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, srv := startOverrides(t, httpapi.Options{Tokens: bearer.NewLive(set)})
	acme := overridePath("tiers", "acme")
	ct := []string{"Content-Type", "application/json"}
	tests := []struct {
		name, method, path, body string
		header                   []string
	}{
		{"put", "PUT", acme, `{"plan":"pro"}`, ct},
		{"get", "GET", acme, "", nil},
		{"list", "GET", "/v1/overrides?policy=tiers", "", nil},
		{"delete", "DELETE", acme, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tt.body, append([]string{"Authorization", "Bearer c1"}, tt.header...)...)
			wantError(t, r, 403, httpapi.CodeForbiddenScope, "scope admin")
			wantError(t, e.do(tt.method, tt.path, tt.body, tt.header...), 401, httpapi.CodeUnauthorized, "bearer token")
			// In order, the admin's put is there to get, list and delete.
			r = e.do(tt.method, tt.path, tt.body, append([]string{"Authorization", "Bearer a1"}, tt.header...)...)
			if r.status != 200 {
				t.Errorf("admin token: %d %s", r.status, r.body)
			}
		})
	}
	if n := srv.Overrides().Len(); n != 0 {
		t.Errorf("the Table holds %d overrides after the admin's delete, want none", n)
	}
}

// TestOverridesApplyToChecks: a key moved to plan pro is checked under it, and decisions say so;
// other keys keep the default plan.
func TestOverridesApplyToChecks(t *testing.T) {
	e, _ := startOverrides(t, httpapi.Options{})
	wantOverride(t, e.put(overridePath("tiers", "acme"), `{"plan":"pro"}`))
	wantOverride(t, e.put(overridePath("tiers", "solo"), `{"limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":2}]}`))
	// GCRA's limit is its burst: pro 50, free 5, solo's own 2.
	tests := []struct {
		name, path, body, want string
	}{
		{"check under pro", "/v1/check", `{"policy":"tiers","key":"acme","now":1700000040000}`,
			`{"allowed":true,"limit":50,"remaining":49,"resetAt":1700000040100,"retryAfterMs":0,"plan":"pro","override":true}`},
		{"peek under pro", "/v1/peek", `{"policy":"tiers","key":"acme","now":1700000040000}`,
			`{"allowed":true,"limit":50,"remaining":49,"resetAt":1700000040100,"retryAfterMs":0,"plan":"pro","override":true}`},
		{"check under the default plan", "/v1/check", `{"policy":"tiers","key":"other","now":1700000040000}`,
			`{"allowed":true,"limit":5,"remaining":4,"resetAt":1700000041000,"retryAfterMs":0,"plan":"free"}`},
		{"peek under the default plan", "/v1/peek", `{"policy":"tiers","key":"other","now":1700000040000}`,
			`{"allowed":true,"limit":5,"remaining":4,"resetAt":1700000041000,"retryAfterMs":0,"plan":"free"}`},
		{"check under own limits", "/v1/check", `{"policy":"tiers","key":"solo","now":1700000040000}`,
			`{"allowed":true,"limit":2,"remaining":1,"resetAt":1700000041000,"retryAfterMs":0,"override":true}`},
		{"check-many", "/v1/check-many", `{"policy":"tiers","keys":["acme","next"],"now":1700000040000}`,
			`{"decisions":[{"allowed":true,"limit":50,"remaining":48,"resetAt":1700000040200,"retryAfterMs":0,"plan":"pro","override":true},
			 {"allowed":true,"limit":5,"remaining":4,"resetAt":1700000041000,"retryAfterMs":0,"plan":"free"}]}`},
		{"check-all", "/v1/check-all", `{"items":[{"policy":"tiers","key":"acme"},{"policy":"fixed","key":"acme"}],"now":1700000040000}`,
			`{"allowed":true,"deniedBy":-1,"decisions":[{"allowed":true,"limit":50,"remaining":47,"resetAt":1700000040300,"retryAfterMs":0,"plan":"pro","override":true},
			 {"allowed":true,"limit":100,"remaining":99,"resetAt":1700000100000,"retryAfterMs":0}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.post(tt.path, tt.body)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			sameJSON(t, r.body, tt.want)
		})
	}
}

// The gate's RateLimit fields describe the limit the key was checked under: its override's plan,
// or the default plan's.
func TestOverridesGateHeaders(t *testing.T) {
	e, _ := startOverrides(t, httpapi.Options{})
	wantOverride(t, e.put(overridePath("tiers", "acme"), `{"plan":"pro"}`))
	for _, tt := range []struct{ name, key, policy, fields string }{
		{"under the override's plan", "acme", `"tiers";q=50;w=5`, `"tiers";r=49;t=1`},
		{"under the default plan", "other", `"tiers";q=5;w=5`, `"tiers";r=4;t=1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", "/v1/gate/tiers?key="+tt.key+"&now=1700000040000", "")
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := r.header.Get("RateLimit-Policy"); got != tt.policy {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tt.policy)
			}
			if got := r.header.Get("RateLimit"); got != tt.fields {
				t.Errorf("RateLimit = %q, want %q", got, tt.fields)
			}
		})
	}
}

// TestOverrideJSON: the answer of a PUT is the override's wire form, as package overrides writes it.
func TestOverrideJSON(t *testing.T) {
	e, _ := startOverrides(t, httpapi.Options{})
	r := e.put(overridePath("tiers", "acme"), `{"plan":"pro","expiresAt":4102444800000,"reason":"a<b"}`)
	o := wantOverride(t, r)
	want, err := overrides.EncodeOverride(o)
	if err != nil {
		t.Fatal(err)
	}
	var got, w map[string]any
	if json.Unmarshal(r.body, &got) != nil || json.Unmarshal(want, &w) != nil || fmt.Sprint(got) != fmt.Sprint(w) {
		t.Errorf("PUT answered %s, want %s", r.body, want)
	}
}
