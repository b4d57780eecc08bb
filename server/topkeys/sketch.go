package topkeys

import (
	"cmp"
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
)

// seed hashes keys for every sketch, so that the drain hashes an event's key once for the four
// sketches it updates.
var seed = maphash.MakeSeed()

func hashKey(key string) uint64 { return maphash.String(seed, key) }

// sketch is a Space-Saving summary (Metwally, Agrawal, El Abbadi 2005) of up to k counters. Its
// guarantees, for a stream of total weight N:
//   - a tracked key's count never understates its true count, and count−err never overstates it;
//   - err ≤ Min, and a key not tracked has a true count of at most Min;
//   - Min ≤ N/k, as the counts of a full sketch sum to N.
//
// Layout, for updates that allocate nothing and touch little memory: each key has a fixed slot
// (its key, hash and error); heap is a min-heap of (count, slot), so sifting moves 16 bytes and
// compares without chasing a pointer; table is an open-addressed index hash → slot that a key
// keeps until evicted, so a sift never rehashes a key.
type sketch struct {
	k        int
	total    int64
	slots    []slot
	heap     []entry
	pos      []int32 // slot → its index in heap
	table    []int32 // slot+1, or 0 for empty; linear probing, at most half full
	tableLog uint8   // len(table) = 1 << tableLog
}

type slot struct {
	key  string
	hash uint64
	err  int64
}

type entry struct {
	count int64
	slot  int32
}

func newSketch(k int) *sketch {
	// The table doubles as the sketch fills: a bucket that sees few keys stays small.
	return &sketch{k: k, table: make([]int32, 8), tableLog: 3}
}

// Add counts n more events of key.
func (s *sketch) Add(key string, n int64) { s.add(key, hashKey(key), n, false) }

// add counts n events of key, whose hash is h, and returns the key as the sketch keeps it. A key
// new to the sketch is cloned unless owned: a caller's key may be a slice of a larger buffer (a
// request body), which the sketch must not keep alive for an hour. An owned key is one a sketch
// returned before.
func (s *sketch) add(key string, h uint64, n int64, owned bool) string {
	s.total += n
	t := s.find(key, h)
	if i := s.table[t]; i != 0 {
		p := s.pos[i-1]
		s.heap[p].count += n
		s.down(int(p))
		return s.slots[i-1].key
	}
	if !owned {
		key = strings.Clone(key)
	}
	if len(s.slots) < s.k {
		i := int32(len(s.slots))
		s.slots = append(s.slots, slot{key: key, hash: h})
		s.heap = append(s.heap, entry{count: n, slot: i})
		s.pos = append(s.pos, int32(len(s.heap)-1))
		s.table[t] = i + 1
		if 2*len(s.slots) > len(s.table) {
			s.grow()
		}
		s.up(len(s.heap) - 1)
		return key
	}
	// Full: the new key takes the minimum's slot, with the minimum's count as its error. The
	// evicted key leaves the table first, which may move the empty place found for the new one.
	e := &s.heap[0]
	old := &s.slots[e.slot]
	s.remove(s.index(old.hash, e.slot))
	*old = slot{key: key, hash: h, err: e.count}
	s.table[s.find(key, h)] = e.slot + 1
	e.count += n
	s.down(0)
	return key
}

// find returns the table index of key: its slot's, or the empty one where it would go.
func (s *sketch) find(key string, h uint64) int {
	mask := len(s.table) - 1
	for t := s.home(h); ; t = (t + 1) & mask {
		i := s.table[t]
		if i == 0 || s.slots[i-1].hash == h && s.slots[i-1].key == key {
			return t
		}
	}
}

// index returns the table index of slot i, whose key's hash is h: find without comparing keys.
func (s *sketch) index(h uint64, i int32) int {
	mask := len(s.table) - 1
	t := s.home(h)
	for s.table[t] != i+1 {
		t = (t + 1) & mask
	}
	return t
}

// home is the table index a hash starts probing at: its top bits, which maphash mixes well.
func (s *sketch) home(h uint64) int { return int(h >> (64 - s.tableLog)) }

// remove empties table index t, moving back the entries after it that probed past it (deletion
// without tombstones, so that a sketch churning through keys never degrades).
func (s *sketch) remove(t int) {
	mask := len(s.table) - 1
	for j := (t + 1) & mask; s.table[j] != 0; j = (j + 1) & mask {
		// The entry at j may move to t if its home is not cyclically in (t, j].
		if home := s.home(s.slots[s.table[j]-1].hash); (j-home)&mask >= (j-t)&mask {
			s.table[t] = s.table[j]
			t = j
		}
	}
	s.table[t] = 0
}

func (s *sketch) grow() {
	size := max(8, 1<<bits.Len(uint(2*s.k-1))) // the table's final size, at most half full
	size = min(size, 2*len(s.table))
	s.table, s.tableLog = make([]int32, size), uint8(bits.Len(uint(size))-1)
	for i, sl := range s.slots {
		s.table[s.find(sl.key, sl.hash)] = int32(i) + 1
	}
}

// Total is the weight of every event counted, tracked or not.
func (s *sketch) Total() int64 { return s.total }

// Min is the most a key the sketch does not track can have counted: the smallest count once the
// sketch is full, 0 before.
func (s *sketch) Min() int64 {
	if len(s.slots) < s.k {
		return 0
	}
	return s.heap[0].count
}

// Top returns the n largest counts, by count descending, then key.
func (s *sketch) Top(n int) []Count {
	out := make([]Count, len(s.heap))
	for i, e := range s.heap {
		sl := &s.slots[e.slot]
		out[i] = Count{Key: sl.key, Count: e.count, Error: sl.err}
	}
	sortCounts(out)
	return out[:min(max(n, 0), len(out))]
}

func sortCounts(cs []Count) {
	slices.SortFunc(cs, func(a, b Count) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

func (s *sketch) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if h[i].count >= h[p].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down restores the heap below i after its count grew. Equal counts stop it, so the flat counts of
// a flood of distinct keys cost few moves.
func (s *sketch) down(i int) {
	h := s.heap
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h[r].count < h[c].count {
			c = r
		}
		if h[c].count >= h[i].count {
			return
		}
		s.swap(i, c)
		i = c
	}
}

func (s *sketch) swap(a, b int) {
	h := s.heap
	h[a], h[b] = h[b], h[a]
	s.pos[h[a].slot], s.pos[h[b].slot] = int32(a), int32(b)
}

// merge returns a sketch of k counters summarising the union of parts' streams, by the rule of the
// mergeable summaries (Agarwal et al. 2012): a key's count is the sum of its counts in the parts,
// where a part that does not track it adds its Min (the most it can have counted there) to both
// count and error; the k largest are kept. The guarantees of a sketch hold for the result:
//   - count ≥ the true count and count−err ≤ it, part by part, so for the sum;
//   - err ≤ Σ parts' Min ≤ Σ N_i/k = N/k;
//   - no k keys' summed counts exceed N (each part contributes at most its own N_i to any k keys,
//     its untracked keys' Min being no more than any of its counts), so the k-th largest count,
//     the result's Min and the most a dropped key can have, is at most N/k.
//
// floor is Σ parts' Min: no key of the result overstates its count by more.
func merge(k int, parts ...*sketch) (m *sketch, floor int64) {
	var total int64
	n := 0
	for _, p := range parts {
		floor += p.Min()
		total += p.total
		n += len(p.slots)
	}
	// Sum each key's counts less each part's Min; every key then gets floor back at once, which
	// adds the Min of every part that does not track it.
	at := make(map[string]int, n)
	all := make([]Count, 0, n)
	for _, p := range parts {
		pm := p.Min()
		for _, e := range p.heap {
			sl := &p.slots[e.slot]
			i, ok := at[sl.key]
			if !ok {
				i = len(all)
				at[sl.key] = i
				all = append(all, Count{Key: sl.key, Count: floor, Error: floor})
			}
			all[i].Count += e.count - pm
			all[i].Error += sl.err - pm
		}
	}
	sortCounts(all)
	m = newSketch(k)
	// Added largest first, each new key lands at the heap's end and stays there.
	for _, c := range all[:min(k, len(all))] {
		m.add(c.Key, hashKey(c.Key), c.Count, true)
		m.slots[len(m.slots)-1].err = c.Error
	}
	m.total = total
	return m, floor
}
