package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestCostZeroMeansOne holds every door of the HTTP API to gRPC's rule, where proto3 cannot tell
// an unset cost from 0: a cost of 0, given or left out, spends (or refunds) 1. A negative cost is
// 400 naming its field.
func TestCostZeroMeansOne(t *testing.T) {
	const now = t0
	tests := []struct {
		name   string
		method string
		// target and body are formats of the request's cost (costMember or costParam) and now.
		target, body string
		query        bool // the cost goes in the target's query, not the body
		// remaining is what key "k" of policy "fixed" (100 a minute) has left after a refund of 1
		// following a check of 5, or after a check of 1.
		remaining int64
		refund    bool
		field     string // what a negative cost's error names
	}{
		{"check", "POST", "/v1/check", `{"policy":"fixed","key":"k"%s,"now":%d}`, false, 99, false, "cost"},
		{"check-many", "POST", "/v1/check-many", `{"policy":"fixed","keys":["k"]%s,"now":%d}`, false, 99, false, "cost"},
		{"check-all item", "POST", "/v1/check-all", `{"items":[{"policy":"fixed","key":"k"%s}],"now":%d}`, false, 99, false, "items[0].cost"},
		{"gate", "GET", "/v1/gate/fixed?key=k%s&now=%d", "", true, 99, false, "cost"},
		{"refund", "POST", "/v1/refund", `{"policy":"fixed","key":"k"%s,"now":%d}`, false, 96, true, "cost"},
	}
	request := func(e *env, method, target, body string, query bool, cost string) reply {
		t.Helper()
		if query {
			return e.do(method, fmt.Sprintf(target, costParam(cost), now), body)
		}
		return e.do(method, target, fmt.Sprintf(body, costMember(cost), now))
	}
	for _, tt := range tests {
		for _, cost := range []string{"0", "", "1"} {
			t.Run(fmt.Sprintf("%s/cost %q", tt.name, cost), func(t *testing.T) {
				e := replay(t)
				if tt.refund {
					e.check("fixed", "k", 5, now) // something to give back
				}
				if r := request(e, tt.method, tt.target, tt.body, tt.query, cost); r.status != http.StatusOK {
					t.Fatalf("%s %s: %d %s", tt.method, tt.target, r.status, r.body)
				}
				if got := e.peek("fixed", "k", now).Remaining; got != tt.remaining {
					t.Errorf("remaining %d after the request, want %d", got, tt.remaining)
				}
			})
		}
		t.Run(tt.name+"/negative cost", func(t *testing.T) {
			e := replay(t)
			r := request(e, tt.method, tt.target, tt.body, tt.query, "-1")
			wantError(t, r, http.StatusBadRequest, "invalid_argument", "invalid "+tt.field)
		})
	}

	t.Run("forecast", func(t *testing.T) {
		e := replay(t)
		e.check("fixed", "k", 40, now)
		want := e.post("/v1/forecast", fmt.Sprintf(`{"policy":"fixed","key":"k","cost":1,"now":%d}`, now))
		for _, cost := range []string{"0", ""} {
			got := e.post("/v1/forecast", fmt.Sprintf(`{"policy":"fixed","key":"k"%s,"now":%d}`, costMember(cost), now))
			if got.status != http.StatusOK {
				t.Fatalf("forecast of cost %q: %d %s", cost, got.status, got.body)
			}
			sameJSON(t, got.body, string(want.body))
		}
		wantError(t, e.post("/v1/forecast", `{"policy":"fixed","key":"k","cost":-1}`), http.StatusBadRequest, "invalid_argument", "invalid cost")
	})
}

// costMember is a body's cost member, or nothing for "".
func costMember(cost string) string {
	if cost == "" {
		return ""
	}
	return `,"cost":` + cost
}

// costParam is the gate's cost parameter, or nothing for "".
func costParam(cost string) string {
	if cost == "" {
		return ""
	}
	return "&cost=" + cost
}
