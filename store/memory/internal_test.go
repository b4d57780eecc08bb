package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// NumShards is the number of shards of each limit's keyspace, for the external tests: MaxKeys may
// be passed by one key per shard.
const NumShards = numShards

const internalT0 = int64(1_700_000_040_000)

var ctx0 = context.Background()

func testStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	s := New(cfg)
	t.Cleanup(func() { s.Close() })
	return s
}

// keyHash is the hash the store files key under.
func keyHash(s *Store, key string) uint64 { return hash(s.seed, key) }

type instant struct{ ms int64 }

func (c *instant) now() int64 { return c.ms }

// keysOfShard returns n keys that fall in one shard of s.
func keysOfShard(s *Store, n int) []string {
	var out []string
	want := uint64(1<<64 - 1)
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprint("key-", i)
		sh := keyHash(s, k) % numShards
		if want == 1<<64-1 {
			want = sh
		}
		if sh == want {
			out = append(out, k)
		}
	}
	return out
}

// liveKeys lists the keys of t in slot order.
func liveKeys[S any](t *table[S]) []string {
	var out []string
	a := t.arr.Load()
	for i := range a.slots {
		if a.slots[i].isLive() {
			out = append(out, a.keyOf(&a.slots[i]))
		}
	}
	return out
}

func hasKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// TestCapNeverEvictsSpending pins down what the MaxKeys cap does: at the cap a new key takes the
// place of an idle key (forgetting it loosens nothing; counted as an eviction); with no idle key it
// is refused with ErrFull (counted) and every key still spending keeps its state.
func TestCapNeverEvictsSpending(t *testing.T) {
	s := testStore(t, Config{Now: func() int64 { return internalT0 }, MaxKeys: 2})
	p := sluice.MustPolicy("ev", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}})
	sp := s.partsOf(p)[0].keys().(*space[algo.FixedWindowState])
	keys := keysOfShard(s, 12)
	tbl := sp.shard(keyHash(s, keys[0]))
	check := func(key string, cost int64) {
		t.Helper()
		if d, err := s.Check(ctx0, 0, p, key, cost); err != nil || !d.Allowed {
			t.Fatalf("check of %s: %+v, %v", key, d, err)
		}
	}

	busy, idle := keys[0], keys[1]
	check(busy, 5)
	check(idle, 2)
	_ = s.Refund(ctx0, 0, p, idle, 2) // back to a fresh key's state: idle
	check(keys[2], 1)                 // at the cap: the idle key goes
	if got := liveKeys(tbl); !hasKey(got, busy) || hasKey(got, idle) || s.Evictions() != 1 || s.Len() != 2 {
		t.Fatalf("shard %v, Evictions %d, Len %d: want %s dropped as idle, counted, Len 2",
			got, s.Evictions(), s.Len(), idle)
	}

	// No key is idle now: a new key is refused, and changes nothing.
	for _, k := range keys[3:] {
		if _, err := s.Check(ctx0, 0, p, k, 1); !errors.Is(err, ErrFull) || !errors.Is(err, sluice.ErrUnavailable) {
			t.Fatalf("check of new key %s at the cap: %v, want ErrFull matching ErrUnavailable", k, err)
		}
	}
	if err := s.Debit(ctx0, 0, p, keys[3], 1); !errors.Is(err, ErrFull) {
		t.Fatalf("debit of a new key at the cap: %v, want ErrFull", err)
	}
	if got := liveKeys(tbl); !hasKey(got, busy) || !hasKey(got, keys[2]) || len(got) != 2 || s.Refusals() != uint64(len(keys)-3+1) {
		t.Fatalf("shard %v, Refusals %d: want %s and %s kept, %d refusals", got, s.Refusals(), busy, keys[2], len(keys)-3+1)
	}
	if d, _ := s.Peek(ctx0, 0, p, busy); d.Remaining != 0 || d.Allowed {
		t.Fatalf("the spent key after the refusals: %+v, want still spent", d)
	}
	if _, err := s.Admit(ctx0, 0, "slots", "k", "h", 1, 1000); !errors.Is(err, ErrFull) {
		t.Fatalf("admit of a new concurrency key at the cap: %v, want ErrFull", err)
	}

	// A composite or CheckAll step with a refused key consumes nothing.
	if err := s.CheckAll(ctx0, 0, []*sluice.Policy{p, p}, []sluice.Item{{Policy: p.Name(), Key: keys[2], Cost: 1}, {Policy: p.Name(), Key: keys[5], Cost: 1}}, make([]sluice.Decision, 2)); !errors.Is(err, ErrFull) {
		t.Fatalf("CheckAll with a new key at the cap: %v, want ErrFull", err)
	}
	if d, _ := s.Peek(ctx0, 0, p, keys[2]); d.Remaining != 4 {
		t.Fatalf("%s after a refused CheckAll: %+v, want remaining 4 (nothing consumed)", keys[2], d)
	}
	// CheckMany decides the keys it holds and names the refused ones.
	out := make([]sluice.Decision, 2)
	err := s.CheckMany(ctx0, 0, p, []string{busy, keys[6]}, 1, out)
	var full *FullError
	if !errors.As(err, &full) || len(full.Refused) != 1 || full.Refused[0] != 1 || out[0].Allowed {
		t.Fatalf("CheckMany(busy, new) = %+v, %v: want busy denied, key 1 refused", out, err)
	}
}

// prepares the key and starts over) decides like a fresh key and keeps every other key.
func TestCompositeInsertTriggersRebuild(t *testing.T) {
	s := testStore(t, Config{Now: func() int64 { return internalT0 }})
	p := sluice.MustPolicy("comp",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 1}},
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}})
	parts := s.partsOf(p)
	g := parts[0].keys().(*space[algo.GCRAState])
	tb := parts[1].keys().(*space[algo.TokenBucketState])
	rebuilds := 0
	var keys []string
	for i := 0; rebuilds < 8; i++ {
		key := fmt.Sprint("k", i)
		h := keyHash(s, key)
		gt, tt := g.shard(h), tb.shard(h)
		gt.mu.Lock()
		needs := float64(gt.live+gt.dead+1) > maxLoad*float64(len(gt.arr.Load().slots))
		gt.mu.Unlock()
		ga, ta := gt.arr.Load(), tt.arr.Load()
		var d sluice.Decision
		if i%2 == 0 {
			d, _ = s.Check(ctx0, 0, p, key, 2)
		} else {
			out := make([]sluice.Decision, 1)
			_ = s.CheckAll(ctx0, 0, []*sluice.Policy{p}, []sluice.Item{{Policy: p.Name(), Key: key, Cost: 2}}, out)
			d = out[0]
		}
		if !d.Allowed || d.Remaining != 8 {
			t.Fatalf("first check of %s: %+v, want allowed with remaining 8", key, d)
		}
		keys = append(keys, key)
		if needs {
			if gt.arr.Load() == ga || tt.arr.Load() == ta {
				t.Fatalf("inserting %s should have rebuilt its shard", key)
			}
			rebuilds++
		}
	}
	for _, k := range keys {
		if d, _ := s.Peek(ctx0, 0, p, k); d.Remaining != 8 || len(d.Parts) != 3 {
			t.Fatalf("Peek(%s) = %+v, want remaining 8 in every limit", k, d)
		}
	}
	if s.Len() != 3*len(keys) {
		t.Fatalf("Len %d, want %d", s.Len(), 3*len(keys))
	}
}

// TestReloadKeepsOldDefinition: a replaced definition stays bound for checks still holding the old
// policy, over the keyspace the new one shares; Sweep drops its keys as they go idle and shrinks
// its tables to one slot a shard.
func TestReloadKeepsOldDefinition(t *testing.T) {
	clk := &instant{internalT0}
	s := testStore(t, Config{Now: clk.now})
	v1 := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}})
	v2 := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 20, PeriodMs: 1000, Burst: 20}})
	s.Check(ctx0, 0, v1, "k", 1)
	s.Peek(ctx0, 0, v2, "k") // binds v2 without a key
	defs := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.defs["api"])
	}
	if defs() != 2 {
		t.Fatalf("%d definitions, want 2", defs())
	}
	s.Sweep()
	if s.Len() != 1 {
		t.Fatalf("after a Sweep with v1's key busy: Len %d, want 1", s.Len())
	}
	clk.ms += 100 // v1's key back to full
	s.Sweep()
	if s.Len() != 0 {
		t.Fatalf("after a Sweep with v1's key idle: Len %d, want 0", s.Len())
	}
	old := s.partsOf(v1)[0].keys().(*space[algo.GCRAState])
	for i := range old.shards {
		if n := len(old.shards[i].arr.Load().slots); n != 1 {
			t.Fatalf("shard %d of the idle definition holds %d slots, want 1", i, n)
		}
	}
	if d, _ := s.Check(ctx0, 0, v1, "k", 1); d.Remaining != 9 {
		t.Errorf("v1 after the sweep: remaining %d, want 9", d.Remaining)
	}
	// v2 reads the TAT v1's check left (the same key), under its own numbers: T 50 ms, tau 1000.
	if d, _ := s.Check(ctx0, 0, v2, "k", 1); d.Remaining != 17 {
		t.Errorf("v2 after the sweep: remaining %d, want 17", d.Remaining)
	}
}

// TestSweepDuringCheckKeepsItsDefinition: a check resolves its policy's parts (Store.Check:
// partsOf, then the check itself) and a Sweep runs in between. The check's consumption must not
// vanish. The policy is the current one after a config went v1 -> v2 -> v1 again, so v1's
// definition is in use but not the newest of its name.
func TestSweepDuringCheckKeepsItsDefinition(t *testing.T) {
	clk := &instant{internalT0}
	s := testStore(t, Config{Now: clk.now})
	v1 := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}})
	v2 := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 1000}})
	v1again := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}})
	lim, err := sluice.New(s, v1)
	if err != nil {
		t.Fatal(err)
	}
	lim.Check(ctx0, "api", "x", 1)
	lim.SetPolicies(v2)
	lim.Peek(ctx0, "api", "x") // v2 bound
	lim.SetPolicies(v1again)   // reverted: shares v1's definition
	if d, _ := lim.Check(ctx0, "api", "x", 1); d.Remaining != 0 {
		t.Fatalf("v1 again does not share v1's state: %+v", d)
	}

	clk.ms += 1000 // a new window: x is idle
	// A check of z under the current policy resolves its parts...
	parts := s.partsOf(v1again)
	// ...the background sweep runs...
	s.Sweep()
	// ...and the check goes on, spending z's whole window.
	if d, _ := parts[0].check(keyHash(s, "z"), "z", clk.now(), 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the interleaved check: %+v", d)
	}
	if d, _ := lim.Check(ctx0, "api", "z", 1); d.Allowed {
		t.Errorf("z spent its limit of 2 in this window, yet the next check is allowed: %+v "+
			"(the first check wrote to state the store forgot)", d)
	}
	clk.ms += 10_000
	s.Sweep()
	if s.Len() != 0 {
		t.Errorf("Len %d after every key went idle, want 0", s.Len())
	}
}

// TestCloseStopsBackground: Close ends the sweep goroutine and the clock's ticker, and a read of the
// clock after Close does not start it again.
func TestCloseStopsBackground(t *testing.T) {
	s := New(Config{SweepInterval: time.Millisecond})
	p := sluice.MustPolicy("p", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}})
	s.Check(ctx0, 0, p, "k", 1)
	s.Close()
	select {
	case <-s.done:
	default:
		t.Fatal("the sweep goroutine has not finished after Close")
	}
	s.Close() // idempotent; the clock's own Close is tested in package msclock
}

// TestKeysInlineAndLong tells apart keys of every length around the inline limit: keys that differ
// only in a byte the packing of 8 to 16 bytes overlaps, only past a long key's 8-byte prefix, or
// only in length. Each key is spent once under a limit of 1, so a key mistaken for another shows
// as a denial; the tables are rebuilt as they grow, and a sweep and a reset follow.
func TestKeysInlineAndLong(t *testing.T) {
	at := internalT0
	s := testStore(t, Config{Now: func() int64 { return at }})
	p := sluice.MustPolicy("keys", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}})
	var keys []string
	for n := 1; n <= 40; n++ {
		base := []byte(fmt.Sprintf("%040d", n))[:n]
		for _, i := range []int{0, n / 2, n - 1} {
			for _, c := range []byte("abc") {
				k := append([]byte(nil), base...)
				k[i] = c
				keys = append(keys, string(k))
			}
		}
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for round, want := range []bool{true, false} {
		for _, k := range keys {
			if d, _ := s.Check(ctx0, 0, p, k, 1); d.Allowed != want {
				t.Fatalf("round %d: check of %q allowed=%v, want %v", round, k, d.Allowed, want)
			}
		}
	}
	sp := s.partsOf(p)[0].keys().(*space[algo.FixedWindowState])
	var held []string
	for i := range sp.shards {
		held = append(held, liveKeys(&sp.shards[i])...)
	}
	slices.Sort(held)
	if !slices.Equal(held, keys) {
		t.Fatalf("the tables hold %d keys, want the %d checked", len(held), len(keys))
	}

	// Half the keys go (reset), the rest stay spent; a sweep at the next window drops them all.
	for i, k := range keys {
		if i%2 == 0 {
			_ = s.Reset(ctx0, p, k)
		}
	}
	for i, k := range keys {
		if d, _ := s.Check(ctx0, 0, p, k, 1); d.Allowed != (i%2 == 0) {
			t.Fatalf("after resets: check of %q allowed=%v, want %v", k, d.Allowed, i%2 == 0)
		}
	}
	at += 60_000
	s.Sweep()
	if s.Len() != 0 {
		t.Fatalf("after the sweep: %d keys, want 0", s.Len())
	}
	for _, k := range keys {
		if d, _ := s.Check(ctx0, 0, p, k, 1); !d.Allowed {
			t.Fatalf("after the sweep: check of %q denied", k)
		}
	}
}

// TestKeyCompare checks that a lookup compares every byte of a key, not only its hash: keys of
// one length filed under one forced hash are each found as themselves.
func TestKeyCompare(t *testing.T) {
	s := testStore(t, Config{})
	var tbl table[algo.GCRAState]
	tbl.init(s, func(algo.GCRAState, int64) bool { return false })
	const h = 0x1234_5678_9abc_def0
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 40} {
		base := []byte(fmt.Sprintf("%040d", 0))[:n]
		var keys []string
		for _, i := range []int{0, n / 2, n - 1} { // first byte, a middle one, the last
			k := append([]byte(nil), base...)
			k[i] = 'x'
			keys = append(keys, string(k))
		}
		keys = slices.Compact(keys)
		for _, k := range keys {
			sl, v := tbl.get(h, k, true)
			tbl.unlock(sl, v)
		}
		a := tbl.arr.Load()
		for _, k := range keys {
			sl, _ := a.find(h, k)
			if sl == nil || a.keyOf(sl) != k {
				t.Fatalf("%d-byte key %q: found %v", n, k, sl)
			}
		}
		if sl, _ := a.find(h, string(base)); sl != nil {
			t.Fatalf("%d-byte key %q, never inserted, found as %q", n, base, a.keyOf(sl))
		}
	}
}
