package client

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
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
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "client: ") || len(got) != 0 {
				t.Errorf("events %d, error %v; want none and %q", len(got), err, tt.wantErr)
			}
		})
	}
}

func TestBlockEnd(t *testing.T) {
	tests := []struct {
		name           string
		start, end     int64
		want           int64
		wantNotAWindow bool
	}{
		{"a second", 0, 1000, 2000, false},
		{"a minute", 1_700_000_040_000, 1_700_000_100_000, 1_700_000_160_000, false},
		{"saturates", 0, math.MaxInt64/2 + 1, math.MaxInt64, false},
		{"empty window", 1000, 1000, 0, true},
		{"reversed window", 1000, 0, 0, true},
		{"negative start", -1000, 1000, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := blockEnd(tt.start, tt.end)
			if ok == tt.wantNotAWindow || ok && got != tt.want {
				t.Errorf("blockEnd(%d, %d) = %d, %v; want %d, %v", tt.start, tt.end, got, ok, tt.want, !tt.wantNotAWindow)
			}
		})
	}
}

// The map of blocks is swept as decisions come: ended blocks go, and it stays within twice the
// blocks in force (or minSweep).
func TestEnforcerSweeps(t *testing.T) {
	now := int64(1_000_000)
	e := newEnforcer(EnforcerConfig{Now: func() time.Time { return time.UnixMilli(now) }})
	size := func() int {
		e.mu.RLock()
		defer e.mu.RUnlock()
		return len(e.until)
	}
	for i := range 10 * minSweep {
		// Each key's window closed just now: its block ends a second later.
		e.applyEvent(sseEvent{typ: "decision", data: fmt.Sprintf(`{"offset":%d,"key":"k%d","windowStart":%d,"windowEnd":%d}`, i+1, i, now-1000, now)})
		now += 10 // 100 decisions a second: 100 blocks in force
		if n := size(); n > minSweep {
			t.Fatalf("after %d decisions, %d blocks kept; want at most %d", i+1, n, minSweep)
		}
	}
	if got := e.Offset(); got != 10*minSweep {
		t.Errorf("Offset() = %d, want %d", got, 10*minSweep)
	}
	// The newest blocks were kept.
	if _, blocked := e.Blocked(fmt.Sprint("k", 10*minSweep-1)); !blocked {
		t.Error("the last key is not blocked")
	}
}

// Decisions the enforcer cannot apply are reported and skipped; repeats are skipped silently.
func TestEnforcerSkips(t *testing.T) {
	var heard []string
	e := newEnforcer(EnforcerConfig{Now: func() time.Time { return time.UnixMilli(1500) }, OnError: func(err error) { heard = append(heard, err.Error()) }})
	e.path = "/v1/streams/s/decisions/watch"
	for _, data := range []string{
		`{"offset":5,"key":"a","windowStart":0,"windowEnd":1000}`,
		`{"offset":5,"key":"b","windowStart":0,"windowEnd":1000}`, // a repeat
		`{"offset":4,"key":"c","windowStart":0,"windowEnd":1000}`, // older
		`not JSON`,
		`{"offset":6,"key":"","windowStart":0,"windowEnd":1000}`,
		`{"offset":7,"key":"d","windowStart":1000,"windowEnd":1000}`,
		`{"offset":8,"key":"e","windowStart":1000,"windowEnd":2000}`,
	} {
		e.applyEvent(sseEvent{typ: "decision", data: data})
	}
	for key, want := range map[string]bool{"a": true, "b": false, "c": false, "d": false, "e": true} {
		if _, blocked := e.Blocked(key); blocked != want {
			t.Errorf("Blocked(%q) = %v, want %v", key, blocked, want)
		}
	}
	if e.Offset() != 8 {
		t.Errorf("Offset() = %d, want 8", e.Offset())
	}
	if len(heard) != 3 || !strings.Contains(heard[0], "not JSON") || !strings.Contains(heard[1], "key is empty") || !strings.Contains(heard[2], "not a window") {
		t.Errorf("OnError heard %q, want the three bad decisions", heard)
	}
	for _, msg := range heard {
		if !strings.HasPrefix(msg, "client: ") {
			t.Errorf("error %q lacks the package prefix", msg)
		}
	}
}

// BenchmarkEnforcerBlocked asks about keys from every core at once, as a gateway's handlers do:
// one in a hundred is blocked.
func BenchmarkEnforcerBlocked(b *testing.B) {
	e := newEnforcer(EnforcerConfig{})
	until := time.Now().Add(time.Hour).UnixMilli()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
		if i%100 == 0 {
			e.until[keys[i]] = until
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i, blocked := 0, 0
		for pb.Next() {
			if _, ok := e.Blocked(keys[i%len(keys)]); ok {
				blocked++
			}
			i += 7
		}
		_ = blocked
	})
}
