// Command validate is the Go side of the Python client's strategy validation tests: it reads
// strategy specs, one JSON object a line ({"kind":"gcra","limit":3,"periodMs":1000,"burst":3}, as
// in the vectors), validates each as the Go library does (conformance.ParseStrategy, then
// sluice.NewPolicy) and answers one JSON line each: {"ok":true,"ceiling":3,"windowMs":1000} for a
// valid one (ceiling and windowMs as header.Fields would print them, windowMs in ms as a float),
// {"ok":false,"field":"periodMs"} for one sluice.NewPolicy refuses, naming the parameter, and
// {"ok":false,"field":""} for one the JSON decoding refuses (an unknown field, a wrong type).
//
//	go run ./clients/python/tests/gointerop/validate < specs.jsonl
//
// With -bounds, each line is {"spec": {...}, "now": N} instead, for a fixed window, and the answer
// {"bounds": [b0, b1, b2, b3]}: the bounds the Redis store sends its scripts for a call at now, the
// window holding now and its neighbours (FixedWindow.Bounds).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/header"
)

func main() {
	withBounds := flag.Bool("bounds", false, "answer the calendar bounds of {spec, now} lines")
	flag.Parse()
	answer := validate
	if *withBounds {
		answer = bounds
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		b, _ := json.Marshal(answer(in.Bytes()))
		out.Write(append(b, '\n'))
	}
}

// bounds answers {"bounds": [...]} for a line {"spec": {...}, "now": N}: what the Redis store's
// calendarBounds sends.
func bounds(line []byte) map[string]any {
	var in struct {
		Spec json.RawMessage `json:"spec"`
		Now  int64           `json:"now"`
	}
	if err := json.Unmarshal(line, &in); err != nil {
		return map[string]any{"error": err.Error()}
	}
	st, err := conformance.ParseStrategy(in.Spec)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	fw, ok := st.(sluice.FixedWindow)
	if !ok {
		return map[string]any{"error": "not a fixed window"}
	}
	start, end := fw.Bounds(in.Now)
	before, _ := fw.Bounds(int64(start) - 1)
	_, after := fw.Bounds(int64(end))
	return map[string]any{"bounds": []float64{before, start, end, after}}
}

func validate(spec []byte) map[string]any {
	st, err := conformance.ParseStrategy(spec)
	var inv *sluice.InvalidError
	switch {
	case errors.As(err, &inv):
		return map[string]any{"ok": false, "field": strings.TrimPrefix(inv.Field, "limits[0]."), "reason": inv.Reason}
	case err != nil:
		return map[string]any{"ok": false, "field": "", "reason": err.Error()}
	}
	l := sluice.Limit{Strategy: st}
	return map[string]any{
		"ok":       true,
		"ceiling":  int64(st.Ceiling()),
		"windowMs": float64(header.Window(l)) / float64(time.Millisecond),
	}
}
