package enforce

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// encodeSSE writes events as a server would, so that the parser reads them back.
func encodeSSE(events []sseEvent) string {
	var b strings.Builder
	for _, ev := range events {
		fmt.Fprintf(&b, "id: %s\nevent: %s\n", ev.id, ev.typ)
		for line := range strings.SplitSeq(ev.data, "\n") {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// FuzzSSE reads arbitrary bytes as an event stream: the parser must not panic, must keep to its
// limits, must dispatch only events whose fields a line could carry, and must read those events
// back the same once written out again.
func FuzzSSE(f *testing.F) {
	for _, seed := range []string{
		"id: 7\nevent: decision\ndata: {\"offset\":7,\"key\":\"k\",\"windowStart\":0,\"windowEnd\":1000}\n\n",
		": keep-alive\n\n",
		"event: error\ndata: {\"error\":\"x\",\"code\":\"unavailable\"}\n\n",
		"data: a\r\ndata: b\r\rid: 1\x00\n\n\uFEFF",
		"\uFEFFdata\n\nevent\nid\nretry: 5\n:\n\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		events, err := parseAll(string(input))
		long := false
		for _, ev := range events {
			long = long || len(ev.typ) > maxSSELine-16 || len(ev.id) > maxSSELine-16
			if ev.typ == "" || strings.ContainsAny(ev.typ, "\r\n") || strings.ContainsAny(ev.id, "\r\n\x00") ||
				strings.Contains(ev.data, "\r") || len(ev.data) > maxSSEEvent {
				t.Fatalf("event %q cannot come from a stream", ev)
			}
			for line := range strings.SplitSeq(ev.data, "\n") {
				long = long || len(line) > maxSSELine-16
			}
		}
		if err != io.EOF || long {
			return // over a limit, or near one once written out: the checks above stand
		}
		again, err := parseAll(encodeSSE(events))
		if err != io.EOF {
			t.Fatalf("reading %q back: %v", encodeSSE(events), err)
		}
		if len(again) != len(events) || len(events) > 0 && !reflect.DeepEqual(again, events) {
			t.Fatalf("read %q back as %q", events, again)
		}
	})
}

// FuzzBlockEnd checks the rule on any window: the block ends one window after it, or saturates.
func FuzzBlockEnd(f *testing.F) {
	f.Add(int64(0), int64(1000))
	f.Add(int64(1_700_000_000_000), int64(1_700_000_001_000))
	f.Fuzz(func(t *testing.T, start, end int64) {
		got, ok := blockEnd(start, end)
		if ok != (start >= 0 && end > start) {
			t.Fatalf("blockEnd(%d, %d) ok = %v", start, end, ok)
		}
		if ok && got != math.MaxInt64 && got-end != end-start {
			t.Fatalf("blockEnd(%d, %d) = %d", start, end, got)
		}
	})
}
