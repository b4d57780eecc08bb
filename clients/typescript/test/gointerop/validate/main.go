// Command validate is the Go side of the TypeScript client's strategy tests: it validates each
// strategy read from stdin, one a line in the conformance vectors' form ({"kind":"gcra","limit":3,
// "periodMs":1000,"burst":3}), as the Go library does (conformance.ParseStrategy, sluice.NewPolicy),
// and answers one JSON line each: {"ok":true,"ceiling":3,"windowMs":1000} (windowMs is
// header.Window in ms) or {"ok":false,"field":"periodMs","reason":"..."}, the field without the
// policy's "limits[0]." prefix, or {"ok":false,"error":"..."} for input that is not a strategy.
// A fixed window's line may hold "now" too (epoch ms): then the answer also holds "bounds", the
// start and end of the window holding now (sluice.FixedWindow.Bounds).
//
//	go run ./clients/typescript/test/gointerop/validate
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
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if err := out.Encode(validate(in.Bytes())); err != nil {
			fmt.Fprintln(os.Stderr, "validate:", err)
			os.Exit(2)
		}
	}
}

func validate(line []byte) answer {
	spec, now, err := cutNow(line)
	if err != nil {
		return answer{Error: err.Error()}
	}
	st, err := conformance.ParseStrategy(spec)
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
		return nil, nil, err
	}
	delete(fields, "now")
	spec, err := json.Marshal(fields)
	return spec, &now, err
}
