// Package overridestest checks an overrides.Backend on a real store the way a fleet uses it:
// several Tables, as several processes, on one backend.
package overridestest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
)

// Harness opens backends of the store under test.
type Harness struct {
	// Fresh makes a namespace for the test alone (a key prefix, a schema) and returns open,
	// which opens a backend on it as another process would (connections of its own), and cut,
	// which kills the subscription of every backend open opened (the connections that Watch
	// listens on), as a network fault or a server restart would.
	Fresh func(t *testing.T) (open func() overrides.Backend, cut func())
}

// Plans is the policies the tests resolve: "api" with plans "free" and "pro", and "other".
var Plans = overrides.Plans{
	"api": {
		"":     sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}}),
		"free": sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}}).WithPlan("free"),
		"pro":  sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 100, PeriodMs: 1000, Burst: 100}}).WithPlan("pro"),
	},
	"other": {
		"": sluice.MustPolicy("other", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}}),
	},
}

// Within is how soon every Table must see a change made through another.
const Within = time.Second

// Run runs every check of the package on h.
func Run(t *testing.T, h Harness) {
	t.Run("Propagation", func(t *testing.T) { Propagation(t, h) })
	t.Run("Expiry", func(t *testing.T) { Expiry(t, h) })
	t.Run("Restart", func(t *testing.T) { Restart(t, h) })
	t.Run("LostSubscription", func(t *testing.T) { LostSubscription(t, h) })
	t.Run("Invalid", func(t *testing.T) { Invalid(t, h) })
	t.Run("Converge", func(t *testing.T) { Converge(t, h) })
}

// tables opens n Tables on one namespace of h, refreshing only hourly, so that only the push
// can carry changes within a test.
func tables(t *testing.T, h Harness, n int) (ts []*overrides.Table, open func() *overrides.Table, cut func()) {
	t.Helper()
	openBackend, cut := h.Fresh(t)
	open = func() *overrides.Table {
		t.Helper()
		tb, err := overrides.New(overrides.Config{Backend: openBackend(), Resolve: Plans.Resolve, Refresh: time.Hour})
		if err != nil {
			t.Fatalf("overrides.New: %v", err)
		}
		t.Cleanup(tb.Close)
		return tb
	}
	for range n {
		ts = append(ts, open())
	}
	return ts, open, cut
}

// await waits until every table in ts sees cond, at most within, and returns how long it took.
func await(t *testing.T, what string, within time.Duration, ts []*overrides.Table, cond func(*overrides.Table) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for _, tb := range ts {
		for !cond(tb) {
			if time.Since(start) > within {
				t.Fatalf("%s: not seen by every table within %v", what, within)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	return time.Since(start)
}

// Propagation sets, changes and deletes overrides through one of three Tables, and measures how
// soon the other two see each change.
func Propagation(t *testing.T, h Harness) {
	ts, _, _ := tables(t, h, 3)
	ctx := context.Background()
	var sets, dels []time.Duration
	for i := range 20 {
		src, others := ts[i%3], slices.Concat(ts[:i%3], ts[i%3+1:])
		key := fmt.Sprintf("acme-%d", i)
		o := overrides.Override{Policy: "api", Key: key, Plan: "pro", Reason: "moved to pro"}
		if i%2 == 1 {
			o = overrides.Override{Policy: "api", Key: key, Limits: []overrides.Limit{{Strategy: "tokenBucket", Capacity: 2, RefillPerSec: 1}}}
		}
		start := time.Now()
		if err := src.Set(ctx, o); err != nil {
			t.Fatalf("Set %s: %v", key, err)
		}
		if got, ok := src.Get("api", key); !ok || got.Plan != o.Plan || got.UpdatedAt == 0 {
			t.Fatalf("Get %s on the table that set it: %+v, %v", key, got, ok)
		}
		sets = append(sets, time.Since(start)+await(t, "set "+key, Within, others, func(tb *overrides.Table) bool {
			p, got := tb.Policy("api", key, time.Now().UnixMilli())
			return p != nil && got.Plan == o.Plan && slices.Equal(got.Limits, o.Limits)
		}))
		start = time.Now()
		existed, err := src.Delete(ctx, "api", key)
		if err != nil || !existed {
			t.Fatalf("Delete %s: %v, %v", key, existed, err)
		}
		dels = append(dels, time.Since(start)+await(t, "delete "+key, Within, ts, func(tb *overrides.Table) bool {
			_, ok := tb.Get("api", key)
			return !ok
		}))
	}
	if existed, err := ts[0].Delete(ctx, "api", "never-set"); err != nil || existed {
		t.Errorf("Delete of a key never set: %v, %v", existed, err)
	}
	t.Logf("a Set seen by the other two tables after %s; a Delete after %s", summary(sets), summary(dels))
}

// summary is the median and the maximum of ds.
func summary(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("median %v, max %v (%d changes)", ds[len(ds)/2].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond), len(ds))
}

// Expiry: an override stops applying at its ExpiresAt, to the ms, on every Table, with no message.
func Expiry(t *testing.T, h Harness) {
	ts, _, _ := tables(t, h, 3)
	ctx := context.Background()
	at := time.Now().UnixMilli() + 60_000
	if err := ts[0].Set(ctx, overrides.Override{Policy: "api", Key: "scraper", Plan: "free", ExpiresAt: at}); err != nil {
		t.Fatal(err)
	}
	await(t, "set", Within, ts, func(tb *overrides.Table) bool { p, _ := tb.Policy("api", "scraper", at-1); return p != nil })
	for i, tb := range ts {
		if p, o := tb.Policy("api", "scraper", at-1); p == nil || o.ExpiresAt != at {
			t.Errorf("table %d, 1 ms before expiry: %v, %+v", i, p, o)
		}
		if p, o := tb.Policy("api", "scraper", at); p != nil || o != nil {
			t.Errorf("table %d, at expiry: %v, %+v, want none", i, p, o)
		}
	}
}

// Restart: a Table opened later (a process started again) loads every override.
func Restart(t *testing.T, h Harness) {
	ts, open, _ := tables(t, h, 1)
	ctx := context.Background()
	want := map[string]string{}
	for i := range 50 {
		key, plan := fmt.Sprintf("k%02d", i), []string{"free", "pro"}[i%2]
		if err := ts[0].Set(ctx, overrides.Override{Policy: "api", Key: key, Plan: plan}); err != nil {
			t.Fatal(err)
		}
		want[key] = plan
	}
	if err := ts[0].Set(ctx, overrides.Override{Policy: "other", Key: "k00", Limits: []overrides.Limit{{Strategy: "fixedWindow", Limit: 1, WindowMs: 1000}}}); err != nil {
		t.Fatal(err)
	}
	ts[0].Close()
	again := open()
	page, next := again.List("api", "", "", 1000)
	if len(page) != len(want) || next != "" {
		t.Fatalf("List after a restart: %d overrides (next %q), want %d", len(page), next, len(want))
	}
	for _, o := range page {
		if want[o.Key] != o.Plan {
			t.Errorf("%s: plan %q, want %q", o.Key, o.Plan, want[o.Key])
		}
	}
	if p, _ := again.Policy("other", "k00", time.Now().UnixMilli()); p == nil || p.Name() != "other" {
		t.Errorf("custom limits after a restart: %v", p)
	}
}

// LostSubscription kills the Tables' subscriptions; the changes made before they subscribe again
// are seen once they have.
func LostSubscription(t *testing.T, h Harness) {
	ts, _, cut := tables(t, h, 3)
	ctx := context.Background()
	if err := ts[0].Set(ctx, overrides.Override{Policy: "api", Key: "before", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	await(t, "before the cut", Within, ts, func(tb *overrides.Table) bool { _, ok := tb.Get("api", "before"); return ok })
	cut()
	for i := range 5 {
		if err := ts[0].Set(ctx, overrides.Override{Policy: "api", Key: fmt.Sprintf("during-%d", i), Plan: "free"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ts[0].Delete(ctx, "api", "before"); err != nil {
		t.Fatal(err)
	}
	took := await(t, "changes made while the subscriptions were down", 10*time.Second, ts, func(tb *overrides.Table) bool {
		_, gone := tb.Get("api", "before")
		page, _ := tb.List("api", "during-", "", 10)
		return !gone && len(page) == 5
	})
	t.Logf("changes made after the subscriptions were killed seen by every table after %v", took.Round(time.Millisecond))
	// And the new subscriptions carry later changes.
	start := time.Now()
	if err := ts[1].Set(ctx, overrides.Override{Policy: "api", Key: "after", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	await(t, "a change after the subscriptions are back", Within, ts, func(tb *overrides.Table) bool { _, ok := tb.Get("api", "after"); return ok })
	t.Logf("a change after reconnecting seen by every table %v after Set was called", time.Since(start).Round(10*time.Microsecond))
}

// Converge: three Tables changing the same few keys at once, reloading now and then, end up
// holding what the backend holds, as a Table opened afterwards loads it.
func Converge(t *testing.T, h Harness) {
	ts, open, _ := tables(t, h, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i, tb := range ts {
		wg.Go(func() {
			for j := range 60 {
				key := fmt.Sprintf("k%d", j%4)
				var err error
				switch {
				case j%5 == 4:
					_, err = tb.Delete(ctx, "api", key)
				case j%2 == 0:
					err = tb.Set(ctx, overrides.Override{Policy: "api", Key: key, Plan: "pro", Reason: fmt.Sprint(i, j)})
				default:
					err = tb.Set(ctx, overrides.Override{Policy: "api", Key: key, Reason: fmt.Sprint(i, j),
						Limits: []overrides.Limit{{Strategy: "fixedWindow", Limit: float64(1 + i*100 + j), WindowMs: 1000}}})
				}
				if err != nil {
					t.Error(err)
					return
				}
				if j%7 == 0 {
					tb.Kick()
				}
			}
		})
	}
	wg.Wait()
	want := contents(open())
	took := await(t, "the backend's overrides", Within, ts, func(tb *overrides.Table) bool { return contents(tb) == want })
	t.Logf("three tables agree with the backend %v after the last change: %s", took.Round(10*time.Microsecond), want)
}

// contents is the overrides of policy api in tb, as text.
func contents(tb *overrides.Table) string {
	page, _ := tb.List("api", "", "", 1000)
	var b strings.Builder
	for _, o := range page {
		fmt.Fprintf(&b, "%s:%s%v:%s ", o.Key, o.Plan, o.Limits, o.Reason)
	}
	return b.String()
}

// Invalid: bad overrides are refused with the field named, and store nothing anywhere.
func Invalid(t *testing.T, h Harness) {
	ts, open, _ := tables(t, h, 2)
	ctx := context.Background()
	for _, c := range InvalidCases() {
		err := ts[0].Set(ctx, c.Override)
		var ie *sluice.InvalidError
		if !errors.Is(err, sluice.ErrInvalid) || !errors.As(err, &ie) || ie.Field != c.Field {
			t.Errorf("%s: Set: %v, want an *InvalidError of field %q", c.Name, err, c.Field)
		}
	}
	if err := ts[0].Set(ctx, overrides.Override{Policy: "api", Key: "fence", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	await(t, "a valid override after the invalid ones", Within, ts, func(tb *overrides.Table) bool { _, ok := tb.Get("api", "fence"); return ok })
	for i, tb := range append(ts, open()) {
		if n := tb.Len(); n != 1 {
			page, _ := tb.List("api", "", "", 100)
			t.Errorf("table %d holds %d overrides, want 1 (fence): %+v", i, n, page)
		}
	}
}

// InvalidCase is an override Set refuses, and the field its error names.
type InvalidCase struct {
	Name     string
	Override overrides.Override
	Field    string
}

// InvalidCases are overrides every Table with Plans refuses.
func InvalidCases() []InvalidCase {
	long := func(n int) string { return string(make([]byte, n)) }
	gcra := []overrides.Limit{{Strategy: "gcra", Limit: 1, PeriodMs: 1000, Burst: 1}}
	return []InvalidCase{
		{"unknown policy", overrides.Override{Policy: "nope", Key: "k", Plan: "pro"}, "policy"},
		{"empty policy", overrides.Override{Key: "k", Plan: "pro"}, "policy"},
		{"empty key", overrides.Override{Policy: "api", Plan: "pro"}, "key"},
		{"key too long", overrides.Override{Policy: "api", Key: long(sluice.MaxKeyLen + 1), Plan: "pro"}, "key"},
		{"key not UTF-8", overrides.Override{Policy: "api", Key: "\xff", Plan: "pro"}, "key"},
		{"unknown plan", overrides.Override{Policy: "api", Key: "k", Plan: "gold"}, "plan"},
		{"plan of a policy without plans", overrides.Override{Policy: "other", Key: "k", Plan: "pro"}, "plan"},
		{"plan and limits", overrides.Override{Policy: "api", Key: "k", Plan: "pro", Limits: gcra}, "plan"},
		{"neither plan nor limits", overrides.Override{Policy: "api", Key: "k"}, "plan"},
		{"limit missing a parameter", overrides.Override{Policy: "api", Key: "k", Limits: []overrides.Limit{{Strategy: "gcra", Limit: 1, Burst: 1}}}, "limits[0].periodMs"},
		{"limit of an unknown strategy", overrides.Override{Policy: "api", Key: "k", Limits: []overrides.Limit{{Strategy: "leakyBucket", Limit: 1}}}, "limits[0].strategy"},
		{"parameter of another strategy", overrides.Override{Policy: "api", Key: "k", Limits: []overrides.Limit{gcra[0], {Strategy: "tokenBucket", Capacity: 1, RefillPerSec: 1, Burst: 3}}}, "limits[1].burst"},
		{"unknown unit", overrides.Override{Policy: "api", Key: "k", Limits: []overrides.Limit{{Unit: "bytes", Strategy: "gcra", Limit: 1, PeriodMs: 1000, Burst: 1}}}, "limits[0].unit"},
		{"negative limit", overrides.Override{Policy: "api", Key: "k", Limits: []overrides.Limit{{Strategy: "fixedWindow", Limit: -1, WindowMs: 1000}}}, "limits[0].limit"},
		{"expired already", overrides.Override{Policy: "api", Key: "k", Plan: "pro", ExpiresAt: 1}, "expiresAt"},
		{"negative expiry", overrides.Override{Policy: "api", Key: "k", Plan: "pro", ExpiresAt: -5}, "expiresAt"},
		{"reason too long", overrides.Override{Policy: "api", Key: "k", Plan: "pro", Reason: long(overrides.MaxReasonLen + 1)}, "reason"},
		{"reason not UTF-8", overrides.Override{Policy: "api", Key: "k", Plan: "pro", Reason: "\xc3"}, "reason"},
		{"too big as JSON", overrides.Override{Policy: "api", Key: string(make([]byte, 1024)), Plan: "pro", Reason: string(make([]byte, 1024))}, "key"},
	}
}

// ExpireByInstant puts o with ExpiresAt 1000 through b, then checks that an OpExpire deletes it only
// at an instant at or past its expiry, and reports whether it did: not at 999, at 1000, and not
// again at 2000 (it is gone).
func ExpireByInstant(t *testing.T, b overrides.Backend, o overrides.Override) {
	t.Helper()
	ctx := context.Background()
	o.ExpiresAt = 1000
	if _, err := b.Apply(ctx, overrides.Change{Op: overrides.OpPut, Override: o}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		at   int64
		want bool
	}{{"before expiry", 999, false}, {"at expiry", 1000, true}, {"gone", 2000, false}} {
		ref := overrides.Override{Policy: o.Policy, Key: o.Key, ExpiresAt: tc.at}
		if got, err := b.Apply(ctx, overrides.Change{Op: overrides.OpExpire, Override: ref}); err != nil || got != tc.want {
			t.Errorf("%s: expire at %d: %v, %v; want %v", tc.name, tc.at, got, err, tc.want)
		}
	}
}
