package memory

import (
	"encoding/binary"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A table is one shard of a keyspace: an open-addressing hash table with linear probing whose slots
// hold the key and its state inline, so a key of up to 16 bytes costs one slot and no allocation of
// its own, and a lookup reads one cache line. A longer key is kept in the array's list of long keys,
// which its slot indexes.
//
// Lookups take no lock, and each slot is locked on its own, so checks on different keys never
// contend. The mutex is taken only to insert a key, to delete one and to rebuild the slot array.
//
// A slot is locked in one of two ways. A state of one 64-bit word (GCRA's) is its own lock: a check
// reads it, decides, and swaps in the new state with one compare-and-swap, retrying if another check
// came first; everything else that needs the slot to itself (a rebuild, a sweep, a multi-key step)
// freezes the word, replacing it with a value no state ever has. A larger state is guarded by the
// lock bit of the slot's meta word.
//
// The meta word of a slot is, from the low bits: 2 bits of kind (empty, live, dead, moved), the lock
// bit, 11 bits of key length and 50 bits of the key's hash. A slot's key never changes once the slot
// is live; a deleted slot stays dead (and locked) until the array is rebuilt, so a lookup never sees
// a slot change keys under it. A rebuild locks each live slot in turn, copies it to the new array and
// marks it moved; whoever meets a moved slot waits for the rebuild to finish and starts over.
type table[S any] struct {
	arr   atomic.Pointer[array[S]]
	word  bool // S is one 64-bit word
	store *Store
	idle  func(s S, now int64) bool // whether s decides like a fresh key at now and after

	_ [64]byte // keeps what inserts write off the line every check of the shard reads

	mu   sync.Mutex // guards inserts, deletes, rebuilds, and live, dead and cursor
	live int        // live slots
	dead int        // dead slots in arr
	// cursor is where the cap's search for an idle key resumes.
	cursor int
}

// array is one generation of a table's slots. An entry of longs is written once, before the slot
// that indexes it is published, and never again while the array is in use, so lookups read it
// without a lock; the entries of deleted keys stay until the next rebuild. The slice itself is
// never assigned after the array is built (lookups read its header unlocked): nlongs counts the
// entries in use.
type array[S any] struct {
	slots  []slot[S]
	longs  []string // long keys; its length is the room, grown by rebuilding
	nlongs int      // entries of longs in use; the table's mutex guards it
}

type slot[S any] struct {
	meta atomic.Uint64
	// key is the key packed by words; for a long key (over inlineKey bytes), its first 8 bytes and
	// its index in longs. The key's length is in meta.
	key   [2]uint64
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

	// frozen is a locked word state: a NaN that no decision ever computes.
	frozen = 0x7ff8_dead_beef_0001

	minSlots = 8
	// inlineKey is the longest key a slot holds inline.
	inlineKey = 16
	// A table is rebuilt when live and dead slots pass maxLoad of it, to a size that puts the live
	// ones at newLoad: it grows by 1.25 at a time, so slots stay 70 to 87.5% full, which keeps a
	// two-word state (a 32-byte slot) at 37 to 46 bytes a key, the table's overhead included.
	maxLoad = 0.875
	newLoad = 0.7
)

func (t *table[S]) init(st *Store, idle func(S, int64) bool) {
	t.word = unsafe.Sizeof(*new(S)) == 8
	t.store, t.idle = st, idle
	t.rebuild(0, false)
}

func metaOf(h uint64, keyLen int) uint64 {
	return h>>tagShift<<tagShift | uint64(keyLen)<<lenShift | live
}

// words packs key as a slot holds it. With the key's length, which meta holds, the packing
// determines every byte: a key of 8 to 16 bytes is its first and its last 8 bytes (overlapping below
// 16), one of 4 to 7 its first and last 4, a shorter one its first, middle and last byte. A longer
// key is its first 8 bytes and 0, the index in longs to be filled in.
//
// It returns two words, not an array: an array comes back through memory, written 8 bytes at a
// time and read back 16, which the CPU cannot forward from its store buffer (a stall of a quarter
// of a hot-key check).
func words(key string) (w0, w1 uint64) {
	n := len(key)
	if n < 8 {
		return shortWord(key), 0
	}
	p := unsafe.StringData(key)
	w0 = le64(p)
	if n <= inlineKey {
		w1 = le64((*byte)(unsafe.Add(unsafe.Pointer(p), n-8)))
	}
	return w0, w1
}

// le64 reads the 8 bytes at p as a little-endian word.
func le64(p *byte) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Pointer(p))[:]) }

func shortWord(key string) uint64 {
	b := unsafe.Slice(unsafe.StringData(key), len(key))
	switch n := len(b); {
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32
	case n > 0:
		return uint64(b[0]) | uint64(b[n/2])<<8 | uint64(b[n-1])<<16
	}
	return 0
}

// keyIs reports whether the live slot s holds key, packed as w0, w1.
func (a *array[S]) keyIs(s *slot[S], key string, w0, w1 uint64) bool {
	if len(key) <= inlineKey {
		return s.key[0] == w0 && s.key[1] == w1
	}
	return s.key[0] == w0 && a.longs[s.key[1]] == key
}

// keyOf returns the key of the live slot s.
func (a *array[S]) keyOf(s *slot[S]) string {
	n := int(s.meta.Load() >> lenShift & lenMask)
	if n > inlineKey {
		return a.longs[s.key[1]]
	}
	var b [inlineKey]byte
	switch w := s.key; {
	case n >= 8:
		binary.LittleEndian.PutUint64(b[n-8:], w[1])
		binary.LittleEndian.PutUint64(b[:], w[0])
	case n >= 4:
		binary.LittleEndian.PutUint32(b[n-4:], uint32(w[0]>>32))
		binary.LittleEndian.PutUint32(b[:], uint32(w[0]))
	case n > 0:
		b[0], b[n/2], b[n-1] = byte(w[0]), byte(w[0]>>8), byte(w[0]>>16)
	}
	return string(b[:n])
}

func (s *slot[S]) word() *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&s.state)) }

func (s *slot[S]) isLive() bool { return s.meta.Load()&kindMask == live }

// start is where h's probe begins: from the top 32 bits of the hash, which the meta word keeps, so
// a rebuild can place a slot again without the key's hash.
func (a *array[S]) start(h uint64) int {
	return int(h >> 32 * uint64(len(a.slots)) >> 32)
}

// find returns the live slot holding key, or nil. retry is true when it met a moved slot: a rebuild
// is under way and the caller must wait for it.
func (a *array[S]) find(h uint64, key string) (s *slot[S], retry bool) {
	w0, w1 := words(key)
	return a.findWords(h, key, w0, w1)
}

// findWords is find for a key already packed by words.
func (a *array[S]) findWords(h uint64, key string, w0, w1 uint64) (s *slot[S], retry bool) {
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
			if m&^locked == want && a.keyIs(s, key, w0, w1) {
				return s, false
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// spin waits a little before the i-th retry of a contended slot, yielding the processor now and
// then in case the holder was descheduled.
func spin(i int) {
	if i&63 == 63 {
		runtime.Gosched()
	}
}

// tryLock locks s and returns its state, or fails at once if s is locked or no longer live.
func (t *table[S]) tryLock(s *slot[S]) (v S, ok bool) {
	if t.word {
		w := s.word().Load()
		if w == frozen || !s.word().CompareAndSwap(w, frozen) {
			return v, false
		}
		return *(*S)(unsafe.Pointer(&w)), true
	}
	m := s.meta.Load()
	if m&kindMask != live || m&locked != 0 || !s.meta.CompareAndSwap(m, m|locked) {
		return v, false
	}
	return s.state, true
}

// lockPair locks the slot s of a two-word state if it is live and free, without waiting, and
// returns the meta word that unlocks it (unlockPair). It inlines into a check's common case.
func lockPair[S any](s *slot[S]) (m uint64, ok bool) {
	m = s.meta.Load()
	return m, m&(kindMask|locked) == live && s.meta.CompareAndSwap(m, m|locked)
}

// unlockPair stores v as the state of s, locked by lockPair, and unlocks it with m.
func unlockPair[S any](s *slot[S], m uint64, v S) {
	s.state = v
	s.meta.Store(m)
}

// lock locks s and returns its state, waiting while another holds it. It fails if s is no longer
// live.
func (t *table[S]) lock(s *slot[S]) (v S, ok bool) {
	for i := 0; ; i++ {
		if v, ok = t.tryLock(s); ok || !s.isLive() {
			return v, ok
		}
		spin(i)
	}
}

// unlock stores v as the state of the locked slot s and releases it.
func (t *table[S]) unlock(s *slot[S], v S) {
	if t.word {
		s.word().Store(*(*uint64)(unsafe.Pointer(&v)))
		return
	}
	s.state = v
	s.meta.Store(s.meta.Load() &^ locked)
}

// retire turns the locked slot s dead or moved; it stays locked for good.
func (t *table[S]) retire(s *slot[S], kind uint64) {
	if !t.word {
		var zero S
		s.state = zero // let go of what the state refers to
	}
	s.meta.Store(s.meta.Load()&^kindMask | kind)
}

// get returns key's slot locked, with its state; nil if key is absent and create is false, or if
// the store is at MaxKeys and the shard has no idle key to give up for it (counted in Refusals). A
// created key holds the zero state: a fresh key.
func (t *table[S]) get(h uint64, key string, create bool) (*slot[S], S) {
	w0, w1 := words(key)
	return t.getWords(h, key, w0, w1, create)
}

// getWords is get for a key already packed by words.
func (t *table[S]) getWords(h uint64, key string, w0, w1 uint64, create bool) (*slot[S], S) {
	for {
		s, retry := t.arr.Load().findWords(h, key, w0, w1)
		switch {
		case retry:
			t.mu.Lock() // a rebuild holds the mutex until the new array is in place
			t.mu.Unlock()
		case s != nil:
			if v, ok := t.lock(s); ok {
				return s, v
			}
		case !create:
			var zero S
			return nil, zero
		default:
			s, refused := t.insert(h, key)
			if s != nil || refused {
				var zero S
				return s, zero
			}
		}
	}
}

// read returns the word state of s, or false while s is locked (frozen).
func (t *table[S]) read(s *slot[S]) (S, bool) {
	w := s.word().Load()
	return *(*S)(unsafe.Pointer(&w)), w != frozen
}

// swap replaces the word state old of s with next, unless another check changed it first.
func (t *table[S]) swap(s *slot[S], old, next S) bool {
	o, n := *(*uint64)(unsafe.Pointer(&old)), *(*uint64)(unsafe.Pointer(&next))
	return o == n || s.word().CompareAndSwap(o, n)
}

// insert adds key, locked. It returns nil if a concurrent insert won the race (the caller looks
// again), or nil and refused if the cap leaves no room.
func (t *table[S]) insert(h uint64, key string) (s *slot[S], refused bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.arr.Load()
	if s, _ := a.find(h, key); s != nil {
		return nil, false
	}
	if !t.makeRoom() {
		return nil, true
	}
	if !a.room(t, key) {
		a = t.rebuild(t.live+1, len(key) > inlineKey)
	}
	return t.place(a, h, key), false
}

// tryInsert is insert for a caller that holds other slots: it never blocks. It returns nil when the
// mutex is busy, the key appeared meanwhile, the array needs a rebuild (which the caller must not
// wait for while it holds slots) or the store is at its cap; the caller then lets go and calls
// insert, which tells a refusal apart.
func (t *table[S]) tryInsert(h uint64, key string) *slot[S] {
	if !t.mu.TryLock() {
		return nil
	}
	defer t.mu.Unlock()
	a := t.arr.Load()
	if s, _ := a.find(h, key); s != nil || !a.room(t, key) || t.store.full() {
		return nil
	}
	return t.place(a, h, key)
}

// room reports whether a holds one more key without a rebuild. The caller holds the mutex.
func (a *array[S]) room(t *table[S], key string) bool {
	if float64(t.live+t.dead+1) > maxLoad*float64(len(a.slots)) {
		return false
	}
	return len(key) <= inlineKey || a.nlongs < len(a.longs)
}

// place puts key, locked, in the first empty slot of its probe sequence. The caller holds the
// mutex and has made room.
func (t *table[S]) place(a *array[S], h uint64, key string) *slot[S] {
	s := a.empty(h)
	s.key[0], s.key[1] = words(key)
	if len(key) > inlineKey {
		s.key[1] = uint64(a.nlongs)
		a.longs[a.nlongs] = strings.Clone(key)
		a.nlongs++
	}
	m := metaOf(h, len(key))
	if t.word {
		s.word().Store(frozen)
	} else {
		m |= locked
	}
	s.meta.Store(m)
	t.live++
	t.store.keys.Add(1)
	return s
}

// empty returns the first empty slot of h's probe sequence.
func (a *array[S]) empty(h uint64) *slot[S] {
	n := len(a.slots)
	i := a.start(h)
	for a.slots[i].meta.Load()&kindMask != empty {
		if i++; i == n {
			i = 0
		}
	}
	return &a.slots[i]
}

// rebuild copies the live slots into a new array sized for want live keys and publishes it; an
// empty table keeps a single empty slot. The new array has room for twice the long keys held, and
// for 4 more if long is set (the caller is inserting one). The caller holds the mutex.
func (t *table[S]) rebuild(want int, long bool) *array[S] {
	old := t.arr.Load()
	longs := 0
	if old != nil {
		for i := range old.slots {
			if m := old.slots[i].meta.Load(); m&kindMask == live && m>>lenShift&lenMask > inlineKey {
				longs++
			}
		}
	}
	if long {
		longs += 2
	}
	next := &array[S]{slots: make([]slot[S], sizeFor(want))}
	if longs > 0 {
		next.longs = make([]string, 2*longs)
	}
	if old != nil {
		for i := range old.slots {
			s := &old.slots[i]
			v, ok := t.lock(s)
			if !ok {
				continue
			}
			m := s.meta.Load() &^ locked
			d := next.empty(m)
			d.key, d.state = s.key, v
			if m>>lenShift&lenMask > inlineKey {
				d.key[1] = uint64(next.nlongs)
				next.longs[next.nlongs] = old.longs[s.key[1]]
				next.nlongs++
			}
			d.meta.Store(m)
			t.retire(s, moved)
		}
	}
	t.arr.Store(next)
	t.dead, t.cursor = 0, 0
	return next
}

// sizeFor is the array size that holds want live keys at newLoad.
func sizeFor(want int) int {
	if want == 0 {
		return 1
	}
	return max(int(float64(want)/newLoad)+1, minSlots)
}

// remove deletes the locked slot s. The caller holds the mutex.
func (t *table[S]) remove(s *slot[S]) {
	t.retire(s, dead)
	t.live--
	t.dead++
	t.store.keys.Add(-1)
}

// sweep deletes the keys idle at now, and shrinks the array when it has become mostly empty. Slots
// locked by a check are skipped: they are in use.
func (t *table[S]) sweep(now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.arr.Load()
	for i := range a.slots {
		s := &a.slots[i]
		if !s.isLive() {
			continue
		}
		v, ok := t.tryLock(s)
		switch {
		case !ok:
		case t.idle(v, now):
			t.remove(s)
		default:
			t.unlock(s, v)
		}
	}
	if n := len(a.slots); t.dead > n/4 || sizeFor(t.live) <= n/2 {
		t.rebuild(t.live, false)
	}
}

// evictScan is how many slots one insert at the cap looks through for an idle key: a flood of new
// keys then costs a bounded scan each, not one of the whole shard. The cursor moves on, so
// successive inserts look at successive slots.
const evictScan = 256

// makeRoom reports whether a key may be inserted under the store's cap: below it, or at it once an
// idle key of this shard is deleted, since forgetting an idle key loosens nothing. A key that is
// still spending is never evicted: forgetting it would give it a fresh budget. So at the cap with
// none idle among the slots looked at, the new key is refused (counted) until the sweep or an
// insert finds keys gone idle. The caller holds the mutex.
func (t *table[S]) makeRoom() bool {
	if !t.store.full() {
		return true
	}
	a := t.arr.Load()
	n := len(a.slots)
	now := t.store.sweepNow()
	for k := 0; k < min(n, evictScan); k++ {
		i := (t.cursor + k) % n
		s := &a.slots[i]
		if !s.isLive() {
			continue
		}
		v, ok := t.tryLock(s)
		if !ok {
			continue
		}
		if t.idle(v, now) {
			t.remove(s)
			t.cursor = (i + 1) % n
			t.store.evictions.Add(1)
			return true
		}
		t.unlock(s, v)
	}
	t.cursor = (t.cursor + min(n, evictScan)) % n
	t.store.refusals.Add(1)
	t.store.kick()
	return false
}

// reset deletes key if present.
func (t *table[S]) reset(h uint64, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, _ := t.arr.Load().find(h, key); s != nil {
		if _, ok := t.lock(s); ok {
			t.remove(s)
		}
	}
}

// len is the number of live keys.
func (t *table[S]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}
