package memory

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// hash is a seeded 64-bit hash of key built on wyhash's multiply-and-fold; the random seed per
// store keeps an attacker who chooses keys from steering them into one probe sequence. Each product
// has a secret in both of its factors: a factor a key could zero by itself (a word of the key
// XORed with a public constant) would zero the product whatever the seed, and every key of that
// family would hash alike under every seed.
func hash(seed uint64, key string) uint64 {
	h, _, _ := hashKey(seed, key)
	return h
}

// hashKey returns key's hash and the two words that words packs it in. A key of up to 16 bytes is
// hashed from those words, which with its length hold every byte of it, so a check reads the key's
// bytes once, in one call.
func hashKey(seed uint64, key string) (h, w0, w1 uint64) {
	const k0, k1 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
	w0, w1 = words(key)
	n := len(key)
	x, y := w0, w1
	mask := seed * k0 // a second secret, for the factors the seed itself is not in
	if n > inlineKey {
		b := unsafe.Slice(unsafe.StringData(key), n)
		for len(b) > 16 {
			seed = mix(binary.LittleEndian.Uint64(b)^mask, binary.LittleEndian.Uint64(b[8:])^seed)
			b = b[16:]
		}
		x, y = le64(unsafe.StringData(key[n-16:])), le64(unsafe.StringData(key[n-8:]))
	}
	return mix(k1^uint64(n), mix(x^mask, y^seed^k0)), w0, w1
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
