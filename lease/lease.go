// Package lease lets a process spend a slice of a key's capacity locally: a Leaser takes a lease of
// n units from the shared store in one Limiter.Check of cost n, then answers the checks of that key
// from the lease with an atomic decrement, at memory speed, until the lease is spent or ends. What
// is left of a lease when it ends goes back to the store with Limiter.Refund, where the strategy
// allows it. It serves a sluice server in front of Redis or PostgreSQL, or an application embedding
// the library, for keys too hot to ask the store about every check. docs/leases.md has the model,
// the bounds and the measurements.
//
// # Model
//
// A Leaser holds at most one lease per (policy, key) to spend from. Check spends cost from the
// live lease of its key when the lease holds at least cost units: one hash lookup and one
// compare-and-swap, with no lock and no allocation. Otherwise the check takes a new lease with one
// Limiter.Check of the lease size, under a per-key lock, so that concurrent checks of one key in
// one process send one store call between them. Units are only ever spent after the store granted
// them: the Leaser never admits more than the store granted, whatever the number of processes.
//
// With Config.Ahead set, a Leaser also holds one lease taken ahead: when a check leaves a lease
// below that share of its units, or below what the key spends in two store calls of the recent
// latency, the background goroutine takes the next lease, and the check that runs the current one
// out moves to it without a store call, so that a hot key's checks need not wait for the store.
//
// A check that finds fewer units than its cost spends them first and asks the store only for the
// rest, plus the next lease, so a lease's last units are never refunded just to be taken again.
// When the store denies the whole lease, the Leaser asks again for what the denial says is left
// (Decision.Remaining, when it covers the check), then for what the check needs alone; if that is
// denied too, the store's denial is the answer and the units carried stay where they were. At most
// three store calls per check, and one per check while the key is being denied.
//
// # Sizing
//
// A lease is sized from the key's local rate: an exponentially weighted average of the units this
// process admitted for the key per second, updated each time it takes a lease (each sample weighs
// 1 − e^(−elapsed/Target), and at least ½, so a key that speeds up or goes quiet is followed within
// a lease or two). The size is rate × Target, or rate × the lease's life when that is shorter,
// rounded up and clamped to [MinLease, MaxLease], never above the policy's MaxCost and never below
// the check's cost. A key seen for the first time, a cold key (rate × Target of at most MinLease,
// with MinLease 1) and a key the store denied within its retry time take leases of exactly cost:
// one store call per check, the decision the store gives.
//
// # Lease life, returns and bounds per strategy
//
//   - tokenBucket and gcra: a lease lives LeaseTTL. Its unspent units go back with Refund when it
//     ends: found expired by the background goroutine or by the next check of its key, or at Close.
//     Nothing is lost for good (unless the process dies holding the lease); while a lease is held,
//     its units are out of the other processes' reach.
//   - fixedWindow: a lease lives until the end of the window it was taken in (the store's ResetAt)
//     and is not refunded: a refund reaching the store after the window turned would be taken from
//     the next window, and admit past its limit. What is unspent at the window's end is lost.
//     Leases are sized to what the key spends in the rest of the window at its rate, to keep that
//     small.
//   - slidingWindow and slidingWindowLog: a lease lives one windowMs and is not refunded: their
//     refunds take back the newest units, not the lease's, which would let the count fall early.
//   - A composite policy lives the shortest life of its limits, and is refunded only if every limit
//     is a token bucket or GCRA. A policy with a request-counting limit (sluice.UnitRequest) is never
//     leased, since one lease check would count one request for many: its checks pass through to the
//     Limiter, one store call each.
//
// A process holds, per key, at most one lease of at most MaxLease units (with Ahead, two: the one
// it spends from, down to its Ahead share when the next was taken, and the next). That bounds the
// under-admission: for a token bucket or GCRA those units are held back until spent or returned;
// for a window strategy, at most that much is lost per process per key per window.
//
// Every unit admitted was granted by the store, so per fixed window no more than the limit is ever
// admitted. Over any other interval, admissions can run ahead of the strategy's own bound by the
// units that were sitting in leases when the interval began (granted before it, spent in it): at
// most the bound above, per process per key. For a token bucket that is the bound capacity + rate ×
// D over D, plus those units.
//
// # Decisions
//
// A check answered from a lease is Allowed, with the Limit and ResetAt of the store's decision for
// the lease (ResetAt is when the key would be full again had nothing been taken since), RetryAfterMs
// 0, DeniedBy −1 and no Parts. Its Remaining is what the store had left when this process last took
// a lease of the key (that store decision's Remaining), plus the units its leases of the key still
// hold after the check (with Ahead, both leases'): never the lease's count alone, which would have a
// client that obeys it back off with the key far from spent. It is kept with the lease when the
// lease is taken, so a local check still reads it with no lock and no allocation. Against what the
// process can still admit, the store's remaining now plus its own unspent units, it overstates by
// at most what other processes took from the store since this process's last lease (the leases
// they took included), and understates by at most what the store refilled, or got back in refunds,
// since. The check that takes a lease, or moves to the one taken ahead, answers the same way. A
// check sent to the store for its cost alone (a cold key) and a denial get the store's decision
// unchanged (a denial's RetryAfterMs is for the units the check needed beyond its leases).
//
// # Clocks
//
// A lease's deadline is judged at the instant of the check: sluice.WithNow's instant if the context
// carries one, else Config.Now, else the process clock: a millisecond reading refreshed by a ticker
// while checks flow (reading the OS clock costs more than a local check), the one the memory store
// reads. A stale reading can only make a lease end late. A fixed window's lease ends at the store's window end read on this clock,
// so run both clocks in sync (NTP): a process whose clock lags the store's by d may spend a fixed
// window's lease up to d into the next window. The background goroutine judges deadlines on
// Config.Now or the process clock, never on a context's instant: set Config.Now when checks carry
// WithNow instants far from the process clock (replays, tests), or it will find their leases
// expired.
//
// # Background work
//
// One goroutine per Leaser, never one per key (and the process clock's ticker, while checks read
// it). It takes the leases asked for ahead; every LeaseTTL/4 (at least 1 ms, at most a second) it
// returns the unspent units of leases past their deadline and forgets keys that hold no units and
// took no lease for 4 × Target (their rate would size a first lease anyway). Close stops both, then
// returns every unspent unit.
//
// A Leaser answers from leases under the policy they were taken under: a policy replaced with
// Limiter.SetPolicies applies to new leases, and a removed policy's leases are spent out until
// they end; their units are refunded only while the policy is still Equal to the one leased.
package lease

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/msclock"
	"github.com/sluicehq/sluice/internal/namecache"
)

// Defaults of Config.
const (
	DefaultMinLease = 1
	DefaultMaxLease = 100_000
	DefaultLeaseTTL = time.Second
	DefaultTarget   = 100 * time.Millisecond
)

// minAhead is the smallest lease whose successor is taken ahead: smaller ones belong to keys too
// cold for a store call to matter.
const minAhead = 8

// Config configures a Leaser. The zero value is ready to use.
type Config struct {
	// MinLease is the smallest lease a key with a known rate takes, in units. 0 means
	// DefaultMinLease, 1: a cold key then takes leases of its checks' cost, one store call per
	// check. A larger MinLease saves store calls on lukewarm keys at the price of larger leases.
	// A key with no rate yet, or denied within its retry time, takes leases of exactly cost.
	MinLease int64
	// MaxLease is the largest lease, in units. 0 means DefaultMaxLease, 100 000: at the default
	// Target, a key reaches it only when one process spends a million units a second on it. A
	// lease is never above the policy's MaxCost either. Keep it a small share of the limit when
	// many processes share a key: it bounds what one process holds back from the others.
	MaxLease int64
	// LeaseTTL is how long a lease of a token bucket or GCRA may be spent; its unspent units are
	// then returned with Refund. 0 means DefaultLeaseTTL, one second. Window strategies end their
	// leases with the window instead (see the package documentation).
	LeaseTTL time.Duration
	// Target is how long a lease should last at the key's local rate: a lease is rate × Target
	// units. 0 means DefaultTarget, 100 ms. Longer targets mean fewer store calls and more units held
	// back in leases.
	Target time.Duration
	// Ahead, from 0 to 1, is the share of a lease (of 8 units or more) left when the background
	// goroutine takes the next one, so that the key's checks need not wait for the store; more if
	// the key spends more than that in two store calls of the recent latency. 0, the default, turns
	// it off: the check that runs a lease out takes the next one. 0.25 suits a process with a core
	// to spare for the goroutine; a process then holds up to two leases per key.
	Ahead float64
	// Now returns the current instant, for tests. Nil means the process clock, read at millisecond
	// precision (see Clocks in the package documentation). A context carrying sluice.WithNow
	// overrides both for its check. When Now is set, the background goroutine takes and returns
	// leases at its instant; otherwise at the store's clock.
	Now func() time.Time
}

// Stats counts what a Leaser did with the store since New.
type Stats struct {
	// StoreChecks is how many checks the Leaser sent to the store: leases taken, smaller sizes asked
	// after a denial, and checks passed through for their cost alone.
	StoreChecks uint64 `json:"storeChecks"`
	// Leases is how many of those checks the store granted.
	Leases uint64 `json:"leases"`
	// Ahead is how many of those leases the background goroutine took ahead.
	Ahead uint64 `json:"ahead"`
	// Returned is how many unspent units went back to the store with Refund.
	Returned uint64 `json:"returned"`
	// Dropped is how many unspent units were not returned: leases of window strategies, leases of a
	// policy changed or removed since, and refunds that failed.
	Dropped uint64 `json:"dropped"`
	// ReturnErrors is how many refunds failed.
	ReturnErrors uint64 `json:"returnErrors"`
}

// Leaser answers checks from leases of capacity taken from a Limiter's store. It is safe for
// concurrent use. Create one with New and Close it to return what its leases hold.
type Leaser struct {
	lim      *sluice.Limiter
	minLease int64
	maxLease int64
	ttl      int64   // ms
	target   float64 // ms
	ahead    float64 // 0: off
	every    time.Duration
	idle     int64 // ms without a lease after which a key with no units is forgotten
	userNow  func() time.Time

	tables atomic.Pointer[map[string]*table] // by policy name, replaced whole under mu
	mu     sync.Mutex
	// recent finds a table without hashing the policy's name when the caller passes the policy's
	// own name string.
	recent namecache.Cache[*table]

	clock *msclock.Clock // the process clock, when Config.Now is nil
	// renewals are the leases whose successor a check asked for, for the goroutine to take.
	renewals chan renewal

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}

	storeChecks, leases, aheads, returned, dropped, returnErrors atomic.Uint64
	latency                                                      atomic.Int64 // of a store check, ns, EWMA
}

// table holds the leases of one policy name.
type table struct {
	name string
	keys keys
	info atomic.Pointer[info]
}

// info is what a Leaser needs to know about one definition of a policy.
type info struct {
	policy     *sluice.Policy
	leasable   bool // no limit counts requests
	refundable bool // every limit is a token bucket or GCRA
}

// slot is one key's place in a table: its leases, and what sizes the next one. The fields below mu
// are guarded by it.
type slot struct {
	key string
	t   *table
	cur atomic.Pointer[lease] // the lease checks spend from

	mu   sync.Mutex
	next *lease // taken ahead and not yet spent from; never published to the hot path
	dead bool   // removed from its table: look the key up again
	seen bool   // a lease was taken, so last and pending mean something
	// last is the instant the latest lease was taken (written under mu, read by the sweep).
	last atomic.Int64
	// pending is what the process admitted for the key since last that cur.start does not count:
	// the cost of the check that took cur, or, after a lease was taken ahead, minus what cur had
	// spent by then, which the rate has counted already.
	pending     int64
	rate        float64 // units per second, EWMA
	deniedUntil int64   // until then, leases are of cost alone
}

// lease is one grant of the store. units is what is left to spend; the other fields are set before
// it is published and never change, except ended and left, guarded by the slot's mu (and start and
// units, until it is published), and beside.
type lease struct {
	deadline int64 // the first instant it may not be spent at
	limit    int64
	resetAt  int64
	low      int64 // a check that leaves fewer units asks for the next lease ahead; 0: never
	start    int64 // units when it was published
	info     *info
	ended    bool   // its units were taken away: spent by a check, returned or dropped
	left     int64  // units it held when it ended
	plan     string // the Plan and Override of the decision that granted it, which its own repeat
	override bool
	// beside is what a decision answered from this lease adds to its units: what the store had
	// left when this process last took a lease of the key, plus the units of the lease taken ahead.
	// Set when the lease is taken, and again when the next one is taken ahead; read by every check,
	// written rarely, so it shares the read-mostly line.
	beside atomic.Int64
	// units has cache lines of its own: cores spending from one lease take turns writing it, and
	// the fields above, which every check reads, stay shared meanwhile.
	_       [128]byte
	units   atomic.Int64
	renewed atomic.Bool // the next lease was asked for
	_       [112]byte
}

// renewal asks the goroutine to take the lease after ls, the lease of s.
type renewal struct {
	s    *slot
	ls   *lease
	done chan struct{} // for tests: closed when every earlier renewal was handled
}

// decision answers a check that left units in ls.
func (ls *lease) decision(units int64) sluice.Decision {
	return sluice.Decision{Allowed: true, Limit: ls.limit, Remaining: ls.beside.Load() + units, ResetAt: ls.resetAt, DeniedBy: -1, Override: ls.override, Plan: ls.plan}
}

// New returns a Leaser over lim and starts its background goroutine.
func New(lim *sluice.Limiter, cfg Config) *Leaser {
	l := &Leaser{
		lim:      lim,
		minLease: orDefault(cfg.MinLease, DefaultMinLease),
		maxLease: orDefault(cfg.MaxLease, DefaultMaxLease),
		ttl:      max(orDefault(cfg.LeaseTTL, DefaultLeaseTTL).Milliseconds(), 1),
		target:   float64(max(orDefault(cfg.Target, DefaultTarget).Milliseconds(), 1)),
		ahead:    min(max(cfg.Ahead, 0), 1),
		userNow:  cfg.Now,
		renewals: make(chan renewal, 1024),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	l.maxLease = max(l.maxLease, l.minLease)
	l.every = min(max(time.Duration(l.ttl)*time.Millisecond/4, time.Millisecond), time.Second)
	l.idle = int64(4 * l.target)
	l.tables.Store(&map[string]*table{})
	if cfg.Now == nil {
		l.clock = msclock.New()
	}
	go l.run()
	return l
}

func orDefault[T int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Check consumes cost for key under the named policy: from the key's lease when it holds enough,
// otherwise from a new lease the store grants. Bad input gets the Limiter's errors and takes no
// lease; a store error fails the check, and nothing is admitted without a lease. After Close it
// returns sluice.ErrClosed.
func (l *Leaser) Check(ctx context.Context, policy, key string, cost int64) (d sluice.Decision, err error) {
	if t := l.table(policy); t != nil && cost >= 1 {
		if s := t.keys.load(key); s != nil {
			if ls := s.cur.Load(); ls != nil && l.instant(ctx) < ls.deadline {
				for r := ls.units.Load(); r >= cost; r = ls.units.Load() {
					if ls.units.CompareAndSwap(r, r-cost) {
						if r-cost < ls.low {
							l.askAhead(s, ls)
						}
						// Field by field: the compiler then fills the result in place.
						d.Allowed, d.Limit, d.Remaining, d.ResetAt, d.DeniedBy = true, ls.limit, ls.beside.Load()+r-cost, ls.resetAt, -1
						d.Override, d.Plan = ls.override, ls.plan
						return d, nil
					}
				}
			}
		}
	}
	return l.slow(ctx, policy, key, cost)
}

// table returns the table of the policy named policy, or nil.
func (l *Leaser) table(policy string) *table {
	if t, ok := l.recent.Get(policy); ok {
		return t
	}
	return (*l.tables.Load())[policy]
}

// instant is the instant a check is judged at, in epoch ms.
func (l *Leaser) instant(ctx context.Context) int64 {
	if n := sluice.NowFrom(ctx); n > 0 {
		return n
	}
	return l.now()
}

// now is the Leaser's own instant: Config.Now's, or the process clock's.
func (l *Leaser) now() int64 {
	if l.userNow != nil {
		return l.userNow().UnixMilli()
	}
	return l.clock.Now()
}

// askAhead has the goroutine take the lease after ls, once.
func (l *Leaser) askAhead(s *slot, ls *lease) {
	if ls.renewed.Load() || !ls.renewed.CompareAndSwap(false, true) {
		return
	}
	select {
	case l.renewals <- renewal{s: s, ls: ls}:
	default: // the goroutine is behind: the check that runs ls out takes the next lease
	}
}

// resolve returns the table of policy and what the Limiter's current definition of it means for
// leases; a nil info if the Limiter holds no such policy.
func (l *Leaser) resolve(policy string) (*table, *info) {
	p, ok := l.lim.Policy(policy)
	if !ok {
		return nil, nil
	}
	t := (*l.tables.Load())[policy]
	if t == nil {
		l.mu.Lock()
		old := *l.tables.Load()
		if t = old[policy]; t == nil {
			t = &table{name: strings.Clone(policy)}
			next := make(map[string]*table, len(old)+1)
			for k, v := range old {
				next[k] = v
			}
			next[t.name] = t
			l.tables.Store(&next)
		}
		l.mu.Unlock()
	}
	if name := p.Name(); unsafe.StringData(name) == unsafe.StringData(policy) {
		if cached, ok := l.recent.Get(name); !ok || cached != t {
			l.recent.Put(name, t)
		}
	}
	in := t.info.Load()
	if in == nil || in.policy != p {
		in = &info{policy: p, leasable: true, refundable: true}
		for _, lim := range p.Limits() {
			if lim.Unit == sluice.UnitRequest {
				in.leasable = false
			}
			switch lim.Strategy.(type) {
			case sluice.GCRA, sluice.TokenBucket:
			default:
				in.refundable = false
			}
		}
		t.info.Store(in)
	}
	return t, in
}

// Stats returns what the Leaser did with the store so far.
func (l *Leaser) Stats() Stats {
	return Stats{
		StoreChecks:  l.storeChecks.Load(),
		Leases:       l.leases.Load(),
		Ahead:        l.aheads.Load(),
		Returned:     l.returned.Load(),
		Dropped:      l.dropped.Load(),
		ReturnErrors: l.returnErrors.Load(),
	}
}

// Close stops the background goroutine and ends every lease: unspent units of token buckets and
// GCRA go back to the store with Refund (at ctx's instant, if it carries sluice.WithNow); those of
// window strategies are dropped. Later checks return sluice.ErrClosed. It returns the refunds'
// errors, joined. It is idempotent: later calls return nil.
func (l *Leaser) Close(ctx context.Context) error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		<-l.done
		if l.clock != nil {
			l.clock.Close()
		}
		err = l.sweep(ctx, 0, true)
	})
	return err
}
