package topkeys

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// zipf returns a stream of n keys of a Zipf distribution with exponent s over imax+1 keys, the same
// for the same seed.
func zipf(seed uint64, n int, s float64, imax uint64) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, s, 1, imax)
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}

func exact(stream []string) map[string]int64 {
	m := make(map[string]int64)
	for _, k := range stream {
		m[k]++
	}
	return m
}

// checkEstimates checks got, the estimates of a summary of capacity k and the given total, against
// the true counts: every Count at least the truth, Count−Error at most it, Error at most bound,
// bound at most total/k, and every key with more than total/k listed.
func checkEstimates(t *testing.T, got []Count, truth map[string]int64, total, bound int64, k int) {
	t.Helper()
	var n int64
	for _, c := range truth {
		n += c
	}
	if n != total {
		t.Errorf("total %d, want %d", total, n)
	}
	if bound > total/int64(k) {
		t.Errorf("error bound %d above total/k = %d/%d", bound, total, k)
	}
	listed := make(map[string]bool, len(got))
	for i, c := range got {
		listed[c.Key] = true
		if c.Count < truth[c.Key] || c.Count-c.Error > truth[c.Key] {
			t.Errorf("%q: count %d error %d, true count %d", c.Key, c.Count, c.Error, truth[c.Key])
		}
		if c.Error < 0 || c.Error > bound {
			t.Errorf("%q: error %d outside [0, %d]", c.Key, c.Error, bound)
		}
		if i > 0 && (got[i-1].Count < c.Count || got[i-1].Count == c.Count && got[i-1].Key >= c.Key) {
			t.Errorf("%q after %q: not by count descending, then key", c.Key, got[i-1].Key)
		}
	}
	for key, c := range truth {
		if c > total/int64(k) && !listed[key] {
			t.Errorf("%q: %d events, more than %d/%d, not listed", key, c, total, k)
		}
	}
}

// checkSketch checks the sketch's layout: heap order, positions, and that the table finds every
// key and holds nothing else.
func checkSketch(t *testing.T, s *sketch) {
	t.Helper()
	for i, e := range s.heap {
		if s.pos[e.slot] != int32(i) {
			t.Fatalf("slot %d at heap %d, pos says %d", e.slot, i, s.pos[e.slot])
		}
		if i > 0 && s.heap[(i-1)/2].count > e.count {
			t.Fatalf("heap %d: count %d below its parent's %d", i, e.count, s.heap[(i-1)/2].count)
		}
	}
	used := 0
	for _, v := range s.table {
		if v != 0 {
			used++
		}
	}
	if used != len(s.slots) {
		t.Fatalf("table holds %d entries for %d slots", used, len(s.slots))
	}
	for i, sl := range s.slots {
		if got := s.table[s.find(sl.key, sl.hash)]; got != int32(i)+1 {
			t.Fatalf("%q: table finds slot %d, want %d", sl.key, got-1, i)
		}
	}
}

func TestSketchExactWhileRoomy(t *testing.T) {
	tests := []struct {
		name   string
		k      int
		stream []string
	}{
		{"one key", 1, []string{"a", "a", "a"}},
		{"k keys exactly", 3, []string{"a", "b", "c", "b", "c", "c"}},
		{"fewer keys than k", 128, zipf(1, 5000, 1.1, 99)},
		{"k equals the keys", 100, zipf(2, 5000, 1.5, 99)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSketch(tt.k)
			for _, key := range tt.stream {
				s.Add(key, 1)
			}
			checkSketch(t, s)
			truth := exact(tt.stream)
			got := s.Top(tt.k)
			if len(got) != len(truth) {
				t.Fatalf("%d keys listed, want %d", len(got), len(truth))
			}
			for _, c := range got {
				if c.Count != truth[c.Key] || c.Error != 0 {
					t.Errorf("%q: count %d error %d, want %d error 0", c.Key, c.Count, c.Error, truth[c.Key])
				}
			}
			if s.Min() != 0 && len(truth) < tt.k {
				t.Errorf("Min %d with room left", s.Min())
			}
			checkEstimates(t, got, truth, s.Total(), s.Min(), tt.k)
		})
	}
}

func TestSketchBounds(t *testing.T) {
	tests := []struct {
		name string
		k    int
		skew float64
		keys uint64
	}{
		{"skewed, k 16", 16, 1.5, 10_000},
		{"skewed, k 128", 128, 1.2, 100_000},
		{"flat, k 32", 32, 1.01, 1_000_000},
		{"one counter", 1, 2, 1000},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := zipf(uint64(i), 50_000, tt.skew, tt.keys)
			s := newSketch(tt.k)
			for _, key := range stream {
				s.Add(key, 1)
			}
			checkSketch(t, s)
			truth := exact(stream)
			checkEstimates(t, s.Top(tt.k), truth, s.Total(), s.Min(), tt.k)
			listed := make(map[string]bool)
			for _, c := range s.Top(tt.k) {
				listed[c.Key] = true
			}
			for key, c := range truth {
				if !listed[key] && c > s.Min() {
					t.Errorf("%q: %d events, more than Min %d, not tracked", key, c, s.Min())
				}
			}
			if got := len(s.Top(3)); got != min(3, tt.k) {
				t.Errorf("Top(3) lists %d", got)
			}
		})
	}
}

func TestSketchWeights(t *testing.T) {
	s := newSketch(2)
	s.Add("a", 5)
	s.Add("b", 3)
	s.Add("c", 2) // evicts b: 3+2, error 3
	want := []Count{{"a", 5, 0}, {"c", 5, 3}}
	if got := s.Top(5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Top = %v, want %v", got, want)
	}
	if s.Total() != 10 || s.Min() != 5 {
		t.Errorf("Total %d Min %d, want 10 and 5", s.Total(), s.Min())
	}
}

// A sketch that evicts on every event keeps its table exact: deletion moves entries back rather
// than leaving tombstones that would fill it.
func TestSketchChurn(t *testing.T) {
	s := newSketch(64)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 200_000 {
		s.Add(strconv.FormatUint(r.Uint64(), 36), 1+int64(i%3))
		if i%20_000 == 0 {
			checkSketch(t, s)
		}
	}
	checkSketch(t, s)
	if len(s.table) != 128 {
		t.Errorf("table of %d for 64 counters, want 128", len(s.table))
	}
}

// A key the sketch keeps is its own copy: the caller's may be a slice of a request body, which it
// must not keep alive.
func TestSketchKeepsItsOwnKeys(t *testing.T) {
	body := strings.Repeat("x", 4096) + "key-1"
	key := body[4096:]
	s := newSketch(4)
	got := s.add(key, hashKey(key), 1, false)
	if got != key || unsafe.StringData(got) == unsafe.StringData(key) {
		t.Errorf("the sketch keeps %q at %p, the caller's is at %p", got, unsafe.StringData(got), unsafe.StringData(key))
	}
	if again := s.add(key, hashKey(key), 1, false); unsafe.StringData(again) != unsafe.StringData(got) {
		t.Error("a tracked key's second add returned another copy")
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name  string
		k     int
		parts []int // events per part, of a Zipf stream over keys+1 keys
		keys  uint64
		extra []string // one more part
	}{
		{"parts roomy, union exact", 200, []int{1000, 2000, 500}, 150, nil},
		{"union over k, no part full", 100, []int{300, 300, 300}, 300, nil},
		{"full parts", 32, []int{10_000, 20_000, 5_000, 10_000, 10_000, 10_000}, 10_000, nil},
		{"full and roomy parts", 32, []int{10_000, 20_000, 0}, 10_000, []string{"only", "here", "only"}},
		{"one part", 16, []int{10_000}, 1000, nil},
		{"no parts", 16, nil, 0, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []*sketch
			var all []string
			streams := [][]string{tt.extra}
			for j, n := range tt.parts {
				streams = append(streams, zipf(uint64(10*i+j), n, 1.3, tt.keys))
			}
			for _, stream := range streams {
				p := newSketch(tt.k)
				for _, key := range stream {
					p.Add(key, 1)
				}
				parts = append(parts, p)
				all = append(all, stream...)
			}
			m, floor := merge(tt.k, parts...)
			checkSketch(t, m)
			truth := exact(all)
			got := m.Top(tt.k)
			checkEstimates(t, got, truth, m.Total(), floor, tt.k)
			if floor > m.Min() {
				t.Errorf("floor %d above the merged Min %d", floor, m.Min())
			}
			listed := make(map[string]bool)
			for _, c := range got {
				listed[c.Key] = true
			}
			for key, c := range truth {
				if !listed[key] && c > m.Min() {
					t.Errorf("%q: %d events, more than Min %d, not kept", key, c, m.Min())
				}
			}
			if len(truth) <= tt.k {
				for _, c := range got {
					if exactParts(parts) && (c.Count != truth[c.Key] || c.Error != 0) {
						t.Errorf("%q: count %d error %d, want exact %d", c.Key, c.Count, c.Error, truth[c.Key])
					}
				}
			}
			// A merged sketch merges again, and counts on.
			again, floor2 := merge(tt.k, m, parts[0])
			checkSketch(t, again)
			all = append(all, tt.extra...)
			checkEstimates(t, again.Top(tt.k), exact(all), again.Total(), floor2, tt.k)
		})
	}
}

// exactParts reports whether no part has evicted a key, so that their merge is exact while the
// union fits.
func exactParts(parts []*sketch) bool {
	for _, p := range parts {
		if p.Min() != 0 {
			return false
		}
	}
	return true
}
