package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridestest"
)

const t0 int64 = 1_700_000_000_000

// newTable is an in-memory Table on overridestest.Plans, at the instant *now.
func newTable(t *testing.T, cfg overrides.Config, now *atomic.Int64) *overrides.Table {
	t.Helper()
	if cfg.Resolve == nil {
		cfg.Resolve = overridestest.Plans.Resolve
	}
	if now != nil {
		cfg.Now = now.Load
	}
	tb, err := overrides.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Close)
	return tb
}

func clock() *atomic.Int64 {
	var now atomic.Int64
	now.Store(t0)
	return &now
}

// wantField checks that err is an *sluice.InvalidError naming field.
func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ie *sluice.InvalidError
	if !errors.Is(err, sluice.ErrInvalid) || !errors.As(err, &ie) || ie.Field != field {
		t.Errorf("%s: %v, want an *sluice.InvalidError of field %q", what, err, field)
	}
}

// TestSetInvalid: every bad override is refused, naming its field, and nothing is stored.
func TestSetInvalid(t *testing.T) {
	tb := newTable(t, overrides.Config{}, clock())
	for _, c := range overridestest.InvalidCases() {
		t.Run(c.Name, func(t *testing.T) {
			wantField(t, "Set", tb.Set(context.Background(), c.Override), c.Field)
			if n := tb.Len(); n != 0 {
				t.Errorf("the table holds %d overrides after a refused Set", n)
			}
		})
	}
	_, err := tb.Delete(context.Background(), "api", "")
	wantField(t, "Delete of an empty key", err, "key")
}

func TestExpiresIn(t *testing.T) {
	tests := []struct {
		name  string
		ttlMs int64
		want  int64 // 0: an error
	}{
		{"one ms", 1, t0 + 1},
		{"a day", 86_400_000, t0 + 86_400_000},
		{"zero", 0, 0},
		{"negative", -5, 0},
		{"past the bound", overrides.MaxTTLMs + 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := overrides.ExpiresIn(t0, tt.ttlMs)
			if tt.want == 0 {
				wantField(t, "ExpiresIn", err, "ttlMs")
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ExpiresIn(t0, %d) = %d, %v; want %d", tt.ttlMs, got, err, tt.want)
			}
		})
	}
}

// TestLimits: every strategy's wire form makes the policy it names, and LimitsOf gives it back.
func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		limit overrides.Limit
		want  sluice.Limit
	}{
		{"gcra", overrides.Limit{Strategy: "gcra", Limit: 5, PeriodMs: 1000, Burst: 2},
			sluice.Limit{Strategy: sluice.GCRA{Limit: 5, PeriodMs: 1000, Burst: 2}}},
		{"token bucket, requests", overrides.Limit{Name: "rps", Unit: "request", Strategy: "tokenBucket", Capacity: 3, RefillPerSec: 0.5},
			sluice.Limit{Name: "rps", Unit: sluice.UnitRequest, Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 0.5}}},
		{"fixed window", overrides.Limit{Strategy: "fixedWindow", Limit: 10, WindowMs: 60_000},
			sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 60_000}}},
		{"calendar day", overrides.Limit{Strategy: "fixedWindow", Limit: 10_000, Calendar: "day", TimeZone: "Europe/Rome"},
			sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10_000, Calendar: sluice.Day, TimeZone: "Europe/Rome"}}},
		{"sliding window", overrides.Limit{Strategy: "slidingWindow", Limit: 7, WindowMs: 1000, Buckets: 10},
			sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 7, WindowMs: 1000, Buckets: 10}}},
		{"sliding log", overrides.Limit{Unit: "cost", Strategy: "slidingWindowLog", Limit: 4, WindowMs: 500},
			sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 4, WindowMs: 500}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := overrides.NewPolicy("api", []overrides.Limit{tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			if want := sluice.MustPolicy("api", tt.want); !p.Equal(want) {
				t.Errorf("policy %+v, want %+v", p.Limits(), want.Limits())
			}
			back, err := overrides.NewPolicy("api", overrides.LimitsOf(p))
			if err != nil || !back.Equal(p) {
				t.Errorf("LimitsOf: %+v, %v", overrides.LimitsOf(p), err)
			}
		})
	}
	_, err := overrides.NewPolicy("api", make([]overrides.Limit, overrides.MaxLimits+1))
	wantField(t, "too many limits", err, "limits")
	_, err = overrides.NewPolicy("api", nil)
	wantField(t, "no limits", err, "limits")
}

// TestTable: Set, Get, Policy, Delete and List on a Table in memory.
func TestTable(t *testing.T) {
	now := clock()
	tb := newTable(t, overrides.Config{}, now)
	ctx := context.Background()
	pro := overridestest.Plans["api"]["pro"]

	if p, o := tb.Policy("api", "acme", t0); p != nil || o != nil {
		t.Fatalf("an empty table applies %v, %+v", p, o)
	}
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "acme", Plan: "pro", Reason: "moved to pro", UpdatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	if p, o := tb.Policy("api", "acme", t0); p != pro || o.Plan != "pro" || o.UpdatedAt != t0 || o.Reason != "moved to pro" {
		t.Errorf("Policy after Set: %v, %+v", p, o)
	}
	if p, _ := tb.Policy("other", "acme", t0); p != nil {
		t.Errorf("an override of api applies to other: %v", p)
	}
	// Custom limits, under the policy's name.
	double := []overrides.Limit{{Strategy: "gcra", Limit: 20, PeriodMs: 1000, Burst: 20}}
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "acme", Limits: double, ExpiresAt: t0 + 5000}); err != nil {
		t.Fatal(err)
	}
	p, o := tb.Policy("api", "acme", t0+4999)
	if p == nil || p.Name() != "api" || p.Limits()[0].Strategy != (sluice.GCRA{Limit: 20, PeriodMs: 1000, Burst: 20}) || o.Plan != "" {
		t.Errorf("Policy after replacing with limits: %v, %+v", p, o)
	}
	if p, o := tb.Policy("api", "acme", t0+5000); p != nil || o != nil {
		t.Errorf("Policy at expiry: %v, %+v", p, o)
	}
	now.Store(t0 + 5000)
	if _, ok := tb.Get("api", "acme"); ok {
		t.Error("Get returns an expired override")
	}
	if existed, err := tb.Delete(ctx, "api", "acme"); err != nil || !existed {
		t.Errorf("Delete of an expired override: %v, %v", existed, err)
	}
	if existed, err := tb.Delete(ctx, "api", "acme"); err != nil || existed {
		t.Errorf("Delete again: %v, %v", existed, err)
	}
	if n := tb.Len(); n != 0 {
		t.Errorf("%d overrides left", n)
	}
	// An expired override leaves the table at the next reload.
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "brief", Plan: "free", ExpiresAt: t0 + 6000}); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 6000)
	if err := tb.Reload(ctx); err != nil || tb.Len() != 0 {
		t.Errorf("after a reload past expiry: %d overrides, %v", tb.Len(), err)
	}
}

// TestList pages through a policy's overrides by key, with a prefix, across changes.
func TestList(t *testing.T) {
	now := clock()
	tb := newTable(t, overrides.Config{}, now)
	ctx := context.Background()
	var want []string
	for i := range 250 {
		key := fmt.Sprintf("user-%03d", i)
		exp := int64(0)
		if i%10 == 9 {
			exp = t0 + 10 // expires before the listing
		} else {
			want = append(want, key)
		}
		if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: key, Plan: "pro", ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"team-1", "userx", "use"} {
		if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: k, Plan: "free"}); err != nil {
			t.Fatal(err)
		}
	}
	now.Store(t0 + 10)
	var got []string
	token, pages := "", 0
	for {
		page, next := tb.List("api", "user-", token, 40)
		pages++
		for _, o := range page {
			got = append(got, o.Key)
		}
		if pages == 2 {
			// A change between pages: a key before the token, and one after it.
			if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "user-000a", Plan: "free"}); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %d keys, want %d:\n%v", len(got), len(want), got)
	}
	if pages != (len(want)+39)/40 {
		t.Errorf("%d pages, want %d", pages, (len(want)+39)/40)
	}
	if page, next := tb.List("nope", "", "", 10); page != nil || next != "" {
		t.Errorf("List of a policy without overrides: %v, %q", page, next)
	}
}

// TestReloadResolvesPlans: after the policies change, Reload applies the plans as they are now.
func TestReloadResolvesPlans(t *testing.T) {
	var plans atomic.Pointer[overrides.Plans]
	first := overridestest.Plans
	plans.Store(&first)
	tb := newTable(t, overrides.Config{Resolve: func(policy, plan string) (*sluice.Policy, bool) {
		return plans.Load().Resolve(policy, plan)
	}}, clock())
	ctx := context.Background()
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	bigger := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 1000, PeriodMs: 1000, Burst: 1000}})
	second := overrides.Plans{"api": {"": first["api"][""], "pro": bigger}}
	plans.Store(&second)
	if err := tb.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := tb.Policy("api", "acme", t0); p != bigger {
		t.Errorf("after Reload: %v, want the new pro plan", p)
	}
	third := overrides.Plans{"api": {"": first["api"][""]}} // pro removed
	plans.Store(&third)
	if err := tb.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if p, o := tb.Policy("api", "acme", t0); p != nil || o != nil {
		t.Errorf("an override of a removed plan applies: %v", p)
	}
	if o, ok := tb.Get("api", "acme"); !ok || o.Plan != "pro" {
		t.Errorf("an override of a removed plan is forgotten: %+v, %v", o, ok)
	}
}

// TestFile: the overrides of a Table with File survive a new Table on the file.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "overrides.json")
	ctx := context.Background()
	now := clock()
	tb := newTable(t, overrides.Config{File: path}, now)
	for i := range 20 {
		if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: fmt.Sprintf("k%d", i), Plan: "pro", Reason: "<&>"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "short", Plan: "free", ExpiresAt: t0 + 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Delete(ctx, "api", "k3"); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: "late", Plan: "pro"}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Set after Close: %v", err)
	}

	now.Store(t0 + 100) // "short" has expired: the new Table drops it, and the file too
	again := newTable(t, overrides.Config{File: path}, now)
	if n := again.Len(); n != 19 {
		t.Errorf("the new table holds %d overrides, want 19", n)
	}
	if n, none := again.Count("api"), again.Count("nope"); n != 19 || none != 0 {
		t.Errorf("Count: api %d, nope %d; want 19, 0", n, none)
	}
	if o, ok := again.Get("api", "k7"); !ok || o.Plan != "pro" || o.Reason != "<&>" || o.UpdatedAt != t0 {
		t.Errorf("k7: %+v, %v", o, ok)
	}
	if _, ok := again.Get("api", "k3"); ok {
		t.Error("a deleted override came back")
	}
	data, err := os.ReadFile(path)
	if err != nil || strings.Contains(string(data), "short") {
		t.Errorf("the file keeps the expired override, or cannot be read (%v):\n%s", err, data)
	}
	if _, err := overrides.New(overrides.Config{File: path, Backend: nil, Resolve: overridestest.Plans.Resolve}); err != nil {
		t.Errorf("opening the file again: %v", err)
	}
}

// TestFileCorrupt: a file that is not an overrides file is an error naming it, and no Table.
func TestFileCorrupt(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"not JSON", "{overrides", "is not an overrides file"},
		{"truncated", `{"format":"sluice-overrides/1","overrides":[{"policy":"api"`, "is not an overrides file"},
		{"another format", `{"format":"something/2","overrides":[]}`, `format "something/2"`},
		{"bad override", `{"format":"sluice-overrides/1","overrides":[{"policy":"api","key":"k"}]}`, "overrides[0]"},
		{"trailing data", `{"format":"sluice-overrides/1","overrides":[]} []`, "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "overrides.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			tb, err := overrides.New(overrides.Config{File: path})
			if err == nil {
				tb.Close()
				t.Fatal("New on a corrupt file succeeded")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to name the file and say %q", err, tt.want)
			}
		})
	}
}

// TestPolicyAllocates nothing, hit or miss.
func TestPolicyAllocatesNothing(t *testing.T) {
	tb := newTable(t, overrides.Config{}, clock())
	if err := tb.Set(context.Background(), overrides.Override{Policy: "api", Key: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"acme", "other"} {
		if n := testing.AllocsPerRun(1000, func() { tb.Policy("api", key, t0) }); n != 0 {
			t.Errorf("Policy of %s: %v allocations", key, n)
		}
	}
}

// TestConcurrent: lookups during Sets and Deletes (run with -race) see each key either without
// an override or with one of the plans set.
func TestConcurrent(t *testing.T) {
	tb := newTable(t, overrides.Config{}, clock())
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p, o := tb.Policy("api", fmt.Sprint(i%50+r), t0)
				if p != nil && o.Plan != "pro" && o.Plan != "free" {
					t.Errorf("plan %q", o.Plan)
				}
			}
		})
	}
	for i := range 500 {
		key := fmt.Sprint(i % 50)
		if i%7 == 0 {
			if _, err := tb.Delete(ctx, "api", key); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tb.Set(ctx, overrides.Override{Policy: "api", Key: key, Plan: []string{"pro", "free"}[i%2]}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	page, _ := tb.List("api", "", "", 1000)
	if len(page) != tb.Len() {
		t.Errorf("List has %d, Len %d", len(page), tb.Len())
	}
}

// TestCloseIdempotent: Close twice, and reads after Close answer from the last copy.
func TestCloseIdempotent(t *testing.T) {
	tb := newTable(t, overrides.Config{Refresh: time.Millisecond}, clock())
	if err := tb.Set(context.Background(), overrides.Override{Policy: "api", Key: "k", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	tb.Close()
	if p, _ := tb.Policy("api", "k", t0); p == nil {
		t.Error("Policy after Close forgot the override")
	}
	if _, err := tb.Delete(context.Background(), "api", "k"); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Delete after Close: %v", err)
	}
}

// TestFileAndBackend: Config.File and Config.Backend together are refused.
func TestFileAndBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.json")
	first := newTable(t, overrides.Config{File: path}, clock())
	_ = first
	if _, err := overrides.New(overrides.Config{File: path, Backend: stubBackend{}}); err == nil {
		t.Error("New with File and Backend succeeded")
	}
}

// stubBackend is a Backend that is never used: New refuses it beside File before using it.
type stubBackend struct{}

func (stubBackend) Apply(context.Context, overrides.Change) (bool, error) { return false, nil }
func (stubBackend) Load(context.Context) ([]overrides.Override, error)    { return nil, nil }
func (stubBackend) Watch(context.Context, func(overrides.Change)) error   { return nil }

// downBackend is a backend that cannot be reached until up is set, and then holds overrides.
type downBackend struct {
	up        atomic.Bool
	overrides []overrides.Override
	tries     atomic.Int64
}

var errDown = errors.New("down")

func (b *downBackend) Apply(context.Context, overrides.Change) (bool, error) {
	if !b.up.Load() {
		return false, errDown
	}
	return false, nil
}

func (b *downBackend) Load(context.Context) ([]overrides.Override, error) {
	if !b.up.Load() {
		return nil, errDown
	}
	return b.overrides, nil
}

func (b *downBackend) Watch(context.Context, func(overrides.Change)) error {
	b.tries.Add(1)
	if !b.up.Load() {
		return errDown
	}
	return nil
}

// With Background, New returns while the backend is down, and the Table loads once it is up.
// Without, New fails.
func TestBackground(t *testing.T) {
	b := &downBackend{overrides: []overrides.Override{{Policy: "api", Key: "acme", Plan: "pro"}}}
	if _, err := overrides.New(overrides.Config{Backend: b, Resolve: overridestest.Plans.Resolve}); !errors.Is(err, errDown) {
		t.Fatalf("New on a backend that is down = %v, want its error", err)
	}
	tb := newTable(t, overrides.Config{Backend: b, Background: true}, nil)
	select {
	case <-tb.Loaded():
		t.Fatal("Loaded before the backend answered")
	default:
	}
	if p, _ := tb.Policy("api", "acme", t0); p != nil {
		t.Fatal("an override applies before anything was loaded")
	}
	b.up.Store(true)
	select {
	case <-tb.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatalf("not loaded 10 s after the backend came up (%d tries)", b.tries.Load())
	}
	if p, _ := tb.Policy("api", "acme", t0); p == nil || p.Plan() != "pro" {
		t.Errorf("after the load, acme's policy = %v, want plan pro", p)
	}
	tb.Close()
	tb.Close()
}
