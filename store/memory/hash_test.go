package memory

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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

// TestHashResistsChosenKeys: the hash multiplies two words, and a product with a zero factor is
// zero whatever the other, so a key that can zero a factor without knowing the seed would make a
// family of keys hash alike under every seed, and an attacker who picks keys could pile them into
// one probe sequence. Every factor holds a secret, so no key can.
func TestHashResistsChosenKeys(t *testing.T) {
	var k1 [8]byte
	binary.LittleEndian.PutUint64(k1[:], 0xe7037ed1a0b428db)
	var k0 [8]byte
	binary.LittleEndian.PutUint64(k0[:], 0xa0761d6478bd642f)
	families := map[string]func(i int) string{
		"short, first word a constant": func(i int) string { return string(k0[:]) + fmt.Sprintf("%08d", i) },
		"short, first word the other":  func(i int) string { return string(k1[:]) + fmt.Sprintf("%08d", i) },
		"long, a block opening with a constant": func(i int) string {
			return string(k1[:]) + fmt.Sprintf("%08d", i) + "tail that makes the key long enough"
		},
		"long, the other": func(i int) string {
			return string(k0[:]) + fmt.Sprintf("%08d", i) + "tail that makes the key long enough"
		},
	}
	for name, key := range families {
		t.Run(name, func(t *testing.T) {
			for range 3 {
				seed := rand.Uint64() // secret, as a store's is: with a known seed, keys can be chosen to collide
				seen := map[uint64]string{}
				for i := range 1000 {
					k := key(i)
					h := hash(seed, k)
					if prev, dup := seen[h]; dup {
						t.Fatalf("seed %#x: %q and %q hash alike", seed, prev, k)
					}
					seen[h] = k
				}
			}
		})
	}
}
