package httpapi_test

import (
	"strings"
	"testing"
)

// Concurrency limits over HTTP, in order: each step builds on the state the ones before left.
func TestConcurrencyRoutes(t *testing.T) {
	e := replay(t)
	for _, tt := range []struct {
		name, path, body string
		status           int
		want             string // in the body
	}{
		{"first holder", "/v1/admit", `{"name":"jobs","key":"t","holder":"a","limit":2,"ttlMs":1000,"now":1700000040000}`, 200,
			`{"allowed":true,"inFlight":1,"limit":2,"retryAfterMs":0}`},
		{"second holder", "/v1/admit", `{"name":"jobs","key":"t","holder":"b","limit":2,"ttlMs":1000,"now":1700000040100}`, 200,
			`{"allowed":true,"inFlight":2,"limit":2,"retryAfterMs":0}`},
		{"third holder waits for a's lease", "/v1/admit", `{"name":"jobs","key":"t","holder":"c","limit":2,"ttlMs":1000,"now":1700000040200}`, 200,
			`{"allowed":false,"inFlight":2,"limit":2,"retryAfterMs":800}`},
		{"a releases", "/v1/release", `{"name":"jobs","key":"t","holder":"a"}`, 200, `{}`},
		{"b heartbeats", "/v1/heartbeat", `{"name":"jobs","key":"t","holder":"b","ttlMs":1000,"now":1700000040500}`, 200, `{}`},
		{"a heartbeats a released slot", "/v1/heartbeat", `{"name":"jobs","key":"t","holder":"a","ttlMs":1000,"now":1700000040500}`, 409, `"code":"not_held"`},
		{"admit without ttlMs", "/v1/admit", `{"name":"jobs","key":"t","holder":"a","limit":2}`, 400, `ttlMs: is missing`},
		{"admit with limit 0", "/v1/admit", `{"name":"jobs","key":"t","holder":"a","limit":0,"ttlMs":1}`, 400, `invalid limit`},
		{"release takes no ttlMs", "/v1/release", `{"name":"jobs","key":"t","holder":"a","ttlMs":1}`, 400, `unknown field \"ttlMs\"`},
	} {
		r := e.post(tt.path, tt.body)
		if r.status != tt.status || !strings.Contains(string(r.body), tt.want) {
			t.Errorf("%s: %d %s, want %d with %s", tt.name, r.status, r.body, tt.status, tt.want)
		}
	}
}
