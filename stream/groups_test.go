package stream

import (
	"strings"
	"testing"
)

func TestPullDefaults(t *testing.T) {
	r, err := PullRequest{Group: "g", Stream: "s", Kind: KindDecisions, Consumer: "c"}.Normalize()
	if err != nil || r.Limit != DefaultPullLimit || r.LeaseMs != DefaultLeaseMs {
		t.Fatalf("normalize: %+v, %v", r, err)
	}
	edge := PullRequest{Group: strings.Repeat("g", maxName), Stream: "s", Kind: KindWindows, Consumer: "c", Limit: MaxPullLimit, LeaseMs: MaxLeaseMs}
	if r, err := edge.Normalize(); err != nil || r != edge {
		t.Fatalf("normalize at the limits: %+v, %v", r, err)
	}
}

func TestPartition(t *testing.T) {
	// Pinned: the partition of a key is stored state, and clients may compute it.
	for key, want := range map[string]int{"key-1": 9, "key-A": 11, "key-Q": 10, "key-a": 12, "key-q": 9} {
		if got := Partition(key); got != want {
			t.Errorf("Partition(%q) = %d, want %d", key, got, want)
		}
	}
	// Keys that differ in one character spread over the partitions, whatever its bits.
	var counts [Partitions]int
	for c := range 256 {
		counts[Partition("tenant-"+string(rune(c)))]++
	}
	for p, n := range counts {
		if n < 256/Partitions/3 || n > 256/Partitions*3 {
			t.Errorf("partition %d holds %d of 256 keys: %v", p, n, counts)
		}
	}
}
