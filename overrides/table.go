package overrides

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"hash/maphash"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Config configures a Table. The zero value is a Table in memory, of any policy, with custom
// limits only (no plans without Resolve).
type Config struct {
	// Backend keeps the overrides and tells every Table on it of every change. nil keeps them in
	// this process alone (in memory, and in File if set).
	Backend Backend
	// Resolve returns the policy named policy as its plan applies it, plan "" being the policy as
	// configured; ok false when there is no such policy or plan. Every plan's policy should have
	// the policy's name, so that a key's state is shared whatever applies. Set uses it to refuse
	// overrides of unknown policies and plans; the Table resolves every override's plan with it
	// on every change and reload (call Reload after the policies change). nil accepts any policy
	// name and no plan.
	Resolve func(policy, plan string) (p *sluice.Policy, ok bool)
	// Refresh is how often the Table reloads every override from its backend (and drops, and
	// deletes from the backend, the expired ones). 0 means 30 seconds.
	Refresh time.Duration
	// File, with no Backend, is a file the overrides are kept in, rewritten atomically (a
	// temporary file renamed over it) on every change, and read by New: the overrides of an
	// embedded store survive a restart. "" keeps them in memory only.
	File string
	// Now is the clock, in epoch ms, that stamps UpdatedAt and judges expiry in Set, Get, List and
	// the refresh. nil is the system clock. (Policy takes the instant as an argument.)
	Now func() int64
	// Background, with a Backend, has New return at once with an empty copy, and subscribe and
	// load in the background, trying again every second until both succeed (Loaded): for a server
	// that must start while its store is down. Without it New fails when they fail.
	Background bool
}

// Table is a process's copy of every override, kept up to date with its backend: the one door to
// overrides. Policy answers the hot path from an immutable snapshot behind an atomic pointer (no
// lock, no allocation); a change copies the part of the snapshot it touches (one of 256 shards of
// one policy's overrides) and swaps the pointer. A Table is safe for concurrent use.
type Table struct {
	backend Backend // nil: in memory
	resolve func(policy, plan string) (*sluice.Policy, bool)
	now     func() int64
	refresh time.Duration
	seed    maphash.Seed
	origin  string // this Table's id in Change.Origin
	seq     atomic.Uint64

	snap atomic.Pointer[snapshot]

	mu        sync.Mutex      // guards changes to snap, pending and recording
	pending   map[string]bool // origins of this Table's changes in flight: true once Watch delivered it
	recording bool            // a reload is loading: keep what Watch delivers to apply over the load
	recorded  []Change

	reloadMu sync.Mutex // one reload at a time

	internMu sync.Mutex
	interned map[string]*sluice.Policy // custom limits' policies, by policy name and limits

	ctx       context.Context
	cancel    context.CancelFunc
	kick      chan struct{} // a reload is wanted now
	loaded    chan struct{} // closed once the backend's overrides were first loaded
	wg        sync.WaitGroup
	closeOnce sync.Once
	closed    atomic.Bool
}

// New returns a Table on cfg.Backend: it subscribes to its changes, loads every override, and
// starts the refresh. An error subscribing or loading is returned (the Table is not made).
func New(cfg Config) (*Table, error) {
	t := &Table{
		backend:  cfg.Backend,
		resolve:  cfg.Resolve,
		now:      cfg.Now,
		refresh:  cfg.Refresh,
		seed:     maphash.MakeSeed(),
		pending:  map[string]bool{},
		interned: map[string]*sluice.Policy{},
		kick:     make(chan struct{}, 1),
		loaded:   make(chan struct{}),
	}
	if t.now == nil {
		t.now = func() int64 { return time.Now().UnixMilli() }
	}
	if t.refresh <= 0 {
		t.refresh = 30 * time.Second
	}
	if cfg.File != "" {
		if cfg.Backend != nil {
			return nil, errors.New("overrides: set Config.File or Config.Backend, not both")
		}
		f, err := openFile(cfg.File)
		if err != nil {
			return nil, err
		}
		t.backend = f
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	t.origin = base64.RawURLEncoding.EncodeToString(id[:])
	t.snap.Store(&snapshot{})
	t.ctx, t.cancel = context.WithCancel(context.Background())
	switch {
	case t.backend == nil:
		close(t.loaded)
	case cfg.Background && cfg.Backend != nil: // a file is read at once
		t.wg.Add(1)
		go t.connect()
		return t, nil
	default:
		if err := t.start(); err != nil {
			t.cancel()
			return nil, err
		}
	}
	t.wg.Add(1)
	go t.refreshEvery()
	return t, nil
}

// start subscribes to the backend's changes and loads every override.
func (t *Table) start() error {
	if err := t.backend.Watch(t.ctx, t.onChange); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, time.Minute)
	defer cancel()
	for {
		err := t.Reload(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// Subscribed, but the load failed: the subscription stands, so only the load is tried again.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// connect is start in the background, tried every second until it succeeds; then the refresh.
func (t *Table) connect() {
	defer t.wg.Done()
	for t.start() != nil {
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	t.wg.Add(1)
	go t.refreshEvery()
}

// Loaded is closed once the Table holds what its backend held: at once without a backend, when New
// returns without Config.Background, and after the first load in the background with it.
func (t *Table) Loaded() <-chan struct{} { return t.loaded }

// Close stops the refresh and the subscription, waiting for the refresh. Later Sets and Deletes
// fail with sluice.ErrClosed; reads answer from the last copy. It is idempotent.
func (t *Table) Close() {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed.Store(true)
		t.mu.Unlock()
		t.cancel()
		t.wg.Wait()
	})
}

// Policy is the hot path: the policy that applies to key under the policy named policy at now
// (epoch ms), and its override; nil, nil when no override applies (none, expired, or its plan no
// longer resolves): then the policy as configured does. The Override must not be modified.
func (t *Table) Policy(policy, key string, now int64) (*sluice.Policy, *Override) {
	pt := t.snap.Load().table(policy)
	if pt == nil {
		return nil, nil
	}
	h := maphash.String(t.seed, key)
	if w, bit := filterBit(h, len(pt.filter)); pt.filter[w]&bit == 0 {
		return nil, nil
	}
	sh := pt.shards[h>>(64-shardBits)]
	if sh == nil {
		return nil, nil
	}
	e := sh.find(h, key)
	if e == nil || e.policy == nil {
		return nil, nil
	}
	if e.o.ExpiresAt != 0 {
		if now == 0 {
			now = t.now()
		}
		if now >= e.o.ExpiresAt {
			return nil, nil
		}
	}
	return e.policy, &e.o
}

// Resolve is Policy without the Override: the sluice.Resolver a Limiter asks (SetResolver), which
// applies every override of this Table to the checks of its keys.
func (t *Table) Resolve(policy, key string, now int64) *sluice.Policy {
	p, _ := t.Policy(policy, key, now)
	return p
}

// Get returns the live override of key under policy.
func (t *Table) Get(policy, key string) (Override, bool) {
	e := t.snap.Load().find(t.seed, policy, key)
	if e == nil || !e.o.Live(t.now()) {
		return Override{}, false
	}
	return e.o.clone(), true
}

// Set validates o and stores it through the backend, replacing any override of its policy and
// key, and stamps UpdatedAt; the Table's copy has it when Set returns, and every Table on the
// backend soon after. Bad input is a *sluice.InvalidError naming the field (errors.Is
// sluice.ErrInvalid), and stores nothing: an unknown policy ("policy") or plan ("plan"), a
// missing, too long or non-UTF-8 key ("key"), both or neither of a plan and limits ("plan"),
// an invalid limit ("limits[0].periodMs"), an ExpiresAt not after now ("expiresAt"), a reason
// over MaxReasonLen bytes ("reason"), an override over MaxJSONLen bytes of JSON.
func (t *Table) Set(ctx context.Context, o Override) error {
	if t.closed.Load() {
		return sluice.ErrClosed
	}
	now := t.now()
	o = o.clone()
	p, err := t.validate(&o, now)
	if err != nil {
		return err
	}
	o.UpdatedAt = now
	_, err = t.apply(ctx, Change{Op: OpPut, Override: o}, &entry{o: o, policy: p})
	return err
}

// Delete deletes the override of key under policy, and reports whether there was one (expired
// or not).
func (t *Table) Delete(ctx context.Context, policy, key string) (bool, error) {
	if t.closed.Load() {
		return false, sluice.ErrClosed
	}
	if err := checkRef(policy, key); err != nil {
		return false, err
	}
	return t.apply(ctx, Change{Op: OpDelete, Override: Override{Policy: policy, Key: key, UpdatedAt: t.now()}}, nil)
}

// apply applies c through the backend, then to the local copy, unless the backend's Watch
// delivered it back already (then it is applied, with every change the backend made after it).
// e is the entry of a put.
func (t *Table) apply(ctx context.Context, c Change, e *entry) (bool, error) {
	if t.backend == nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		existed := t.snap.Load().find(t.seed, c.Override.Policy, c.Override.Key) != nil
		t.applyLocked(c, e)
		return existed, nil
	}
	c.Origin = t.origin + "." + strconv.FormatUint(t.seq.Add(1), 36)
	t.mu.Lock()
	t.pending[c.Origin] = false
	t.mu.Unlock()
	existed, err := t.backend.Apply(ctx, c)
	t.mu.Lock()
	defer t.mu.Unlock()
	echoed := t.pending[c.Origin]
	delete(t.pending, c.Origin)
	if err != nil {
		return false, err
	}
	if !echoed {
		t.applyLocked(c, e)
		if t.recording {
			t.recorded = append(t.recorded, c)
		}
	}
	return existed, nil
}

// onChange is the Watch callback.
func (t *Table) onChange(c Change) {
	if c.Op == OpReload {
		t.Kick()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return
	}
	if _, ok := t.pending[c.Origin]; ok {
		t.pending[c.Origin] = true
	}
	if t.recording {
		t.recorded = append(t.recorded, c)
	}
	t.applyLocked(c, nil)
}

// applyLocked applies c to the copy, t.mu held. e, if not nil, is c's entry, resolved.
func (t *Table) applyLocked(c Change, e *entry) {
	s := t.snap.Load()
	if next := t.applyTo(s, c, e); next != s {
		t.snap.Store(next)
	}
}

// applyTo returns s with c applied.
func (t *Table) applyTo(s *snapshot, c Change, e *entry) *snapshot {
	o := &c.Override
	switch c.Op {
	case OpPut:
		if e == nil {
			e = t.entryOf(*o)
		}
		return s.put(t.seed, e)
	case OpDelete:
		return s.del(t.seed, o.Policy, o.Key)
	case OpExpire:
		if old := s.find(t.seed, o.Policy, o.Key); old != nil && !old.o.Live(o.ExpiresAt) {
			return s.del(t.seed, o.Policy, o.Key)
		}
	}
	return s
}

// entryOf is o's entry, its policy resolved (nil if it no longer resolves).
func (t *Table) entryOf(o Override) *entry {
	p, _ := t.policyOf(&o)
	return &entry{o: o, policy: p}
}

// validate checks o for Set at now, and returns its policy.
func (t *Table) validate(o *Override, now int64) (*sluice.Policy, error) {
	if err := checkShape(o); err != nil {
		return nil, err
	}
	if t.resolve != nil {
		if _, ok := t.resolve(o.Policy, ""); !ok {
			return nil, invalid("policy", "no policy is named %q", o.Policy)
		}
	}
	p, err := t.policyOf(o)
	if err != nil {
		return nil, err
	}
	if o.ExpiresAt != 0 && o.ExpiresAt <= now {
		return nil, invalid("expiresAt", "%d is not after now (%d)", o.ExpiresAt, now)
	}
	if err := checkSize(o); err != nil {
		return nil, err
	}
	return p, nil
}

// policyOf resolves o's plan, or builds its limits' policy. Overrides of one policy with the same
// limits share one *sluice.Policy: a store binds each policy pointer it is given to the policy's
// state (the memory store keeps a binding per pointer), so a pointer per override would cost it
// one binding per key.
func (t *Table) policyOf(o *Override) (*sluice.Policy, error) {
	if o.Plan == "" {
		b, err := marshal(o.Limits)
		if err != nil {
			return nil, invalid("limits", "cannot be written as JSON: %v", err)
		}
		id := o.Policy + " " + string(b)
		t.internMu.Lock()
		defer t.internMu.Unlock()
		if p := t.interned[id]; p != nil {
			return p, nil
		}
		p, err := NewPolicy(o.Policy, o.Limits)
		if err == nil {
			t.interned[id] = p
		}
		return p, err
	}
	if t.resolve == nil {
		return nil, invalid("plan", "no plans are configured")
	}
	p, ok := t.resolve(o.Policy, o.Plan)
	if !ok || p == nil {
		return nil, invalid("plan", "policy %q has no plan %q", o.Policy, o.Plan)
	}
	return p, nil
}

// Kick asks for a reload as soon as possible, without waiting for it.
func (t *Table) Kick() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Reload loads every override from the backend again, resolving every plan again (call it after
// the policies change), and replaces the copy, dropping expired overrides and then deleting them
// from the backend. Changes delivered while it loads are applied over what it loaded. Without a
// backend it resolves the copy's plans again and drops its expired overrides.
func (t *Table) Reload(ctx context.Context) error {
	t.reloadMu.Lock()
	defer t.reloadMu.Unlock()
	if t.backend == nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		var list []Override
		for _, pt := range t.snap.Load().policies {
			for _, sh := range pt.shards {
				if sh == nil {
					continue
				}
				for _, sl := range sh.slots {
					if sl.e != nil {
						list = append(list, sl.e.o)
					}
				}
			}
		}
		s, _ := t.build(list)
		t.snap.Store(s)
		return nil
	}
	t.mu.Lock()
	t.recording, t.recorded = true, nil
	t.mu.Unlock()
	list, err := t.backend.Load(ctx)
	if err != nil {
		t.mu.Lock()
		t.recording, t.recorded = false, nil
		t.mu.Unlock()
		return err
	}
	s, expired := t.build(list)
	t.mu.Lock()
	for _, c := range t.recorded {
		s = t.applyTo(s, c, nil)
	}
	t.recording, t.recorded = false, nil
	t.snap.Store(s)
	t.mu.Unlock()
	select {
	case <-t.loaded:
	default:
		close(t.loaded)
	}

	if t.closed.Load() {
		return nil
	}
	now := t.now()
	for _, o := range expired {
		c := Change{Op: OpExpire, Override: Override{Policy: o.Policy, Key: o.Key, ExpiresAt: now}}
		if _, err := t.backend.Apply(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// build is a snapshot of the live overrides of list, and the expired ones. An entry of the copy
// whose override is unchanged, and whose policy resolves to the same, is kept as it is.
func (t *Table) build(list []Override) (*snapshot, []Override) {
	now := t.now()
	cur := t.snap.Load()
	live := make([]*entry, 0, len(list))
	var expired []Override
	for _, o := range list {
		if !o.Live(now) {
			expired = append(expired, o)
			continue
		}
		if old := cur.find(t.seed, o.Policy, o.Key); old != nil && old.policy != nil && same(&old.o, &o) {
			if o.Plan == "" {
				live = append(live, old) // custom limits resolve to themselves
				continue
			}
			if p, err := t.policyOf(&o); err == nil && p == old.policy {
				live = append(live, old)
				continue
			}
		}
		live = append(live, t.entryOf(o))
	}
	return build(t.seed, live), expired
}

// same reports whether a and b are equal.
func same(a, b *Override) bool {
	return a.Policy == b.Policy && a.Key == b.Key && a.Plan == b.Plan && a.ExpiresAt == b.ExpiresAt &&
		a.Reason == b.Reason && a.UpdatedAt == b.UpdatedAt && slices.Equal(a.Limits, b.Limits)
}

// refreshEvery reloads every t.refresh, and when kicked, until Close.
func (t *Table) refreshEvery() {
	defer t.wg.Done()
	tick := time.NewTicker(t.refresh)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		case <-t.kick:
		}
		ctx, cancel := context.WithTimeout(t.ctx, t.refresh)
		_ = t.Reload(ctx) // on error the copy stands until the next try
		cancel()
	}
}

// List returns the live overrides of policy whose keys start with prefix, sorted by key, at most
// limit (0 or less: 100; at most 1000) after pageToken ("" for the first page), and the token of
// the next page, "" after the last. Tokens are opaque, and stay valid across changes.
func (t *Table) List(policy, prefix, pageToken string, limit int) (page []Override, next string) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	pt := t.snap.Load().policies[policy]
	if pt == nil {
		return nil, ""
	}
	all := pt.sorted()
	i := sort.Search(len(all), func(i int) bool { return all[i].o.Key >= prefix })
	if pageToken != "" {
		after, err := base64.RawURLEncoding.DecodeString(pageToken)
		if err == nil {
			i = max(i, sort.Search(len(all), func(i int) bool { return all[i].o.Key > string(after) }))
		}
	}
	now := t.now()
	for ; i < len(all) && strings.HasPrefix(all[i].o.Key, prefix); i++ {
		if !all[i].o.Live(now) {
			continue
		}
		if len(page) == limit {
			return page, base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Key))
		}
		page = append(page, all[i].o.clone())
	}
	return page, ""
}

// Count is how many overrides of policy the copy holds, expired ones not yet dropped included.
func (t *Table) Count(policy string) int {
	if pt := t.snap.Load().policies[policy]; pt != nil {
		return pt.n
	}
	return 0
}

// Len is how many overrides the copy holds, expired ones not yet dropped included.
func (t *Table) Len() int {
	n := 0
	for _, pt := range t.snap.Load().policies {
		n += pt.n
	}
	return n
}

// The copy: per policy, 256 shards of open-addressed hash tables, each immutable. A change
// copies one shard, the policy's array of shards and the map of policies.

const (
	shardBits = 8
	nShards   = 1 << shardBits
)

type entry struct {
	o      Override
	policy *sluice.Policy // o's, resolved; nil when it no longer resolves
}

type slot struct {
	h uint64
	e *entry
}

// shard is an immutable open-addressed table: len(slots) a power of two, at least twice n.
type shard struct {
	slots []slot
	n     int
}

// filterBit is the word and bit of h in a filter of words words, a power of two: bits of h that
// neither the shard (the top ones) nor the slot (the bottom ones) are chosen by.
func filterBit(h uint64, words int) (int, uint64) {
	f := h >> 16
	return int(f>>6) & (words - 1), 1 << (f & 63)
}

// filterWords is the size of a filter for n keys: a power of two, at least 16 bits per key.
func filterWords(n int) int {
	words := 1
	for words*64 < 16*n {
		words *= 2
	}
	return words
}

func (s *shard) find(h uint64, key string) *entry {
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.e == nil {
			return nil
		}
		if sl.h == h && sl.e.o.Key == key {
			return sl.e
		}
	}
}

// newShard is a shard of es, with their keys' hashes hs (of a key given twice, the later entry).
func newShard(hs []uint64, es []*entry) *shard {
	if len(es) == 0 {
		return nil
	}
	size := 4
	for size < 2*len(es) {
		size *= 2
	}
	s := &shard{slots: make([]slot, size), n: len(es)}
	mask := uint64(size - 1)
	for j, e := range es {
		i := hs[j] & mask
		for s.slots[i].e != nil && (s.slots[i].h != hs[j] || s.slots[i].e.o.Key != e.o.Key) {
			i = (i + 1) & mask
		}
		if s.slots[i].e != nil {
			s.n-- // a key twice: the later entry wins
		}
		s.slots[i] = slot{hs[j], e}
	}
	return s
}

// with is s with e in place of any entry of its key (drop: without it), h its key's hash.
func (s *shard) with(h uint64, key string, e *entry) *shard {
	var hs []uint64
	var es []*entry
	if s != nil {
		hs, es = make([]uint64, 0, s.n+1), make([]*entry, 0, s.n+1)
		for _, sl := range s.slots {
			if sl.e != nil && (sl.h != h || sl.e.o.Key != key) {
				hs, es = append(hs, sl.h), append(es, sl.e)
			}
		}
	}
	if e != nil {
		hs, es = append(hs, h), append(es, e)
	}
	return newShard(hs, es)
}

// ptable is one policy's overrides. filter has a bit set for the hash of every key it holds (and
// maybe of keys it held: a delete leaves its bit until the filter is made again): a key without
// an override, most keys checked, is answered by one bit, and the filter (2 to 4 bytes per
// override) stays in the CPU's cache where the slots (32 to 64 bytes per override) would not.
type ptable struct {
	filter []uint64
	shards [nShards]*shard
	n      int

	once   sync.Once
	byKeys []*entry // sorted by key, made by the first List
}

func (pt *ptable) sorted() []*entry {
	pt.once.Do(func() {
		pt.byKeys = make([]*entry, 0, pt.n)
		for _, s := range pt.shards {
			if s == nil {
				continue
			}
			for _, sl := range s.slots {
				if sl.e != nil {
					pt.byKeys = append(pt.byKeys, sl.e)
				}
			}
		}
		sort.Slice(pt.byKeys, func(i, j int) bool { return pt.byKeys[i].o.Key < pt.byKeys[j].o.Key })
	})
	return pt.byKeys
}

type snapshot struct {
	policies map[string]*ptable
	// names has nameBit set for each policy with overrides: most checks are of policies without
	// any, and the bit answers them without hashing the name for the map.
	names uint64
	// few holds the tables of policies when there are at most maxFew: comparing a few names costs
	// less than hashing one for the map.
	few []fewTable
}

const maxFew = 8

type fewTable struct {
	name string
	pt   *ptable
}

// table is the ptable of policy, or nil.
func (s *snapshot) table(policy string) *ptable {
	if s.names&nameBit(policy) == 0 {
		return nil
	}
	if len(s.policies) > maxFew {
		return s.policies[policy]
	}
	for _, f := range s.few {
		if f.name == policy {
			return f.pt
		}
	}
	return nil
}

// nameBit is a policy name's bit in snapshot.names, from its length and its end bytes.
func nameBit(name string) uint64 {
	if name == "" {
		return 1
	}
	return 1 << ((uint(len(name))*31 + uint(name[0])*7 + uint(name[len(name)-1])) & 63)
}

// indexed is s with names and few set.
func (s *snapshot) indexed() *snapshot {
	s.names, s.few = 0, nil
	for name, pt := range s.policies {
		s.names |= nameBit(name)
		if len(s.policies) <= maxFew {
			s.few = append(s.few, fewTable{name, pt})
		}
	}
	return s
}

func (s *snapshot) find(seed maphash.Seed, policy, key string) *entry {
	pt := s.table(policy)
	if pt == nil {
		return nil
	}
	h := maphash.String(seed, key)
	if sh := pt.shards[h>>(64-shardBits)]; sh != nil {
		return sh.find(h, key)
	}
	return nil
}

// put is s with e.
func (s *snapshot) put(seed maphash.Seed, e *entry) *snapshot {
	return s.change(seed, e.o.Policy, e.o.Key, e)
}

// del is s without the entry of (policy, key); s itself if it has none.
func (s *snapshot) del(seed maphash.Seed, policy, key string) *snapshot {
	if s.find(seed, policy, key) == nil {
		return s
	}
	return s.change(seed, policy, key, nil)
}

func (s *snapshot) change(seed maphash.Seed, policy, key string, e *entry) *snapshot {
	h := maphash.String(seed, key)
	i := h >> (64 - shardBits)
	pt := &ptable{}
	if old := s.policies[policy]; old != nil {
		pt.shards, pt.n, pt.filter = old.shards, old.n, old.filter
	}
	if sh := pt.shards[i]; sh != nil {
		pt.n -= sh.n
	}
	pt.shards[i] = pt.shards[i].with(h, key, e)
	if pt.shards[i] != nil {
		pt.n += pt.shards[i].n
	}
	// The filter is kept as it is when its bit is set already (a key replaced, or deleted), copied
	// with the bit set for a new key, and made again, for twice the keys, when it holds fewer than
	// 8 bits per key.
	if e != nil {
		if words := len(pt.filter); words*64 < 8*pt.n {
			pt.makeFilter(filterWords(2 * pt.n))
		} else if w, bit := filterBit(h, words); pt.filter[w]&bit == 0 {
			pt.filter = append([]uint64(nil), pt.filter...)
			pt.filter[w] |= bit
		}
	}
	next := &snapshot{policies: make(map[string]*ptable, len(s.policies)+1)}
	for name, p := range s.policies {
		next.policies[name] = p
	}
	if pt.n == 0 {
		delete(next.policies, policy)
	} else {
		next.policies[policy] = pt
	}
	return next.indexed()
}

// build is a snapshot of es (later entries of one policy and key win).
func build(seed maphash.Seed, es []*entry) *snapshot {
	type group struct {
		hs [nShards][]uint64
		es [nShards][]*entry
	}
	groups := map[string]*group{}
	for _, e := range es {
		g := groups[e.o.Policy]
		if g == nil {
			g = &group{}
			groups[e.o.Policy] = g
		}
		h := maphash.String(seed, e.o.Key)
		j := h >> (64 - shardBits)
		g.hs[j], g.es[j] = append(g.hs[j], h), append(g.es[j], e)
	}
	s := &snapshot{policies: make(map[string]*ptable, len(groups))}
	for name, g := range groups {
		pt := &ptable{}
		for j := range nShards {
			if pt.shards[j] = newShard(g.hs[j], g.es[j]); pt.shards[j] != nil {
				pt.n += pt.shards[j].n
			}
		}
		pt.makeFilter(filterWords(pt.n))
		s.policies[name] = pt
	}
	return s.indexed()
}

// makeFilter sets pt.filter, of words words, from its shards.
func (pt *ptable) makeFilter(words int) {
	pt.filter = make([]uint64, words)
	for _, sh := range pt.shards {
		if sh == nil {
			continue
		}
		for _, sl := range sh.slots {
			if sl.e != nil {
				w, bit := filterBit(sl.h, words)
				pt.filter[w] |= bit
			}
		}
	}
}
