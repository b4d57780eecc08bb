package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/regionsim"
	"github.com/sluicehq/sluice/region"
)

// postSimulate runs simulateRegions on body sent as contentType ("" sends none).
func postSimulate(t testing.TB, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/console/regions/simulate", strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	simulateRegions(w, r)
	return w
}

func TestSimulateRegionsHandler(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		regions []string // the order given
		floor   float64
	}{
		{"docs/regions.md's example, default floor", `{"limit": 900, "demand": {"mumbai": 600, "frankfurt": 200, "virginia": 100}}`,
			[]string{"mumbai", "frankfurt", "virginia"}, region.DefaultFloor},
		{"the order given, not sorted", `{"demand": {"zurich": 10, "austin": 200}, "floor": 0, "limit": 50}`,
			[]string{"zurich", "austin"}, 0},
		{"one region", `{"limit": 1, "demand": {"a": 0}, "floor": 0.5}`, []string{"a"}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := postSimulate(t, "application/json; charset=utf-8", tt.body)
			if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
			}
			var got simulationView
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			var req struct {
				Limit  int64            `json:"limit"`
				Demand map[string]int64 `json:"demand"`
			}
			if err := json.Unmarshal([]byte(tt.body), &req); err != nil {
				t.Fatal(err)
			}
			want, err := regionsim.Simulate(regionsim.Config{Limit: req.Limit, Regions: tt.regions, Demand: req.Demand, Floor: tt.floor})
			if err != nil {
				t.Fatal(err)
			}
			if got.Limit != req.Limit || got.Floor != tt.floor || got.Every != 1 || got.Minutes != regionsim.HourMinutes {
				t.Errorf("limit %d, floor %v, every %d, minutes %d", got.Limit, got.Floor, got.Every, got.Minutes)
			}
			names := make([]string, len(got.Regions))
			for i, rv := range got.Regions {
				names[i] = rv.Name
			}
			if !slices.Equal(names, tt.regions) {
				t.Fatalf("regions %q, want the order given %q", names, tt.regions)
			}
			for i, rv := range got.Regions {
				for m, minute := range want.Minutes {
					d, even, reb := minute.Demand[rv.Name], minute.Even[rv.Name], minute.Rebalanced[rv.Name]
					if rv.Demand[m] != d || rv.Even[m] != even || rv.Rebalanced[m] != reb ||
						rv.ServedEven[m] != min(d, even) || rv.ServedRebalanced[m] != min(d, reb) {
						t.Fatalf("region %s, minute %d: %d %d %d %d %d, want demand %d, even %d, rebalanced %d",
							rv.Name, m, rv.Demand[m], rv.Even[m], rv.Rebalanced[m], rv.ServedEven[m], rv.ServedRebalanced[m], d, even, reb)
					}
				}
				rt := want.RegionTotals()[i]
				if rv.Total != (regionTotalView{rt.Demand, rt.EvenShare, rt.RebalancedShare, rt.ServedEven, rt.ServedRebalanced}) {
					t.Errorf("region %s: total %+v, want %+v", rv.Name, rv.Total, rt)
				}
			}
			for m, minute := range want.Minutes {
				var d int64
				for _, v := range minute.Demand {
					d += v
				}
				f := got.Fleet
				if f.Demand[m] != d || f.Servable[m] != min(d, req.Limit) || f.ServedEven[m] != minute.ServedEven || f.ServedRebalanced[m] != minute.ServedRebalanced {
					t.Fatalf("fleet, minute %d: %d %d %d %d", m, f.Demand[m], f.Servable[m], f.ServedEven[m], f.ServedRebalanced[m])
				}
			}
			if wt := want.Totals(); got.Totals != (fleetTotalView{wt.Demand, wt.Servable, wt.Even, wt.Rebalanced}) {
				t.Errorf("totals %+v, want %+v", got.Totals, wt)
			}
		})
	}
}

// manyRegions is {"r0": 1, "r1": 1, ...} with n regions.
func manyRegions(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"r%d": 1`, i)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func TestSimulateRegionsBadInput(t *testing.T) {
	const ok = `{"limit": 900, "demand": {"a": 1}}`
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		field       string // a word the message must hold
	}{
		{"no content type", "", ok, 415, "unsupported_media_type", "application/json"},
		{"text", "text/plain", ok, 415, "unsupported_media_type", "application/json"},
		{"a form", "application/x-www-form-urlencoded", ok, 415, "unsupported_media_type", "application/json"},
		{"malformed content type", "application/json; =", ok, 415, "unsupported_media_type", "application/json"},
		{"too large", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": 0.` + strings.Repeat("1", maxSimulateBody) + `}`, 413, codeTooLarge, "64 KiB"},
		{"empty", "application/json", "", 400, codeInvalid, "empty"},
		{"not an object", "application/json", `[1]`, 400, codeInvalid, "object"},
		{"null", "application/json", `null`, 400, codeInvalid, "object"},
		{"not JSON", "application/json", `{limit: 1}`, 400, codeInvalid, "JSON"},
		{"cut short", "application/json", `{"limit": 900, "demand": {"a": 1}`, 400, codeInvalid, "JSON"},
		{"two objects", "application/json", ok + ok, 400, codeInvalid, "more than one"},
		{"something after", "application/json", ok + ` x`, 400, codeInvalid, "more than one"},
		{"unknown field", "application/json", `{"limit": 900, "demand": {"a": 1}, "regions": ["a"]}`, 400, codeInvalid, `"regions"`},
		{"differently cased field", "application/json", `{"Limit": 900, "demand": {"a": 1}}`, 400, codeInvalid, `"Limit"`},
		{"no limit", "application/json", `{"demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"limit twice", "application/json", `{"limit": 9, "limit": 900, "demand": {"a": 1}}`, 400, codeInvalid, "limit: given twice"},
		{"zero limit", "application/json", `{"limit": 0, "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"fractional limit", "application/json", `{"limit": 1.5, "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"limit in an exponent", "application/json", `{"limit": 9e2, "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"limit as a string", "application/json", `{"limit": "900", "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"null limit", "application/json", `{"limit": null, "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"limit above 2^53", "application/json", `{"limit": 9007199254740993, "demand": {"a": 1}}`, 400, codeInvalid, "limit"},
		{"no demand", "application/json", `{"limit": 900}`, 400, codeInvalid, "demand"},
		{"no regions", "application/json", `{"limit": 900, "demand": {}}`, 400, codeInvalid, "demand"},
		{"demand as a list", "application/json", `{"limit": 900, "demand": [1]}`, 400, codeInvalid, "demand"},
		{"negative demand", "application/json", `{"limit": 900, "demand": {"a": 1, "b": -1}}`, 400, codeInvalid, "demand.b"},
		{"fractional demand", "application/json", `{"limit": 900, "demand": {"a": 0.5}}`, 400, codeInvalid, "demand.a"},
		{"demand as an object", "application/json", `{"limit": 900, "demand": {"a": {"n": 1}}}`, 400, codeInvalid, "demand.a"},
		{"a region twice", "application/json", `{"limit": 900, "demand": {"a": 1, "a": 2}}`, 400, codeInvalid, "demand.a: given twice"},
		{"a bad region name", "application/json", `{"limit": 900, "demand": {"new york": 1}}`, 400, codeInvalid, "demand"},
		{"an empty region name", "application/json", `{"limit": 900, "demand": {"": 1}}`, 400, codeInvalid, "demand"},
		{"too many regions", "application/json", `{"limit": 900, "demand": ` + manyRegions(regionsim.MaxRegions+1) + `}`, 400, codeInvalid, "at most 64 regions"},
		{"total demand above 2^53", "application/json", `{"limit": 900, "demand": {"a": 9007199254740992, "b": 1}}`, 400, codeInvalid, "demand: the total"},
		{"floor of 1", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": 1}`, 400, codeInvalid, "floor"},
		{"negative floor", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": -0.1}`, 400, codeInvalid, "floor"},
		{"huge floor", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": 1e999}`, 400, codeInvalid, "floor"},
		{"floor as a string", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": "0.1"}`, 400, codeInvalid, "floor"},
		{"null floor", "application/json", `{"limit": 900, "demand": {"a": 1}, "floor": null}`, 400, codeInvalid, "floor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := postSimulate(t, tt.contentType, tt.body)
			e := wantErrorBody(t, w, tt.status, tt.code)
			if !strings.Contains(e.Error, tt.field) {
				t.Errorf("error %q does not name %s", e.Error, tt.field)
			}
		})
	}
	// 64 regions, the most, pass.
	if w := postSimulate(t, "application/json", `{"limit": 900, "demand": `+manyRegions(regionsim.MaxRegions)+`}`); w.Code != http.StatusOK {
		t.Fatalf("64 regions: status %d: %s", w.Code, w.Body)
	}
}

// wantErrorBody fails unless w answered status with the error body of code.
func wantErrorBody(t testing.TB, w *httptest.ResponseRecorder, status int, code string) errorBody {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	var e errorBody
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code != code || !strings.HasPrefix(e.Error, "console: ") {
		t.Fatalf("body %+v (%v), want code %q and an error starting console: ", e, err, code)
	}
	return e
}

// FuzzSimulateBody: whatever the body, the answer is the simulation or a 4xx with the error body;
// never a panic or a 500.
func FuzzSimulateBody(f *testing.F) {
	for _, s := range []string{
		`{"limit": 900, "demand": {"mumbai": 600, "frankfurt": 200, "virginia": 100}, "floor": 0.1}`,
		`{"limit": 1, "demand": {"a": 0}}`, `{"limit": 9007199254740992, "demand": {"a": 9007199254740992}, "floor": 0.999}`,
		`{"limit": 900, "demand": {"a": 1}}{}`, `{"demand": {"a": -1}}`, `{"limit": 1e3}`, `[]`, `"x"`, ``, `{`,
		`{"limit": 900, "demand": {"a": 1, "a": 2}}`, `{"limit": 900, "demand": {"é": 1}}`, `{"floor": NaN}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		w := postSimulate(t, "application/json", body)
		if w.Code == http.StatusOK {
			var v simulationView
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.Minutes != regionsim.HourMinutes || len(v.Regions) == 0 {
				t.Fatalf("%q: 200 with %v: %.200s", body, err, w.Body)
			}
			for _, rv := range v.Regions {
				if regionsim.CheckRegionName(rv.Name) != nil || len(rv.Demand) != v.Minutes {
					t.Fatalf("%q: region %q", body, rv.Name)
				}
			}
			return
		}
		if w.Code < 400 || w.Code > 499 {
			t.Fatalf("%q: status %d: %s", body, w.Code, w.Body)
		}
		var e errorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || !strings.HasPrefix(e.Error, "console: ") {
			t.Fatalf("%q: status %d with body %q", body, w.Code, w.Body)
		}
	})
}

// TestSimulateField: Simulate's fields, should one get past decodeSimulate, are the body's.
func TestSimulateField(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a region's demand", &sluice.InvalidError{Field: "demand[mumbai]", Reason: "must be at least 0"}, "demand.mumbai: must be at least 0"},
		{"the regions", &sluice.InvalidError{Field: "regions[1]", Reason: "listed twice"}, "demand: listed twice"},
		{"the limit", &sluice.InvalidError{Field: "limit", Reason: "too big"}, "limit: too big"},
		{"not an InvalidError", errors.New("regionsim: minute 3: broken"), "regionsim: minute 3: broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := simulateField(tt.err); got != tt.want {
				t.Errorf("%q, want %q", got, tt.want)
			}
		})
	}
}
