// Package conformance reads sluice's conformance vectors and replays them against a store, so that
// every store proves it decides exactly like the reference semantics, step by step.
//
// A vector file is one JSON object {"format": "sluice-vectors/1", "cases": [...]}: each case names a
// strategy with its parameters and lists steps (key, now, cost, expected decision) that run in order
// from empty state.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sluicehq/sluice"
)

// Format is the format name a vector file must declare.
const Format = "sluice-vectors/1"

// File is a parsed vector file.
type File struct {
	Cases []Case
}

// Case is a timeline of checks against one strategy, starting from empty state.
type Case struct {
	Name     string
	Strategy sluice.Strategy
	Steps    []Step
}

// Step is one check and the decision it must return.
type Step struct {
	Key    string
	Now    int64
	Cost   int64
	Expect Expect
}

// Expect is the decision a step must return, field for field.
type Expect struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetAt      int64 `json:"resetAt"`
	RetryAfterMs int64 `json:"retryAfterMs"`
}

// ErrFormat is what every parse error matches with errors.Is.
var ErrFormat = errors.New("conformance: bad vector file")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

type rawFile struct {
	Format *string   `json:"format"`
	Cases  []rawCase `json:"cases"`
}

type rawCase struct {
	Name     string          `json:"name"`
	Strategy json.RawMessage `json:"strategy"`
	Steps    []rawStep       `json:"steps"`
}

type rawStep struct {
	Key    *string `json:"key"`
	Now    *int64  `json:"now"`
	Cost   *int64  `json:"cost"`
	Expect *Expect `json:"expect"`
}

// Parse reads a vector file. Unknown fields, a missing field, an unknown strategy kind or an
// invalid parameter is an error naming where it is (wrapping ErrFormat).
func Parse(data []byte) (*File, error) {
	var raw rawFile
	if err := strictDecode(data, &raw); err != nil {
		return nil, formatErr("%v", err)
	}
	if raw.Format == nil || *raw.Format != Format {
		return nil, formatErr("format must be %q", Format)
	}
	if len(raw.Cases) == 0 {
		return nil, formatErr("cases must hold at least one case")
	}
	f := &File{Cases: make([]Case, 0, len(raw.Cases))}
	for i, rc := range raw.Cases {
		where := fmt.Sprintf("cases[%d]", i)
		if rc.Name == "" {
			return nil, formatErr("%s.name is missing", where)
		}
		s, err := ParseStrategy(rc.Strategy)
		if err != nil {
			return nil, formatErr("%s.strategy: %v", where, err)
		}
		c := Case{Name: rc.Name, Strategy: s, Steps: make([]Step, 0, len(rc.Steps))}
		for j, rs := range rc.Steps {
			if rs.Key == nil || rs.Now == nil || rs.Cost == nil || rs.Expect == nil {
				return nil, formatErr("%s.steps[%d] needs key, now, cost and expect", where, j)
			}
			if *rs.Key == "" || *rs.Cost < 1 {
				return nil, formatErr("%s.steps[%d] needs a non-empty key and a cost of at least 1", where, j)
			}
			if *rs.Now <= 0 {
				return nil, formatErr("%s.steps[%d].now must be positive epoch ms", where, j)
			}
			c.Steps = append(c.Steps, Step{Key: *rs.Key, Now: *rs.Now, Cost: *rs.Cost, Expect: *rs.Expect})
		}
		f.Cases = append(f.Cases, c)
	}
	return f, nil
}

// ReadFile reads and parses the vector file at path; errors name the path.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Steps counts the steps of every case.
func (f *File) Steps() int {
	n := 0
	for _, c := range f.Cases {
		n += len(c.Steps)
	}
	return n
}

// ParseStrategy reads a strategy object such as {"kind":"gcra","limit":3,"periodMs":1000,"burst":3}
// and validates its parameters.
func ParseStrategy(data []byte) (sluice.Strategy, error) {
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, err
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(data, &params); err != nil {
		return nil, err
	}
	delete(params, "kind")
	rest, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	var s sluice.Strategy
	switch head.Kind {
	case "gcra":
		s = &sluice.GCRA{}
	case "tokenBucket":
		s = &sluice.TokenBucket{}
	case "fixedWindow":
		s = &sluice.FixedWindow{}
	case "slidingWindow":
		s = &sluice.SlidingWindow{}
	case "slidingWindowLog":
		s = &sluice.SlidingWindowLog{}
	default:
		return nil, fmt.Errorf("unknown kind %q", head.Kind)
	}
	if err := strictDecode(rest, s); err != nil {
		return nil, err
	}
	p, err := sluice.NewPolicy("vector", sluice.Limit{Strategy: s})
	if err != nil {
		return nil, err
	}
	return p.Limits()[0].Strategy, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Failure is one field of one step that differs from the vector.
type Failure struct {
	Case  string
	Step  int
	Field string
	Want  string
	Got   string
}

func (f Failure) String() string {
	return fmt.Sprintf("%s step %d: %s: want %s, got %s", f.Case, f.Step, f.Field, f.Want, f.Got)
}

// Result counts steps: a step passes when every field of its decision matches.
type Result struct {
	Passed, Failed int
	Failures       []Failure
}

// Diff lists the fields of got that differ from want.
func Diff(want Expect, got sluice.Decision) []Failure {
	var out []Failure
	add := func(field string, w, g any) {
		if w != g {
			out = append(out, Failure{Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)})
		}
	}
	add("allowed", want.Allowed, got.Allowed)
	add("limit", want.Limit, got.Limit)
	add("remaining", want.Remaining, got.Remaining)
	add("resetAt", want.ResetAt, got.ResetAt)
	add("retryAfterMs", want.RetryAfterMs, got.RetryAfterMs)
	return out
}

// Run replays every case of f against store through a sluice.Limiter, each case under its own
// policy and its keys prefixed with namespace, so that runs sharing a store do not see each other's
// state. Pick a namespace no earlier run used (a shared store keeps state between runs). An error is
// a store failure or bad input, which stops the run; mismatches are counted in the result.
func Run(ctx context.Context, store sluice.Store, f *File, namespace string) (Result, error) {
	var res Result
	for i, c := range f.Cases {
		p, err := sluice.NewPolicy("conformance-"+strconv.Itoa(i), sluice.Limit{Strategy: c.Strategy})
		if err != nil {
			return res, err
		}
		lim, err := sluice.New(store, p)
		if err != nil {
			return res, err
		}
		for j, s := range c.Steps {
			got, err := lim.Check(sluice.WithNow(ctx, s.Now), p.Name(), namespace+s.Key, s.Cost)
			if err != nil {
				return res, fmt.Errorf("conformance: %s step %d: %w", c.Name, j, err)
			}
			diffs := Diff(s.Expect, got)
			if len(diffs) == 0 {
				res.Passed++
				continue
			}
			res.Failed++
			for _, d := range diffs {
				d.Case, d.Step = c.Name, j
				res.Failures = append(res.Failures, d)
			}
		}
	}
	return res, nil
}
