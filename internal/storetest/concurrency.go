package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
)

// OpenConcurrency returns n clients of one fresh, empty store: for a shared store n clients of
// their own (connections, pools), as n processes would have; an embedded store may return one store
// n times. The clients are closed when the test ends.
type OpenConcurrency func(t *testing.T, n int) []concurrency.Store

// Concurrency is the contract of concurrency.Store, which every store implementing it must pass:
// admission up to the limit and not past it, renewal, release, heartbeat, expiry at the lease's
// instant, bad input, the store's clock, and exactness under goroutines racing on several clients.
// Instants are explicit (no sleeps) but where the store's clock is the point.
func Concurrency(t *testing.T, open OpenConcurrency) {
	t.Helper()
	t.Run("admitsLimit", func(t *testing.T) { concurrencyAdmitsLimit(t, open(t, 1)[0]) })
	t.Run("renew", func(t *testing.T) { concurrencyRenew(t, open(t, 1)[0]) })
	t.Run("release", func(t *testing.T) { concurrencyRelease(t, open(t, 1)[0]) })
	t.Run("heartbeat", func(t *testing.T) { concurrencyHeartbeat(t, open(t, 1)[0]) })
	t.Run("expiry", func(t *testing.T) { concurrencyExpiry(t, open(t, 1)[0]) })
	t.Run("keysApart", func(t *testing.T) { concurrencyKeysApart(t, open(t, 1)[0]) })
	t.Run("badInput", func(t *testing.T) { concurrencyBadInput(t, open(t, 1)[0]) })
	t.Run("storeClock", func(t *testing.T) { concurrencyStoreClock(t, open(t, 1)[0]) })
	t.Run("exactAtOneInstant", func(t *testing.T) { concurrencyExactAtOneInstant(t, open(t, 4)) })
	t.Run("exactUnderChurn", func(t *testing.T) { concurrencyExactUnderChurn(t, open(t, 4)) })
}

// admission is what an Admit answered, for messages.
type admission struct {
	a   concurrency.Admission
	err error
}

func (a admission) String() string { return fmt.Sprintf("%+v, %v", a.a, a.err) }

func mustAdmit(t *testing.T, c concurrency.Store, now int64, name, key, holder string, limit, ttl int64, want concurrency.Admission) {
	t.Helper()
	a, err := c.Admit(context.Background(), now, name, key, holder, limit, ttl)
	if err != nil || a != want {
		t.Fatalf("Admit(%s, %s, %s, limit %d, ttl %d) at %+d: %v, want %+v", name, key, holder, limit, ttl, now-t0, admission{a, err}, want)
	}
}

func allowed(inFlight, limit int64) concurrency.Admission {
	return concurrency.Admission{Allowed: true, InFlight: inFlight, Limit: limit}
}

func denied(inFlight, limit, retry int64) concurrency.Admission {
	return concurrency.Admission{InFlight: inFlight, Limit: limit, RetryAfterMs: retry}
}

func mustHeartbeat(t *testing.T, c concurrency.Store, now int64, name, key, holder string, ttl int64, want error) {
	t.Helper()
	err := c.Heartbeat(context.Background(), now, name, key, holder, ttl)
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("Heartbeat(%s, %s, %s, ttl %d) at %+d: %v, want %v", name, key, holder, ttl, now-t0, err, want)
	}
}

func mustRelease(t *testing.T, c concurrency.Store, name, key, holder string) {
	t.Helper()
	if err := c.Release(context.Background(), name, key, holder); err != nil {
		t.Fatalf("Release(%s, %s, %s): %v", name, key, holder, err)
	}
}

// concurrencyAdmitsLimit: limit 3 admits three holders, and the fourth is denied until the earliest
// lease expires.
func concurrencyAdmitsLimit(t *testing.T, c concurrency.Store) {
	mustAdmit(t, c, t0, "jobs", "k", "h0", 3, 1000, allowed(1, 3))
	mustAdmit(t, c, t0+10, "jobs", "k", "h1", 3, 1000, allowed(2, 3))
	mustAdmit(t, c, t0+20, "jobs", "k", "h2", 3, 1000, allowed(3, 3))
	mustAdmit(t, c, t0+30, "jobs", "k", "h3", 3, 1000, denied(3, 3, 970))
	mustAdmit(t, c, t0+999, "jobs", "k", "h3", 3, 1000, denied(3, 3, 1))
	// h0's lease ends at t0+1000: from that instant on its slot is free, and h3 takes it.
	mustAdmit(t, c, t0+1000, "jobs", "k", "h3", 3, 1000, allowed(3, 3))
	mustAdmit(t, c, t0+1000, "jobs", "k", "h4", 3, 1000, denied(3, 3, 10))
	// A lower limit denies new holders while too many are in flight, and keeps those admitted.
	mustAdmit(t, c, t0+1001, "jobs", "k", "h5", 2, 1000, denied(3, 2, 9))
	mustAdmit(t, c, t0+1001, "jobs", "k", "h1", 2, 1000, allowed(3, 2))
	// A higher one admits at once.
	mustAdmit(t, c, t0+1002, "jobs", "k", "h5", 4, 1000, allowed(4, 4))
}

// concurrencyRenew: Admit of a holder that holds a slot renews its lease and takes no second slot.
func concurrencyRenew(t *testing.T, c concurrency.Store) {
	mustAdmit(t, c, t0, "jobs", "k", "h0", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+100, "jobs", "k", "h0", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+200, "jobs", "k", "h0", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+300, "jobs", "k", "h1", 2, 1000, allowed(2, 2))
	mustAdmit(t, c, t0+300, "jobs", "k", "h1", 2, 1000, allowed(2, 2))
	mustAdmit(t, c, t0+400, "jobs", "k", "h2", 2, 1000, denied(2, 2, 800)) // h0's lease, renewed at +200
	// Renewing the earliest lease makes the next one the earliest.
	mustAdmit(t, c, t0+500, "jobs", "k", "h0", 2, 1000, allowed(2, 2))
	mustAdmit(t, c, t0+600, "jobs", "k", "h2", 2, 1000, denied(2, 2, 700)) // h1's, at +1300
	// A renewal may shorten a lease too.
	mustAdmit(t, c, t0+700, "jobs", "k", "h0", 2, 50, allowed(2, 2))
	mustAdmit(t, c, t0+710, "jobs", "k", "h2", 2, 1000, denied(2, 2, 40))
	mustAdmit(t, c, t0+750, "jobs", "k", "h2", 2, 1000, allowed(2, 2))
	// An expired holder's Admit is a new admission: it must wait for a free slot like any other.
	mustAdmit(t, c, t0+1750, "jobs", "k", "h2", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+1760, "jobs", "k", "h0", 1, 1000, denied(1, 1, 990))
}

// concurrencyRelease: Release frees a slot at once; releasing a slot not held is a no-op.
func concurrencyRelease(t *testing.T, c concurrency.Store) {
	mustRelease(t, c, "jobs", "never", "h0") // a key never seen
	mustAdmit(t, c, t0, "jobs", "k", "h0", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+10, "jobs", "k", "h1", 2, 1000, allowed(2, 2))
	mustAdmit(t, c, t0+20, "jobs", "k", "h2", 2, 1000, denied(2, 2, 980))
	mustRelease(t, c, "jobs", "k", "h0")
	mustRelease(t, c, "jobs", "k", "h0")     // twice
	mustRelease(t, c, "jobs", "k", "nobody") // never admitted
	mustAdmit(t, c, t0+30, "jobs", "k", "h2", 2, 1000, allowed(2, 2))
	mustAdmit(t, c, t0+40, "jobs", "k", "h0", 2, 1000, denied(2, 2, 970)) // h1's lease
	mustHeartbeat(t, c, t0+50, "jobs", "k", "h0", 1000, concurrency.ErrNotHeld)
	// Releasing every holder leaves the key as if never seen.
	mustRelease(t, c, "jobs", "k", "h1")
	mustRelease(t, c, "jobs", "k", "h2")
	mustAdmit(t, c, t0+60, "jobs", "k", "h9", 1, 1000, allowed(1, 1))
	mustRelease(t, c, "jobs", "k", "h9")
	mustAdmit(t, c, t0+70, "jobs", "k", "h8", 1, 1000, allowed(1, 1))
}

// concurrencyHeartbeat: Heartbeat extends a held lease.
func concurrencyHeartbeat(t *testing.T, c concurrency.Store) {
	mustAdmit(t, c, t0, "jobs", "k", "h0", 1, 1000, allowed(1, 1))
	mustHeartbeat(t, c, t0+900, "jobs", "k", "h0", 1000, nil)
	mustAdmit(t, c, t0+1500, "jobs", "k", "h1", 1, 1000, denied(1, 1, 400))
	mustHeartbeat(t, c, t0+1800, "jobs", "k", "h0", 5000, nil)
	mustAdmit(t, c, t0+1900, "jobs", "k", "h1", 1, 1000, denied(1, 1, 4900))
	mustHeartbeat(t, c, t0+6799, "jobs", "k", "h0", 1, nil) // the lease now ends at +6800
	mustAdmit(t, c, t0+6800, "jobs", "k", "h1", 1, 1000, allowed(1, 1))
	mustHeartbeat(t, c, t0+6800, "jobs", "k", "h0", 1000, concurrency.ErrNotHeld)
	mustHeartbeat(t, c, t0+6800, "jobs", "k", "nobody", 1000, concurrency.ErrNotHeld)
	mustHeartbeat(t, c, t0+6800, "jobs", "never", "h0", 1000, concurrency.ErrNotHeld)
	mustRelease(t, c, "jobs", "k", "h1")
	mustHeartbeat(t, c, t0+6810, "jobs", "k", "h1", 1000, concurrency.ErrNotHeld)
}

// concurrencyExpiry: a holder that stops heartbeating (a crash) loses its slot when its lease ends,
// and learns it from Heartbeat; until then nobody takes it.
func concurrencyExpiry(t *testing.T, c concurrency.Store) {
	mustAdmit(t, c, t0, "jobs", "k", "dead", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+100, "jobs", "k", "live", 2, 5000, allowed(2, 2))
	mustAdmit(t, c, t0+999, "jobs", "k", "new", 2, 1000, denied(2, 2, 1))
	// Nobody has admitted since the lease ended: Heartbeat still says it is gone.
	mustHeartbeat(t, c, t0+1000, "jobs", "k", "dead", 1000, concurrency.ErrNotHeld)
	mustHeartbeat(t, c, t0+1001, "jobs", "k", "dead", 1000, concurrency.ErrNotHeld)
	mustAdmit(t, c, t0+1002, "jobs", "k", "new", 2, 1000, allowed(2, 2))
	// The holder that came back must be admitted again, like any other.
	mustAdmit(t, c, t0+1003, "jobs", "k", "dead", 2, 1000, denied(2, 2, 999))
	// Every lease over: the key is empty.
	mustHeartbeat(t, c, t0+5100, "jobs", "k", "live", 1000, concurrency.ErrNotHeld)
	mustAdmit(t, c, t0+5100, "jobs", "k", "dead", 1, 1000, allowed(1, 1))
	// A lease of 1 ms lasts exactly one instant.
	mustAdmit(t, c, t0+7000, "jobs", "short", "a", 1, 1, allowed(1, 1))
	mustAdmit(t, c, t0+7000, "jobs", "short", "b", 1, 1, denied(1, 1, 1))
	mustAdmit(t, c, t0+7001, "jobs", "short", "b", 1, 1, allowed(1, 1))
}

// concurrencyKeysApart: each (name, key) has slots of its own, however the strings are cut.
func concurrencyKeysApart(t *testing.T, c concurrency.Store) {
	pairs := [][2]string{{"jobs", "k"}, {"jobs", "k2"}, {"other", "k"}, {"a:b", "c"}, {"a", "b:c"}, {"a}", "{b"}, {"a", "}{b"},
		{"jobs", "a\x00b"}, {"jobs", "a\x00c"}, {"jobs", "\xff"}, {"jobs", "\x01"}, {"jobs", "\x01ff"}, {"\xfe", "k"}}
	for i, p := range pairs {
		mustAdmit(t, c, t0+int64(i), p[0], p[1], "h0", 1, 1000, allowed(1, 1))
	}
	for i, p := range pairs {
		mustAdmit(t, c, t0+100, p[0], p[1], "h1", 1, 1000, denied(1, 1, 900+int64(i)))
	}
	// Holders of any bytes, too.
	mustAdmit(t, c, t0, "jobs", "holders", "h\x00", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0, "jobs", "holders", "h\xff", 2, 1000, allowed(2, 2))
	mustHeartbeat(t, c, t0+1, "jobs", "holders", "h\x00", 1000, nil)
	mustRelease(t, c, "jobs", "holders", "h\x00")
	mustAdmit(t, c, t0+2, "jobs", "holders", "h\x01", 2, 1000, allowed(2, 2))
	// The longest name, key and holder, all at once, of letters that do not compress.
	r := rand.New(rand.NewPCG(7, 7))
	var long [3]string
	for i := range long {
		b := make([]byte, sluice.MaxKeyLen)
		for j := range b {
			b[j] = byte('!' + r.IntN(94))
		}
		long[i] = string(b)
	}
	mustAdmit(t, c, t0, long[0], long[1], long[2], 1, 1000, allowed(1, 1))
	mustAdmit(t, c, t0, long[0], long[1], long[0], 1, 1000, denied(1, 1, 1000))
	mustHeartbeat(t, c, t0+1, long[0], long[1], long[2], 1000, nil)
	mustRelease(t, c, long[0], long[1], long[2])
	mustAdmit(t, c, t0+2, long[0], long[1], long[0], 1, 1000, allowed(1, 1))
}

// concurrencyBadInput: bad input, through the front door (concurrency.Limiter), is an
// *InvalidError naming the field, and changes nothing in the store.
func concurrencyBadInput(t *testing.T, c concurrency.Store) {
	ctx := sluice.WithNow(context.Background(), t0+20)
	lim := concurrency.New(c)
	mustAdmit(t, c, t0, "jobs", "k", "h0", 2, 1000, allowed(1, 2))
	mustAdmit(t, c, t0+10, "jobs", "k", "h1", 2, 1000, allowed(2, 2))
	long := strings.Repeat("x", sluice.MaxKeyLen+1)
	admit := func(name, key, holder string, limit, ttl int64) func() error {
		return func() error { _, err := lim.Admit(ctx, name, key, holder, limit, ttl); return err }
	}
	heartbeat := func(name, key, holder string, ttl int64) func() error {
		return func() error { return lim.Heartbeat(ctx, name, key, holder, ttl) }
	}
	release := func(name, key, holder string) func() error {
		return func() error { return lim.Release(ctx, name, key, holder) }
	}
	tests := []struct {
		what  string
		call  func() error
		field string
	}{
		{"Admit empty name", admit("", "k", "h2", 3, 1000), "name"},
		{"Admit long name", admit(long, "k", "h2", 3, 1000), "name"},
		{"Admit empty key", admit("jobs", "", "h2", 3, 1000), "key"},
		{"Admit long key", admit("jobs", long, "h2", 3, 1000), "key"},
		{"Admit empty holder", admit("jobs", "k", "", 3, 1000), "holder"},
		{"Admit long holder", admit("jobs", "k", long, 3, 1000), "holder"},
		{"Admit limit 0", admit("jobs", "k", "h2", 0, 1000), "limit"},
		{"Admit limit -1", admit("jobs", "k", "h2", -1, 1000), "limit"},
		{"Admit ttl 0", admit("jobs", "k", "h0", 3, 0), "ttlMs"},
		{"Admit ttl -5", admit("jobs", "k", "h2", 3, -5), "ttlMs"},
		{"Admit ttl too long", admit("jobs", "k", "h2", 3, concurrency.MaxTTLMs+1), "ttlMs"},
		{"Heartbeat empty name", heartbeat("", "k", "h0", 1000), "name"},
		{"Heartbeat long key", heartbeat("jobs", long, "h0", 1000), "key"},
		{"Heartbeat empty holder", heartbeat("jobs", "k", "", 1000), "holder"},
		{"Heartbeat ttl 0", heartbeat("jobs", "k", "h0", 0), "ttlMs"},
		{"Heartbeat ttl too long", heartbeat("jobs", "k", "h0", concurrency.MaxTTLMs+1), "ttlMs"},
		{"Release empty name", release("", "k", "h0"), "name"},
		{"Release empty key", release("jobs", "", "h0"), "key"},
		{"Release long holder", release("jobs", "k", long), "holder"},
		{"Release empty holder", release("jobs", "k", ""), "holder"},
	}
	for _, tc := range tests {
		err := tc.call()
		var ie *sluice.InvalidError
		if !errors.Is(err, sluice.ErrInvalid) || !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: %v, want an *InvalidError for %q", tc.what, err, tc.field)
		}
	}
	// Nothing changed: both holders hold their slots with their leases as they were.
	mustAdmit(t, c, t0+30, "jobs", "k", "h2", 2, 1000, denied(2, 2, 970))
	mustAdmit(t, c, t0+1000, "jobs", "k", "h2", 2, 1000, allowed(2, 2))
	mustHeartbeat(t, c, t0+1000, "jobs", "k", "h1", 1000, nil)
}

// concurrencyStoreClock: now 0 decides at the store's clock.
func concurrencyStoreClock(t *testing.T, c concurrency.Store) {
	ctx := context.Background()
	const ttl = 60_000
	a, err := c.Admit(ctx, 0, "jobs", "clock", "h0", 1, ttl)
	if err != nil || a != allowed(1, 1) {
		t.Fatalf("Admit at the store's clock: %v", admission{a, err})
	}
	a, err = c.Admit(ctx, 0, "jobs", "clock", "h1", 1, ttl)
	if err != nil || a.Allowed || a.InFlight != 1 || a.Limit != 1 || a.RetryAfterMs < 1 || a.RetryAfterMs > ttl {
		t.Fatalf("second Admit at the store's clock: %v, want denied with a retry of 1 to %d ms", admission{a, err}, ttl)
	}
	if err := c.Heartbeat(ctx, 0, "jobs", "clock", "h0", ttl); err != nil {
		t.Fatalf("Heartbeat at the store's clock: %v", err)
	}
	// An explicit instant long before the store's clock still sees the lease.
	a, err = c.Admit(ctx, t0, "jobs", "clock", "h1", 1, ttl)
	if err != nil || a.Allowed {
		t.Fatalf("Admit at an earlier explicit instant: %v, want denied", admission{a, err})
	}
	mustRelease(t, c, "jobs", "clock", "h0")
	if a, err := c.Admit(ctx, 0, "jobs", "clock", "h1", 1, ttl); err != nil || a != allowed(1, 1) {
		t.Fatalf("Admit after Release: %v", admission{a, err})
	}
	if err := c.Heartbeat(ctx, 0, "jobs", "clock", "h0", ttl); !errors.Is(err, concurrency.ErrNotHeld) {
		t.Fatalf("Heartbeat of a released holder: %v, want ErrNotHeld", err)
	}
}

// concurrencyExactAtOneInstant: goroutines on several clients race distinct holders into one key at
// one instant: exactly limit are admitted, and each denial counts limit in flight.
func concurrencyExactAtOneInstant(t *testing.T, cs []concurrency.Store) {
	const limit, goroutines, each = 5, 16, 4
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		c := cs[g%len(cs)]
		wg.Go(func() {
			for i := range each {
				a, err := c.Admit(context.Background(), t0, "race", "k", fmt.Sprintf("g%d-%d", g, i), limit, 1000)
				switch {
				case err != nil:
					t.Error(err)
					return
				case a.Allowed:
					admitted.Add(1)
				case a.InFlight != limit || a.RetryAfterMs != 1000:
					t.Errorf("denied with %+v, want %d in flight and a retry of 1000 ms", a, limit)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != limit {
		t.Fatalf("%d holders admitted, limit %d", n, limit)
	}
}

// concurrencyExactUnderChurn: goroutines on several clients admit, work and release on one key at
// the store's clock: the holders in flight, counted from admission to release, never exceed limit.
func concurrencyExactUnderChurn(t *testing.T, cs []concurrency.Store) {
	const limit, goroutines, rounds = 3, 16, 40
	var inFlight, peak, admissions, denials atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range goroutines {
		c := cs[g%len(cs)]
		holder := fmt.Sprint("g", g)
		wg.Go(func() {
			for range rounds {
				a, err := c.Admit(ctx, 0, "churn", "k", holder, limit, 60_000)
				if err != nil {
					t.Error(err)
					return
				}
				if !a.Allowed {
					denials.Add(1)
					continue
				}
				admissions.Add(1)
				// Counted once admitted, and uncounted before the slot is given back: the count
				// never runs ahead of the store's holders.
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if a.InFlight > limit || a.InFlight < 1 {
					t.Errorf("admitted with %d in flight, limit %d", a.InFlight, limit)
				}
				runtime.Gosched() // the work: let other goroutines race for the slots meanwhile
				inFlight.Add(-1)
				if err := c.Release(ctx, "churn", "k", holder); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("%d holders in flight at once, limit %d", p, limit)
	}
	if admissions.Load() < rounds || admissions.Load()+denials.Load() != goroutines*rounds {
		t.Fatalf("%d admissions and %d denials of %d Admits", admissions.Load(), denials.Load(), goroutines*rounds)
	}
	t.Logf("%d admissions, %d denials, at most %d in flight", admissions.Load(), denials.Load(), peak.Load())
}
