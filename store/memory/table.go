package memory

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A table is one shard of a keyspace: an open-addressing hash table with linear probing whose slots
// hold the key and its state inline, so a key costs one slot and no allocation of its own.
//
// Lookups take no lock. Each slot carries its own lock bit in its meta word; a check locks only its
// key's slot, so checks on different keys never contend and a hot key costs one compare-and-swap.
// The mutex is taken only to insert a key, to delete one and to rebuild the slot array.
//
// The meta word of a slot is, from the low bits: 2 bits of kind (empty, live, dead, moved), the lock
// bit, 11 bits of key length and 50 bits of the key's hash. A slot's key never changes once the slot
// is live; a deleted slot stays dead until the array is rebuilt, so a lookup never sees a slot change
// keys under it. Rebuilding locks each live slot in turn, copies it to the new array and marks it
// moved; a lookup that meets a moved slot waits for the rebuild to finish and starts over.
type table[S any] struct {
	arr atomic.Pointer[array[S]]

	mu   sync.Mutex // guards inserts, deletes, rebuilds, and live, dead and cursor
	live int        // live slots
	dead int        // dead slots in arr
	// cursor is where eviction looks for a victim next.
	cursor int
}

type array[S any] struct{ slots []slot[S] }

type slot[S any] struct {
	meta  atomic.Uint64
	key   unsafe.Pointer // the key's bytes; its length is in meta
	state S
}

const (
	kindMask = 3
	empty    = 0
	live     = 1
	dead     = 2
	moved    = 3

	locked   = 1 << 2
	lenShift = 3
	lenMask  = 1<<11 - 1
	tagShift = 14

	minSlots = 8
	// A table is rebuilt when live and dead slots pass maxLoad of it, to a size that puts the live
	// ones at newLoad: it grows by 1.25 at a time, so slots stay 70 to 87.5% full, which keeps a
	// small state at about 40 bytes a key with the map's overhead included.
	maxLoad = 0.875
	newLoad = 0.7
)

func metaOf(h uint64, keyLen int) uint64 {
	return h>>tagShift<<tagShift | uint64(keyLen)<<lenShift | live
}

func (s *slot[S]) keyIs(key string) bool {
	return unsafe.String((*byte)(s.key), len(key)) == key
}

// keyString returns the slot's key; m is its meta word.
func (s *slot[S]) keyString(m uint64) string {
	return unsafe.String((*byte)(s.key), int(m>>lenShift&lenMask))
}

// start is where h's probe begins: from the top 32 bits of the hash, which the meta word keeps, so
// a rebuild can place a slot again without the key's hash.
func (a *array[S]) start(h uint64) int {
	return int(h >> 32 * uint64(len(a.slots)) >> 32)
}

// find returns the live slot holding key, or nil. retry is true when it met a moved slot: a rebuild
// is under way and the caller must wait for it.
func (a *array[S]) find(h uint64, key string) (s *slot[S], retry bool) {
	want := metaOf(h, len(key))
	n := len(a.slots)
	for i := a.start(h); ; {
		s := &a.slots[i]
		m := s.meta.Load()
		switch m & kindMask {
		case empty:
			return nil, false
		case moved:
			return nil, true
		case live:
			if m&^locked == want && s.keyIs(key) {
				return s, false
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// lock takes the slot's lock. It fails if the slot is no longer live (deleted or moved).
func (s *slot[S]) lock() bool {
	for spins := 0; ; spins++ {
		m := s.meta.Load()
		if m&kindMask != live {
			return false
		}
		if m&locked == 0 && s.meta.CompareAndSwap(m, m|locked) {
			return true
		}
		if spins > 16 {
			runtime.Gosched()
		}
	}
}

// tryLock takes the slot's lock if the slot is live and unlocked.
func (s *slot[S]) tryLock() (uint64, bool) {
	m := s.meta.Load()
	return m, m&kindMask == live && m&locked == 0 && s.meta.CompareAndSwap(m, m|locked)
}

func (s *slot[S]) unlock() {
	s.meta.Store(s.meta.Load() &^ locked)
}

// acquire returns key's slot, locked, or nil if key is absent and create is false. A created slot
// holds the zero state: a fresh key. full is asked, under the mutex, before a key is created; it
// reports whether the store is at its cap, in which case acquire evicts a key of this table first.
func (t *table[S]) acquire(h uint64, key string, create bool, st *Store) *slot[S] {
	for {
		s, retry := t.arr.Load().find(h, key)
		switch {
		case retry:
			t.mu.Lock() // a rebuild holds the mutex until the new array is in place
			t.mu.Unlock()
		case s != nil:
			if s.lock() {
				return s
			}
		case !create:
			return nil
		default:
			if s := t.insert(h, key, st); s != nil {
				return s
			}
		}
	}
}

// insert adds key locked, or returns nil if a concurrent insert won the race; the caller looks again.
func (t *table[S]) insert(h uint64, key string, st *Store) *slot[S] {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.arr.Load()
	if s, _ := a.find(h, key); s != nil {
		return nil
	}
	if float64(t.live+t.dead+1) > maxLoad*float64(len(a.slots)) {
		a = t.rebuild(t.live + 1)
	}
	return t.place(a, h, key, st)
}

// tryInsert is insert for a caller that holds other slots: it never blocks. It returns nil when the
// mutex is busy, the key appeared meanwhile or the array needs a rebuild, which the caller must not
// wait for while it holds slots.
func (t *table[S]) tryInsert(h uint64, key string, st *Store) *slot[S] {
	if !t.mu.TryLock() {
		return nil
	}
	defer t.mu.Unlock()
	a := t.arr.Load()
	if s, _ := a.find(h, key); s != nil || float64(t.live+t.dead+1) > maxLoad*float64(len(a.slots)) {
		return nil
	}
	return t.place(a, h, key, st)
}

// place puts key, locked, in the first empty slot of its probe sequence. The caller holds the
// mutex and has made room.
func (t *table[S]) place(a *array[S], h uint64, key string, st *Store) *slot[S] {
	if st.full() {
		t.evict(st)
	}
	n := len(a.slots)
	i := a.start(h)
	for a.slots[i].meta.Load()&kindMask != empty {
		if i++; i == n {
			i = 0
		}
	}
	s := &a.slots[i]
	s.key = unsafe.Pointer(unsafe.StringData(cloneKey(key)))
	s.meta.Store(metaOf(h, len(key)) | locked)
	t.live++
	st.keys.Add(1)
	return s
}

func cloneKey(key string) string {
	b := make([]byte, len(key))
	copy(b, key)
	return unsafe.String(&b[0], len(b))
}

// rebuild copies the live slots into a new array sized for want live keys and publishes it. The
// caller holds the mutex.
func (t *table[S]) rebuild(want int) *array[S] {
	size := max(int(float64(want)/newLoad)+1, minSlots)
	next := &array[S]{slots: make([]slot[S], size)}
	if old := t.arr.Load(); old != nil {
		for i := range old.slots {
			s := &old.slots[i]
			if s.meta.Load()&kindMask != live || !s.lock() {
				continue
			}
			m := s.meta.Load() &^ locked
			j := next.start(m)
			for next.slots[j].meta.Load() != empty {
				if j++; j == size {
					j = 0
				}
			}
			d := &next.slots[j]
			d.key, d.state = s.key, s.state
			d.meta.Store(m)
			s.meta.Store(m&^kindMask | moved)
		}
	}
	t.arr.Store(next)
	t.dead, t.cursor = 0, 0
	return next
}

// remove marks a locked slot dead. The caller holds the mutex.
func (t *table[S]) remove(s *slot[S], st *Store) {
	var zero S
	s.state = zero
	s.meta.Store(s.meta.Load()&^(kindMask|locked) | dead)
	t.live--
	t.dead++
	st.keys.Add(-1)
}

// sweep deletes the keys for which idle is true, and shrinks the array when it has become mostly
// empty. Slots locked by a check are skipped: they are in use.
func (t *table[S]) sweep(idle func(*S) bool, st *Store) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.arr.Load()
	for i := range a.slots {
		s := &a.slots[i]
		if _, ok := s.tryLock(); !ok {
			continue
		}
		if idle(&s.state) {
			t.remove(s, st)
		} else {
			s.unlock()
		}
	}
	if n := len(a.slots); n > minSlots && (t.dead > n/4 || float64(t.live) < newLoad/4*float64(n)) {
		t.rebuild(t.live)
	}
}

// evict makes room for one key under the store's cap: it deletes the next live key after the
// cursor that no check holds. The caller holds the mutex.
func (t *table[S]) evict(st *Store) {
	a := t.arr.Load()
	n := len(a.slots)
	for k := 0; k < n; k++ {
		i := (t.cursor + k) % n
		s := &a.slots[i]
		if _, ok := s.tryLock(); ok {
			t.remove(s, st)
			t.cursor = (i + 1) % n
			st.evictions.Add(1)
			return
		}
	}
}

// reset deletes key if present.
func (t *table[S]) reset(h uint64, key string, st *Store) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, _ := t.arr.Load().find(h, key); s != nil && s.lock() {
		t.remove(s, st)
	}
}

// len is the number of live keys.
func (t *table[S]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}
