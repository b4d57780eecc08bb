package redisstore

import "strings"

// slot is the Redis Cluster slot of key: CRC16 of its hash tag (the part between the first { and
// the next }, when not empty) or of the whole key, mod 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, no reflection, initial value 0), the checksum Redis
// Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// groupBySlot splits the indexes 0…n-1 by the slot of key(i), keeping each group in index order
// and the groups in order of their first index.
func groupBySlot(n int, key func(i int) string) [][]int {
	var groups [][]int
	at := make(map[uint16]int)
	for i := range n {
		sl := slot(key(i))
		g, ok := at[sl]
		if !ok {
			g = len(groups)
			at[sl] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}
