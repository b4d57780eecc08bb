package memory

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// hash is a seeded 64-bit hash of key built on wyhash's multiply-and-fold. It is inlined into the
// check path, where hash/maphash costs three calls for a short key; the random seed per store keeps
// an attacker who chooses keys from steering them into one probe sequence.
func hash(seed uint64, key string) uint64 {
	const k0, k1 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
	b := unsafe.Slice(unsafe.StringData(key), len(key))
	n := len(b)
	var x, y uint64
	switch {
	case n > 16:
		for len(b) > 16 {
			seed = mix(binary.LittleEndian.Uint64(b)^k1, binary.LittleEndian.Uint64(b[8:])^seed)
			b = b[16:]
		}
		b = unsafe.Slice(unsafe.StringData(key), n)[n-16:]
		fallthrough
	case n > 8:
		x, y = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[len(b)-8:])
	case n >= 4:
		x, y = uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[n-4:]))
	case n > 0:
		x = uint64(b[0])<<16 | uint64(b[n>>1])<<8 | uint64(b[n-1])
	}
	return mix(k1^uint64(n), mix(x^k1, y^seed^k0))
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
