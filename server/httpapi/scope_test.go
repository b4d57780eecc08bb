package httpapi_test

import (
	"testing"

	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/httpapi"
)

func TestScopes(t *testing.T) {
	set, err := bearer.Parse([]byte("check:c1\nadmin:a1\nbare1\n"))
	if err != nil {
		t.Fatal(err)
	}
	live := bearer.NewLive(set)
	e := start(t, setup{opts: httpapi.Options{Tokens: live}})
	const (
		check  = `{"policy":"fixed","key":"k"}`
		refund = `{"policy":"fixed","key":"k","cost":1}`
		settle = `{"policy":"fixed","key":"k","reserved":2,"actual":1}`
		admit  = `{"name":"jobs","key":"t","holder":"h","limit":2,"ttlMs":1000}`
	)
	tests := []struct {
		name, method, path, body, token string
		status                          int
	}{
		{"check token checks", "POST", "/v1/check", check, "c1", 200},
		{"check token peeks", "POST", "/v1/peek", check, "c1", 200},
		{"check token forecasts", "POST", "/v1/forecast", check, "c1", 200},
		{"check token passes the gate", "GET", "/v1/gate/fixed?key=k", "", "c1", 200},
		{"check token admits", "POST", "/v1/admit", admit, "c1", 200},
		{"check token cannot reset", "POST", "/v1/reset", check, "c1", 403},
		{"check token cannot refund", "POST", "/v1/refund", refund, "c1", 403},
		{"check token cannot settle", "POST", "/v1/settle", settle, "c1", 403},
		{"check token gets 403 before 405", "GET", "/v1/reset", "", "c1", 403},
		{"admin token checks", "POST", "/v1/check", check, "a1", 200},
		{"admin token passes the gate", "GET", "/v1/gate/fixed?key=k", "", "a1", 200},
		{"admin token resets", "POST", "/v1/reset", check, "a1", 200},
		{"admin token refunds", "POST", "/v1/refund", refund, "a1", 200},
		{"admin token settles", "POST", "/v1/settle", settle, "a1", 200},
		{"bare token resets", "POST", "/v1/reset", check, "bare1", 200},
		{"unknown token cannot check", "POST", "/v1/check", check, "zz", 401},
		{"unknown token cannot reset", "POST", "/v1/reset", check, "zz", 401},
		{"scoped line is not a token", "POST", "/v1/check", check, "check:c1", 401},
		{"no token", "POST", "/v1/reset", check, "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.token != "" {
				hdr = []string{"Authorization", "Bearer " + tt.token}
			}
			r := e.do(tt.method, tt.path, tt.body, hdr...)
			switch tt.status {
			case 401:
				wantError(t, r, 401, "unauthorized", "bearer token")
				if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="sluice"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
			case 403:
				wantError(t, r, 403, httpapi.CodeForbiddenScope, "scope admin")
			default:
				if r.status != tt.status {
					t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
				}
			}
		})
	}
}

// TestScopesReload swaps the token set under a running handler: the next request sees it.
func TestScopesReload(t *testing.T) {
	live := bearer.NewLive(bearer.Of("old"))
	e := start(t, setup{opts: httpapi.Options{Tokens: live}})
	const body = `{"policy":"fixed","key":"k"}`
	if r := e.do("POST", "/v1/reset", body, "Authorization", "Bearer old"); r.status != 200 {
		t.Fatalf("old token before the swap: %d %s", r.status, r.body)
	}
	next, err := bearer.Parse([]byte("check:new\n"))
	if err != nil {
		t.Fatal(err)
	}
	live.Store(next)
	if r := e.do("POST", "/v1/check", body, "Authorization", "Bearer old"); r.status != 401 {
		t.Errorf("old token after the swap: %d, want 401", r.status)
	}
	if r := e.do("POST", "/v1/check", body, "Authorization", "Bearer new"); r.status != 200 {
		t.Errorf("new token checks: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/reset", body, "Authorization", "Bearer new"); r.status != 403 {
		t.Errorf("new check token resets: %d, want 403", r.status)
	}
}
