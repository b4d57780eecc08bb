package memory

import (
	"strconv"
	"testing"
)

func TestHashSpreads(t *testing.T) {
	const n = 1 << 18
	seen := make(map[uint64]string, n)
	buckets := make([]int, 1024) // by the top bits, which choose where a probe starts
	for i := 0; i < n; i++ {
		for _, key := range []string{strconv.Itoa(i), "user:" + strconv.Itoa(i), "203.0.113." + strconv.Itoa(i) + ":login:attempts"} {
			h := hash(42, key)
			if prev, dup := seen[h]; dup {
				t.Fatalf("%q and %q hash alike", prev, key)
			}
			seen[h] = key
			buckets[h>>54]++
		}
	}
	want := 3 * n / len(buckets)
	for i, c := range buckets {
		if c < want*8/10 || c > want*12/10 {
			t.Fatalf("bucket %d holds %d keys, want about %d", i, c, want)
		}
	}
	if hash(1, "k") == hash(2, "k") {
		t.Error("the seed does not change the hash")
	}
}
