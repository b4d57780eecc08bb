package enforce

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

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
	e := newEnforcer(Config{Now: func() time.Time { return time.UnixMilli(now) }})
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
	e := newEnforcer(Config{Now: func() time.Time { return time.UnixMilli(1500) }, OnError: func(err error) { heard = append(heard, err.Error()) }})
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
		if !strings.HasPrefix(msg, "enforce: ") {
			t.Errorf("error %q lacks the package prefix", msg)
		}
	}
}

// BenchmarkEnforcerBlocked asks about keys from every core at once, as a gateway's handlers do:
// one in a hundred is blocked.
func BenchmarkEnforcerBlocked(b *testing.B) {
	e := newEnforcer(Config{})
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
