package lease

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keys maps the keys of one policy to their slots. Lookups take no lock: an open-addressing array
// of slot pointers, probed linearly from the key's hash, published whole through an atomic
// pointer. Inserts and deletes take mu and write into the published array, one atomic pointer
// store each; growing builds a new array and publishes it. A lookup that races an insert may miss
// the key and then finds it under mu; one that races a delete may find a slot marked dead, which
// holds no units, and looks again under the slot's lock.
type keys struct {
	mu   sync.Mutex
	arr  atomic.Pointer[keyArray]
	live int // slots in arr (guarded by mu)
	used int // slots and tombstones in arr (guarded by mu)
}

type keyArray struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Pointer[slot]
}

// tombstone marks a deleted entry, so that probes go on past it. Its key is empty, which no slot's
// is, and it never holds a lease: a lookup of "" that stops on it finds nothing to spend.
var tombstone = &slot{}

const minKeyArray = 16

func newKeyArray(size int) *keyArray {
	return &keyArray{seed: maphash.MakeSeed(), mask: uint64(size - 1), slots: make([]atomic.Pointer[slot], size)}
}

// load returns the slot of key, or nil.
func (k *keys) load(key string) *slot {
	a := k.arr.Load()
	if a == nil {
		return nil
	}
	for i := maphash.String(a.seed, key) & a.mask; ; i = (i + 1) & a.mask {
		s := a.slots[i].Load()
		if s == nil {
			return nil
		}
		if s.key == key {
			return s
		}
	}
}

// loadOrStore returns the slot of key, adding a new one of table t if there is none.
func (k *keys) loadOrStore(t *table, key string) *slot {
	if s := k.load(key); s != nil {
		return s
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.arr.Load()
	if a != nil {
		if s := k.load(key); s != nil {
			return s
		}
	}
	if a == nil || 2*(k.used+1) > len(a.slots) {
		a = k.rebuild(k.live + 1)
	}
	s := &slot{key: key, t: t}
	for i := maphash.String(a.seed, key) & a.mask; ; i = (i + 1) & a.mask {
		switch a.slots[i].Load() {
		case nil:
			k.used++
		case tombstone:
		default:
			continue
		}
		a.slots[i].Store(s)
		k.live++
		return s
	}
}

// remove deletes s, if it is still the slot of its key.
func (k *keys) remove(s *slot) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.arr.Load()
	if a == nil {
		return
	}
	for i := maphash.String(a.seed, s.key) & a.mask; ; i = (i + 1) & a.mask {
		switch a.slots[i].Load() {
		case nil:
			return
		case s:
			a.slots[i].Store(tombstone)
			k.live--
			if k.live == 0 || len(a.slots) > minKeyArray && 8*k.live < len(a.slots) {
				k.rebuild(k.live)
			}
			return
		}
	}
}

// rebuild publishes a new array for n live slots, without tombstones, and returns it. It runs
// under mu.
func (k *keys) rebuild(n int) *keyArray {
	size := minKeyArray
	for size < 4*n {
		size *= 2
	}
	next := newKeyArray(size)
	if old := k.arr.Load(); old != nil {
		for i := range old.slots {
			s := old.slots[i].Load()
			if s == nil || s == tombstone {
				continue
			}
			j := maphash.String(next.seed, s.key) & next.mask
			for next.slots[j].Load() != nil {
				j = (j + 1) & next.mask
			}
			next.slots[j].Store(s)
		}
	}
	k.arr.Store(next)
	k.used = k.live
	return next
}

// each calls f with every slot, from a snapshot of the array: slots added meanwhile may be missed.
func (k *keys) each(f func(*slot)) {
	a := k.arr.Load()
	if a == nil {
		return
	}
	for i := range a.slots {
		if s := a.slots[i].Load(); s != nil && s != tombstone {
			f(s)
		}
	}
}
