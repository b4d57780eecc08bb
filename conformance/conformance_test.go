package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store/memory"
)

const (
	gcra3 = `{"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3}`
	// expect0 is what the first check of gcra3 on a fresh key at now 1000 returns.
	expect0 = `"expect": {"allowed": true, "limit": 3, "remaining": 2, "resetAt": 1334, "retryAfterMs": 0}`
	step0   = `{"key": "k", "now": 1000, "cost": 1, ` + expect0 + `}`
)

// vectorFile wraps cases into a file of the current format.
func vectorFile(cases ...string) string {
	return `{"format": "sluice-vectors/1", "cases": [` + strings.Join(cases, ",") + `]}`
}

// vectorCase is a case named "c" of strategy and steps.
func vectorCase(strategy string, steps ...string) string {
	return `{"name": "c", "strategy": ` + strategy + `, "steps": [` + strings.Join(steps, ",") + `]}`
}

// step wraps a step's fields, so that a test can leave some out.
func step(fields string) string { return "{" + fields + "}" }

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error message that locate the problem
	}{
		{name: "empty input", in: ``, want: []string{"EOF"}},
		{name: "not JSON", in: `sluice`, want: []string{"invalid character"}},
		{name: "missing format", in: `{"cases": []}`, want: []string{"format must be"}},
		{name: "wrong format", in: `{"format": "sluice-vectors/2", "cases": []}`, want: []string{"format must be", "sluice-vectors/1"}},
		{name: "null file", in: `null`, want: []string{"format must be"}},
		{name: "cases not a list", in: `{"format": "sluice-vectors/1", "cases": {}}`, want: []string{"cases"}},
		{name: "unknown file field", in: `{"format": "sluice-vectors/1", "cases": [], "seed": 4}`, want: []string{`unknown field "seed"`}},
		{name: "trailing garbage", in: vectorFile() + ` x`, want: []string{"trailing data"}},
		{name: "stray closing brace", in: vectorFile(vectorCase(gcra3, step0)) + `}`, want: []string{"trailing data"}},
		{name: "no cases", in: `{"format": "sluice-vectors/1"}`, want: []string{"at least one case"}},
		{name: "null cases", in: `{"format": "sluice-vectors/1", "cases": null}`, want: []string{"at least one case"}},
		{
			name: "zero cost",
			in:   vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 1000, "cost": 0, `+expect0))),
			want: []string{"cases[0].steps[0]", "cost of at least 1"},
		},
		{
			name: "empty key",
			in:   vectorFile(vectorCase(gcra3, step(`"key": "", "now": 1000, "cost": 1, `+expect0))),
			want: []string{"cases[0].steps[0]", "non-empty key"},
		},
		{name: "two files in one", in: vectorFile() + vectorFile(), want: []string{"trailing data"}},
		{
			name: "unknown case field",
			in:   vectorFile(`{"name": "c", "strategy": ` + gcra3 + `, "steps": [], "notes": "x"}`),
			want: []string{`unknown field "notes"`},
		},
		{
			name: "missing case name",
			in:   vectorFile(`{"strategy": ` + gcra3 + `, "steps": []}`),
			want: []string{"cases[0].name is missing"},
		},
		{
			name: "missing strategy",
			in:   vectorFile(`{"name": "c", "steps": []}`),
			want: []string{"cases[0].strategy"},
		},
		{
			name: "strategy not an object",
			in:   vectorFile(vectorCase(`[1]`)),
			want: []string{"cases[0].strategy"},
		},
		{
			name: "unknown strategy field",
			in:   vectorFile(vectorCase(`{"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3, "jitter": 1}`)),
			want: []string{"cases[0].strategy", `unknown field "jitter"`},
		},
		{
			name: "unknown kind",
			in:   vectorFile(vectorCase(`{"kind": "leakyBucket", "limit": 3}`)),
			want: []string{"cases[0].strategy", `unknown kind "leakyBucket"`},
		},
		{
			name: "missing kind",
			in:   vectorFile(vectorCase(`{"limit": 3, "periodMs": 1000, "burst": 3}`)),
			want: []string{"cases[0].strategy", `unknown kind ""`},
		},
		{
			name: "limit zero",
			in:   vectorFile(vectorCase(`{"kind": "fixedWindow", "limit": 0, "windowMs": 1000}`)),
			want: []string{"cases[0].strategy", "limit"},
		},
		{
			name: "missing parameter",
			in:   vectorFile(vectorCase(`{"kind": "gcra", "limit": 3, "burst": 3}`)),
			want: []string{"cases[0].strategy", "periodMs"},
		},
		{
			name: "negative refill",
			in:   vectorFile(vectorCase(`{"kind": "tokenBucket", "capacity": 5, "refillPerSec": -1}`)),
			want: []string{"cases[0].strategy", "refillPerSec"},
		},
		{
			name: "NaN as a string",
			in:   vectorFile(vectorCase(`{"kind": "gcra", "limit": "NaN", "periodMs": 1000, "burst": 3}`)),
			want: []string{"cases[0].strategy", "limit"},
		},
		{
			name: "infinite limit",
			in:   vectorFile(vectorCase(`{"kind": "gcra", "limit": 1e999, "periodMs": 1000, "burst": 3}`)),
			want: []string{"cases[0].strategy", "limit"},
		},
		{
			name: "limit past 2^53",
			in:   vectorFile(vectorCase(`{"kind": "fixedWindow", "limit": 1e300, "windowMs": 1000}`)),
			want: []string{"cases[0].strategy", "limit"},
		},
		{
			name: "buckets zero",
			in:   vectorFile(vectorCase(`{"kind": "slidingWindow", "limit": 3, "windowMs": 1000, "buckets": 0}`)),
			want: []string{"cases[0].strategy", "buckets"},
		},
		{
			name: "fractional buckets",
			in:   vectorFile(vectorCase(`{"kind": "slidingWindow", "limit": 3, "windowMs": 1000, "buckets": 1.5}`)),
			want: []string{"cases[0].strategy", "buckets"},
		},
		{
			name: "fractional log limit",
			in:   vectorFile(vectorCase(`{"kind": "slidingWindowLog", "limit": 2.5, "windowMs": 1000}`)),
			want: []string{"cases[0].strategy", "limit"},
		},
		{
			name: "bad strategy in a later case",
			in:   vectorFile(vectorCase(gcra3), vectorCase(`{"kind": "gcra", "limit": 3, "periodMs": 0.5, "burst": 3}`)),
			want: []string{"cases[1].strategy", "periodMs"},
		},
		{
			name: "missing key",
			in:   vectorFile(vectorCase(gcra3, step0, step(`"now": 1000, "cost": 1, `+expect0))),
			want: []string{"cases[0].steps[1] needs key"},
		},
		{
			name: "missing now",
			in:   vectorFile(vectorCase(gcra3, step0, step(`"key": "k", "cost": 1, `+expect0))),
			want: []string{"cases[0].steps[1] needs"},
		},
		{
			name: "missing cost",
			in:   vectorFile(vectorCase(gcra3, step0, step(`"key": "k", "now": 1000, `+expect0))),
			want: []string{"cases[0].steps[1] needs"},
		},
		{
			name: "missing expect",
			in:   vectorFile(vectorCase(gcra3, step0, step(`"key": "k", "now": 1000, "cost": 1`))),
			want: []string{"cases[0].steps[1] needs"},
		},
		{
			name: "unknown step field",
			in:   vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 1000, "cost": 1, "sleep": 5, `+expect0))),
			want: []string{`unknown field "sleep"`},
		},
		{
			name: "unknown expect field",
			in: vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 1000, "cost": 1,
				"expect": {"allowed": true, "limit": 3, "remaining": 2, "resetAt": 1334, "retryAfterMs": 0, "deniedBy": -1}`))),
			want: []string{`unknown field "deniedBy"`},
		},
		{
			name: "zero now",
			in:   vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 0, "cost": 1, `+expect0))),
			want: []string{"cases[0].steps[0].now must be positive"},
		},
		{
			name: "negative now",
			in:   vectorFile(vectorCase(gcra3, step0, step(`"key": "k", "now": -1000, "cost": 1, `+expect0))),
			want: []string{"cases[0].steps[1].now must be positive"},
		},
		{
			name: "fractional now",
			in:   vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 1000.5, "cost": 1, `+expect0))),
			want: []string{"now"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := conformance.Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse accepted %s: %+v", tt.in, f)
			}
			if !errors.Is(err, conformance.ErrFormat) {
				t.Errorf("error %v does not match ErrFormat", err)
			}
			if f != nil {
				t.Errorf("Parse returned a file with its error: %+v", f)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestParseStrategies(t *testing.T) {
	tests := []struct {
		name     string
		strategy string
		want     sluice.Strategy
	}{
		{name: "gcra", strategy: gcra3, want: sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 3}},
		{
			name:     "token bucket with a fractional rate",
			strategy: `{"kind": "tokenBucket", "capacity": 100, "refillPerSec": 1.6666666666666667}`,
			want:     sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60},
		},
		{
			name:     "fixed window",
			strategy: `{"kind": "fixedWindow", "limit": 10, "windowMs": 60000}`,
			want:     sluice.FixedWindow{Limit: 10, WindowMs: 60000},
		},
		{
			name:     "sliding window",
			strategy: `{"kind": "slidingWindow", "limit": 10, "windowMs": 60000, "buckets": 6}`,
			want:     sluice.SlidingWindow{Limit: 10, WindowMs: 60000, Buckets: 6},
		},
		{
			name:     "sliding window log",
			strategy: `{"kind": "slidingWindowLog", "limit": 10, "windowMs": 60000}`,
			want:     sluice.SlidingWindowLog{Limit: 10, WindowMs: 60000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := conformance.Parse([]byte(vectorFile(vectorCase(tt.strategy))))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Cases[0].Strategy; got != tt.want {
				t.Errorf("strategy %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestParseVectorFiles(t *testing.T) {
	tests := []struct {
		name  string
		path  string
		cases int
		steps int
	}{
		{name: "reference", path: "testdata/vectors/reference.json", cases: 35, steps: 1400},
		{name: "throttlekit golden", path: "testdata/vectors/throttlekit-golden.json", cases: 9, steps: 54},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := conformance.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if steps := f.Steps(); len(f.Cases) != tt.cases || steps != tt.steps {
				t.Errorf("%d cases and %d steps, want %d and %d", len(f.Cases), f.Steps(), tt.cases, tt.steps)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	want := conformance.Expect{Allowed: true, Limit: 3, Remaining: 2, ResetAt: 1334, RetryAfterMs: 0}
	same := sluice.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAt: 1334, DeniedBy: -1}
	tests := []struct {
		name string
		got  sluice.Decision
		want []conformance.Failure
	}{
		{name: "equal", got: same},
		{
			name: "parts and deniedBy are not compared",
			got:  sluice.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAt: 1334, DeniedBy: 4, Parts: []sluice.Decision{{}}},
		},
		{
			name: "one field",
			got:  sluice.Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAt: 1334},
			want: []conformance.Failure{{Field: "remaining", Want: "2", Got: "1"}},
		},
		{
			name: "every field, in order",
			got:  sluice.Decision{Allowed: false, Limit: 4, Remaining: 0, ResetAt: 1500, RetryAfterMs: 100},
			want: []conformance.Failure{
				{Field: "allowed", Want: "true", Got: "false"},
				{Field: "limit", Want: "3", Got: "4"},
				{Field: "remaining", Want: "2", Got: "0"},
				{Field: "resetAt", Want: "1334", Got: "1500"},
				{Field: "retryAfterMs", Want: "0", Got: "100"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := conformance.Diff(want, tt.got)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Diff = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFailureString(t *testing.T) {
	f := conformance.Failure{Case: "gcra-1-0", Step: 7, Field: "resetAt", Want: "1334", Got: "1333"}
	if got, want := f.String(), "gcra-1-0 step 7: resetAt: want 1334, got 1333"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestRun(t *testing.T) {
	wrongStep := step(`"key": "k", "now": 1000, "cost": 1,
		"expect": {"allowed": true, "limit": 3, "remaining": 5, "resetAt": 1667, "retryAfterMs": 0}`)
	tests := []struct {
		name     string
		in       string
		passed   int
		failures []conformance.Failure
		wantErr  bool
	}{
		{name: "all pass", in: vectorFile(vectorCase(gcra3, step0)), passed: 1},
		{
			name:     "mismatch is counted, not an error",
			in:       vectorFile(vectorCase(gcra3, step0, wrongStep)),
			passed:   1,
			failures: []conformance.Failure{{Case: "c", Step: 1, Field: "remaining", Want: "5", Got: "1"}},
		},
		{
			name:   "cases start from empty state",
			in:     vectorFile(vectorCase(gcra3, step0), vectorCase(gcra3, step0)),
			passed: 2,
		},
		{
			name:    "a cost above the ceiling stops the run",
			in:      vectorFile(vectorCase(gcra3, step(`"key": "k", "now": 1000, "cost": 4, `+expect0))),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := conformance.Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			store := memory.New(memory.Config{SweepInterval: -1})
			defer store.Close()
			res, err := conformance.Run(context.Background(), store, f, "test:")
			if (err != nil) != tt.wantErr {
				t.Fatalf("Run error %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if res.Passed != tt.passed || res.Failed != len(tt.failures) {
				t.Errorf("%d passed, %d failed, want %d and %d", res.Passed, res.Failed, tt.passed, len(tt.failures))
			}
			if fmt.Sprint(res.Failures) != fmt.Sprint(tt.failures) {
				t.Errorf("failures %v, want %v", res.Failures, tt.failures)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		vectorFile(vectorCase(gcra3, step0)),
		vectorFile(vectorCase(`{"kind": "tokenBucket", "capacity": 5, "refillPerSec": 0.5}`, step0),
			vectorCase(`{"kind": "slidingWindow", "limit": 3, "windowMs": 1000, "buckets": 4}`)),
		vectorFile(vectorCase(`{"kind": "slidingWindowLog", "limit": 2, "windowMs": 10}`)),
		vectorFile(vectorCase(`{"kind": "fixedWindow", "limit": 0, "windowMs": 1000}`)),
		vectorFile(vectorCase(`{"kind": "slidingWindow", "limit": 3, "windowMs": 2, "buckets": 3}`)),
		vectorFile(vectorCase(`{"kind": "gcra", "limit": 3}`)),
		vectorFile(vectorCase(gcra3, step(`"key": "k", "now": -1, "cost": 1, `+expect0))),
		vectorFile() + "}",
		`{"format": "sluice-vectors/1", "cases": [{"name": "c", "strategy": null}]}`,
		`{"format": 1}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := conformance.Parse(data)
		if err != nil {
			if !errors.Is(err, conformance.ErrFormat) {
				t.Fatalf("error %v does not match ErrFormat", err)
			}
			return
		}
		for i, c := range file.Cases {
			if _, err := sluice.NewPolicy("fuzz", sluice.Limit{Strategy: c.Strategy}); err != nil {
				t.Fatalf("case %d: Parse accepted an invalid strategy %#v: %v", i, c.Strategy, err)
			}
			for j, s := range c.Steps {
				if s.Now <= 0 {
					t.Fatalf("case %d step %d: Parse accepted now %d", i, j, s.Now)
				}
			}
		}
	})
}

func ExampleParse() {
	f, err := conformance.Parse([]byte(`{
	  "format": "sluice-vectors/1",
	  "cases": [{
	    "name": "three-a-second",
	    "strategy": {"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3},
	    "steps": [
	      {"key": "k", "now": 1000, "cost": 1,
	       "expect": {"allowed": true, "limit": 3, "remaining": 2, "resetAt": 1334, "retryAfterMs": 0}}
	    ]
	  }]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range f.Cases {
		fmt.Printf("%s: %s %+v\n", c.Name, c.Strategy.Kind(), c.Strategy)
		for i, s := range c.Steps {
			fmt.Printf("step %d: %s at %d cost %d -> %+v\n", i, s.Key, s.Now, s.Cost, s.Expect)
		}
	}
	// Output:
	// three-a-second: gcra {Limit:3 PeriodMs:1000 Burst:3}
	// step 0: k at 1000 cost 1 -> {Allowed:true Limit:3 Remaining:2 ResetAt:1334 RetryAfterMs:0}
}
