package enforce

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// parseAll reads every event of input, and the error that ended it.
func parseAll(input string) ([]sseEvent, error) {
	p := newSSEParser(strings.NewReader(input))
	var out []sseEvent
	for {
		ev, err := p.next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEParser(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []sseEvent
	}{
		{"the server's decision", "id: 7\nevent: decision\ndata: {\"offset\":7}\n\n",
			[]sseEvent{{"decision", `{"offset":7}`, "7"}}},
		{"keep-alive", ": keep-alive\n\n", nil},
		{"unnamed is message", "data: x\n\n", []sseEvent{{"message", "x", ""}}},
		{"data lines join", "data: a\ndata:b\ndata\n\n", []sseEvent{{"message", "a\nb\n", ""}}},
		{"one space stripped", "data:  two\n\n", []sseEvent{{"message", " two", ""}}},
		{"CRLF and CR", "event: e\r\ndata: x\r\rdata: y\r\n\r\n", []sseEvent{{"e", "x", ""}, {"message", "y", ""}}},
		{"no data, no event", "event: decision\nid: 3\n\ndata: x\n\n", []sseEvent{{"message", "x", "3"}}},
		{"id persists", "id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			[]sseEvent{{"message", "a", "1"}, {"message", "b", "1"}, {"message", "c", ""}}},
		{"id with NUL ignored", "id: 1\nid: 2\x003\ndata: a\n\n", []sseEvent{{"message", "a", "1"}}},
		{"unknown fields and retry", "retry: 10\ncolour: red\ndata: a\n\n", []sseEvent{{"message", "a", ""}}},
		{"byte order mark", "\uFEFFdata: a\n\n", []sseEvent{{"message", "a", ""}}},
		{"incomplete last event", "data: a\n\ndata: b\n", []sseEvent{{"message", "a", ""}}},
		{"field without value", "event\ndata\n\n", []sseEvent{{"message", "", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAll(tt.input)
			if err != io.EOF {
				t.Errorf("ended with %v, want EOF", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSSEParserLimits(t *testing.T) {
	tests := []struct {
		name, input, wantErr string
	}{
		{"a long line", "data: " + strings.Repeat("x", maxSSELine) + "\n\n", "line is longer"},
		{"a large event", strings.Repeat("data: "+strings.Repeat("x", maxSSELine/2)+"\n", 2*maxSSEEvent/maxSSELine+1), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseAll(tt.input)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "enforce: ") || len(got) != 0 {
				t.Errorf("events %d, error %v; want none and %q", len(got), err, tt.wantErr)
			}
		})
	}
}
