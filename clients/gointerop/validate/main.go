// Command validate is the Go side of the Python and TypeScript clients' strategy tests: it
// validates each strategy read from stdin as the Go library does (conformance.ParseStrategy, then
// sluice.NewPolicy) and answers one JSON line each, in order.
//
//	go run ./clients/gointerop/validate < specs.jsonl
//
// A line is a strategy in the conformance vectors' form, {"kind":"gcra","limit":3,"periodMs":1000,
// "burst":3}, and may hold "now" too (epoch ms). The answers, fields left out when zero or empty:
//
//	{"ok":true,"ceiling":3,"windowMs":1000}
//	    a valid strategy: ceiling is Strategy.Ceiling(), windowMs header.Window in ms (a float)
//	{"ok":true,"ceiling":5,"windowMs":86400000,"bounds":[start,end]}
//	    a valid fixed window whose line held now: the start (included) and end (excluded) of the
//	    window holding now (sluice.FixedWindow.Bounds), calendar or not. The Redis store sends its
//	    scripts the bounds of that window and of its two neighbours, the windows holding start-1
//	    and end: ask for those instants too.
//	{"ok":false,"field":"periodMs","reason":"..."}
//	    a strategy sluice.NewPolicy refuses (InvalidError), field without the policy's "limits[0]."
//	{"ok":false,"error":"..."}
//	    a line that is not a strategy: not JSON, a now that is not an integer, or a spec the JSON
//	    decoding refuses (an unknown field, a wrong type)
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/header"
)

// answer is one line of output (see the package doc).
type answer struct {
	OK       bool      `json:"ok"`
	Bounds   []float64 `json:"bounds,omitempty"`
	Ceiling  float64   `json:"ceiling,omitempty"`
	WindowMs float64   `json:"windowMs,omitempty"`
	Field    string    `json:"field,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Error    string    `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		if err := enc.Encode(validate(in.Bytes())); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
	if err := out.Flush(); err != nil {
		fail(err)
	}
}

func validate(line []byte) answer {
	spec, now, err := cutNow(line)
	if err != nil {
		return answer{Error: err.Error()}
	}
	st, err := parse(spec)
	var inv *sluice.InvalidError
	switch {
	case errors.As(err, &inv):
		return answer{Field: strings.TrimPrefix(inv.Field, "limits[0]."), Reason: inv.Reason}
	case err != nil:
		return answer{Error: err.Error()}
	}
	w := header.Window(sluice.Limit{Strategy: st})
	a := answer{OK: true, Ceiling: st.Ceiling(), WindowMs: float64(w) / float64(time.Millisecond)}
	if fw, ok := st.(sluice.FixedWindow); ok && now != nil {
		start, end := fw.Bounds(*now)
		a.Bounds = []float64{start, end}
	}
	return a
}

// parsed holds the strategies parsed so far, by spec: a calendar window's time zone is loaded once.
var parsed = map[string]struct {
	st  sluice.Strategy
	err error
}{}

// parse is conformance.ParseStrategy(spec), remembered.
func parse(spec []byte) (sluice.Strategy, error) {
	p, ok := parsed[string(spec)]
	if !ok {
		p.st, p.err = conformance.ParseStrategy(spec)
		parsed[string(spec)] = p
	}
	return p.st, p.err
}

// cutNow takes "now" out of a line, returning the strategy's spec without it.
func cutNow(line []byte) ([]byte, *int64, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return nil, nil, err
	}
	raw, ok := fields["now"]
	if !ok {
		return line, nil, nil
	}
	var now int64
	if err := json.Unmarshal(raw, &now); err != nil {
		return nil, nil, fmt.Errorf("now: %w", err)
	}
	delete(fields, "now")
	spec, err := json.Marshal(fields)
	return spec, &now, err
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "validate:", err)
	os.Exit(2)
}
