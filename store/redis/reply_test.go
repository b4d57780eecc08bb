package redisstore

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/sluicehq/sluice"
)

// gcraReply builds the reply a GCRA batch (lua/batch.lua) sends: now, each step's TAT before it, an admitted byte each.
func gcraReply(now float64, before []float64, admitted string) string {
	b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(now))
	for _, tat := range before {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(tat))
	}
	return string(b) + admitted
}

func gcraCall(steps int) call {
	return batchCall(sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 2}, steps)
}

func batchCall(st sluice.Strategy, steps int) call {
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: st})
	c := newCall(opCheck, 0, "1000", 1)
	for i := range steps {
		c.addPolicy(&Store{prefix: "sluice"}, p, string(rune('a'+i)), 1)
	}
	return c
}

func TestGCRABatchReply(t *testing.T) {
	const now = 1_700_000_000_000
	tests := []struct {
		name     string
		before   []float64
		admitted string
		want     []int64 // five per step; nil: an error
	}{
		{"fresh key", []float64{0}, "1", []int64{1, 2, 1, now + 100, 0}},
		{"last of the burst", []float64{now + 100}, "1", []int64{1, 2, 0, now + 200, 0}},
		{"denied", []float64{now + 200}, "0", []int64{0, 2, 0, now + 200, 100}},
		{"two steps", []float64{0, now + 100}, "11", []int64{1, 2, 1, now + 100, 0, 1, 2, 0, now + 200, 0}},
		{"the script admitted what algo denies", []float64{now + 200}, "1", nil},
		{"the script denied what algo admits", []float64{0}, "0", nil},
		{"too short", []float64{0}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := batchReply(gcraCall(len(tt.before)), gcraReply(now, tt.before, tt.admitted))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestBucketBatchReply(t *testing.T) {
	const now = 1_700_000_000_000
	c := batchCall(sluice.TokenBucket{Capacity: 3, RefillPerSec: 2}, 2)
	// The first step found a full bucket (3 tokens), the second half a token.
	got, err := batchReply(c, gcraReply(now, []float64{3, 0.5}, "10"))
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 3, 2, now + 500, 0, 0, 3, 0, now + 1250, 250}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := batchReply(c, gcraReply(now, []float64{3, 0.5}, "11")); err == nil {
		t.Error("no error where the script admitted what algo denies")
	}
}

// FuzzGCRABatchReply: any reply is decoded or refused, never a panic.
func FuzzGCRABatchReply(f *testing.F) {
	f.Add(2, gcraReply(1e12, []float64{0, 1e12}, "11"))
	f.Add(1, gcraReply(math.NaN(), []float64{math.Inf(1)}, "1"))
	f.Fuzz(func(t *testing.T, steps int, reply string) {
		if steps < 1 || steps > 8 {
			return
		}
		v, err := batchReply(gcraCall(steps), reply)
		if err == nil && len(v) != 5*steps {
			t.Fatalf("%d numbers for %d steps", len(v), steps)
		}
	})
}

func TestDistinct(t *testing.T) {
	many := func(n int, repeat bool) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		if repeat {
			keys[n-1] = keys[n/2]
		}
		return keys
	}
	tests := []struct {
		name string
		keys []string
		want bool
	}{
		{"none", nil, true},
		{"one", []string{"a"}, true},
		{"two", []string{"a", "b"}, true},
		{"a key twice", []string{"a", "b", "a"}, false},
		{"the empty key twice", []string{"", ""}, false},
		{"64 keys", many(64, false), true},
		{"64 keys, one twice", many(64, true), false},
		{"500 keys", many(500, false), true},
		{"500 keys, one twice", many(500, true), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := distinct(tt.keys); got != tt.want {
				t.Errorf("distinct = %v, want %v", got, tt.want)
			}
		})
	}
}
