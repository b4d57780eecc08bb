// Package storetest holds the tests every store must pass, so that each store runs the same ones:
// the conformance vectors, random traffic compared with the memory store, and calendar windows.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store/memory"
)

// t0 is the first instant of SameAsMemory's traffic.
const t0 int64 = 1_700_000_000_000

// Vectors replays every file of the conformance vectors (conformance/testdata/vectors, a copy of the project's shared vectors)
// against s.
func Vectors(t *testing.T, s sluice.Store) {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(here), "../../conformance/testdata/vectors/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in conformance/testdata/vectors (err %v)", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := conformance.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			res, err := conformance.Run(context.Background(), s, f, "vec:")
			if err != nil {
				t.Fatal(err)
			}
			for _, fl := range res.Failures {
				t.Error(fl)
			}
			if res.Passed != f.Steps() {
				t.Errorf("%d of %d steps passed", res.Passed, f.Steps())
			}
		})
	}
}

// Policies are small enough that random traffic keeps them near their limits, so every path
// (admit, deny, refill, window roll-over, refund) runs; each goes idle within about 2 s of a check.
var Policies = []*sluice.Policy{
	sluice.MustPolicy("gcra", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 4}}),
	sluice.MustPolicy("tokenBucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 2.5}}),
	sluice.MustPolicy("fixedWindow", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 6, WindowMs: 700}}),
	sluice.MustPolicy("slidingWindow", sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 7, WindowMs: 1000, Buckets: 4}}),
	sluice.MustPolicy("slidingWindowLog", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 5, WindowMs: 800}}),
	// One limit counting requests: every check spends 1, whatever its cost.
	sluice.MustPolicy("requests", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, WindowMs: 900}, Unit: sluice.UnitRequest}),
	sluice.MustPolicy("gcraRequests", sluice.Limit{Strategy: sluice.GCRA{Limit: 4, PeriodMs: 1000, Burst: 2}, Unit: sluice.UnitRequest}),
	sluice.MustPolicy("fractionalBucket", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 4.7, RefillPerSec: 1.3}}),
	sluice.MustPolicy("model",
		sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 4, WindowMs: 1000, Buckets: 10}, Unit: sluice.UnitRequest},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 9, RefillPerSec: 3}}),
	sluice.MustPolicy("mixed",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 5, PeriodMs: 1000, Burst: 3}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 8, WindowMs: 2000}},
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 6, WindowMs: 1500}, Unit: sluice.UnitRequest}),
	// Fractional parameters, so that truncation and float rounding show.
	sluice.MustPolicy("fractional",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 3, PeriodMs: 1000, Burst: 2.5}},
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 4.7, RefillPerSec: 1.3}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5.5, WindowMs: 333.3}},
		sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 6.2, WindowMs: 900.5, Buckets: 7}, Unit: sluice.UnitRequest}),
}

// Daily is a daily quota, which SameAsMemory checks besides Policies: its traffic lasts minutes, so
// Daily only counts, and stays busy until midnight in Rome.
var Daily = sluice.MustPolicy("daily", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 20, Calendar: sluice.Day, TimeZone: "Europe/Rome"}})

// Keys are the keys SameAsMemory checks: a store that holds state across calls must start each
// call with them empty, as a fresh memory store does. The last is longer than the 16 bytes the
// memory store holds in a slot.
var Keys = []string{"a", "b", "c", "a key longer than sixteen bytes"}

// SameAsMemory replays steps random operations from seed (every operation, Debit included, every
// strategy, composite policies, keys repeated within one call) of Policies and Daily, on Keys, on s
// and on a fresh memory store at the same instants, and fails at the first answer that differs.
func SameAsMemory(t *testing.T, s sluice.Store, seed uint64, steps int) {
	t.Helper()
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 42))
	keys := Keys
	policies := append(Policies[:len(Policies):len(Policies)], Daily)
	policy := func() *sluice.Policy { return policies[r.IntN(len(policies))] }
	key := func() string { return keys[r.IntN(len(keys))] }
	now := t0
	for step := range steps {
		now += int64(r.IntN(250))
		cost := int64(1 + r.IntN(3))
		p := policy()
		var got, want any
		var what string
		switch op := r.IntN(21); {
		case op < 8:
			what = fmt.Sprintf("Check(%s, cost %d)", p.Name(), cost)
			k := key()
			d1, err1 := s.Check(ctx, now, p, k, cost)
			d2, err2 := ms.Check(ctx, now, p, k, cost)
			got, want = []any{d1, err1}, []any{d2, err2}
		case op < 10:
			ks := make([]string, 1+r.IntN(4))
			for i := range ks {
				ks[i] = key()
			}
			what = fmt.Sprintf("CheckMany(%s, %v, cost %d)", p.Name(), ks, cost)
			out1, out2 := make([]sluice.Decision, len(ks)), make([]sluice.Decision, len(ks))
			err1 := s.CheckMany(ctx, now, p, ks, cost, out1)
			err2 := ms.CheckMany(ctx, now, p, ks, cost, out2)
			got, want = []any{out1, err1}, []any{out2, err2}
		case op < 13:
			ops := make([]Op, 2+r.IntN(3))
			for i := range ops {
				ops[i] = Op{Policy: policy(), Key: key(), Cost: int64(1 + r.IntN(3))}
			}
			what = fmt.Sprintf("CheckAll(%d ops)", len(ops))
			out1, out2 := make([]sluice.Decision, len(ops)), make([]sluice.Decision, len(ops))
			err1 := CheckAll(ctx, s, now, ops, out1)
			err2 := CheckAll(ctx, ms, now, ops, out2)
			got, want = []any{out1, err1}, []any{out2, err2}
		case op < 15:
			what = fmt.Sprintf("Peek(%s)", p.Name())
			k := key()
			d1, err1 := s.Peek(ctx, now, p, k)
			d2, err2 := ms.Peek(ctx, now, p, k)
			got, want = []any{d1, err1}, []any{d2, err2}
		case op < 17:
			what = fmt.Sprintf("Forecast(%s, cost %d)", p.Name(), cost)
			k := key()
			f1, err1 := s.Forecast(ctx, now, p, k, cost)
			f2, err2 := ms.Forecast(ctx, now, p, k, cost)
			got, want = []any{f1, err1}, []any{f2, err2}
		case op < 19:
			what = fmt.Sprintf("Refund(%s, cost %d)", p.Name(), cost)
			k := key()
			got, want = s.Refund(ctx, now, p, k, cost), ms.Refund(ctx, now, p, k, cost)
		case op < 20:
			what = fmt.Sprintf("Debit(%s, cost %d)", p.Name(), 5*cost)
			k := key()
			got, want = s.Debit(ctx, now, p, k, 5*cost), ms.Debit(ctx, now, p, k, 5*cost)
		default:
			what = fmt.Sprintf("Reset(%s)", p.Name())
			k := key()
			got, want = s.Reset(ctx, p, k), ms.Reset(ctx, p, k)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d at %d: %s\nstore:  %+v\nmemory: %+v", step, now-t0, what, got, want)
		}
	}
}

// CalendarWindows checks calendar quotas on s across the boundaries that make them calendar ones
// (local midnight, days of 23 and 25 hours, month ends), against the memory store.
func CalendarWindows(t *testing.T, s sluice.Store) {
	t.Helper()
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	rome, _ := time.LoadLocation("Europe/Rome")
	day := sluice.MustPolicy("daily", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, Calendar: sluice.Day, TimeZone: "Europe/Rome"}})
	month := sluice.MustPolicy("monthly", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 4, Calendar: sluice.Month, TimeZone: "America/New_York"}})
	both := sluice.MustPolicy("plan",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, Calendar: sluice.Day, TimeZone: "Europe/Rome"}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, Calendar: sluice.Month, TimeZone: "Europe/Rome"}})
	var instants []int64
	for _, at := range []time.Time{
		time.Date(2026, 3, 28, 23, 59, 59, 0, rome), // the night clocks go forward
		time.Date(2026, 3, 29, 0, 0, 0, 0, rome),
		time.Date(2026, 3, 29, 22, 59, 59, 0, rome),
		time.Date(2026, 3, 30, 0, 0, 0, 0, rome),
		time.Date(2026, 10, 25, 23, 59, 59, 0, rome), // a 25-hour day
		time.Date(2026, 10, 26, 0, 0, 0, 0, rome),
		time.Date(2028, 2, 29, 23, 0, 0, 0, rome), // leap day, and a New York month end
		time.Date(2028, 3, 1, 5, 59, 0, 0, rome),
		time.Date(2028, 3, 1, 6, 0, 0, 0, rome),
	} {
		at := at.UnixMilli()
		instants = append(instants, at-1, at, at+1)
	}
	for _, now := range instants {
		for _, p := range []*sluice.Policy{day, month, both} {
			for range 3 {
				d1, err1 := s.Check(ctx, now, p, "k", 1)
				d2, err2 := ms.Check(ctx, now, p, "k", 1)
				if err1 != nil || err2 != nil || !reflect.DeepEqual(d1, d2) {
					t.Fatalf("%s at %s: store %+v, %v; memory %+v, %v", p.Name(), time.UnixMilli(now).In(rome), d1, err1, d2, err2)
				}
			}
			f1, _ := s.Forecast(ctx, now, p, "k", 1)
			f2, _ := ms.Forecast(ctx, now, p, "k", 1)
			if f1 != f2 {
				t.Fatalf("Forecast %s at %d: store %+v, memory %+v", p.Name(), now, f1, f2)
			}
		}
	}
}

// KeysApart checks that every policy and key has a state of its own, whatever their bytes: keys
// holding NUL or bytes that are not UTF-8 (which PostgreSQL's text cannot hold as they are), keys
// that start with the byte a store escapes with, and policy names and keys that a store joining
// them with ':' would give one key (policy "login:ip" with key "1.2.3.4", policy "login" with key
// "ip:1.2.3.4").
func KeysApart(t *testing.T, s sluice.Store) {
	t.Helper()
	one := sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 60_000}}
	two := []sluice.Limit{one, {Strategy: sluice.GCRA{Limit: 1, PeriodMs: 60_000, Burst: 1}}}
	loginIP, login := sluice.MustPolicy("login:ip", one), sluice.MustPolicy("login", one)
	p := sluice.MustPolicy("p", one)
	modelX, model := sluice.MustPolicy("model:x", two...), sluice.MustPolicy("model", two...)
	longest := sluice.MustPolicy(strings.Repeat("a:", 64), one) // 128 bytes, the most a name may hold
	pairs := []struct {
		p   *sluice.Policy
		key string
	}{
		{loginIP, "1.2.3.4"}, {login, "ip:1.2.3.4"},
		{modelX, "k"}, {model, "x:k"},
		{p, "a\x00b"}, {p, "a\x00c"}, {p, "a"}, {p, "\x00"},
		{p, "\xff\xfe"}, {p, "\xff"}, {p, "ca\xf1e"},
		{p, "\x01"}, {p, "\x0161"}, {p, "\x01613031"},
		{p, "a}b"}, {p, "{a"}, {p, "}"},
		{longest, strings.Repeat("\xff", sluice.MaxKeyLen)}, {longest, strings.Repeat("é", sluice.MaxKeyLen/2)},
	}
	ctx := context.Background()
	check := func(i int, at int64, want bool) {
		t.Helper()
		pr := pairs[i]
		d, err := s.Check(ctx, at, pr.p, pr.key, 1)
		if err != nil || d.Allowed != want {
			t.Errorf("policy %q key %q at +%d ms: %+v, %v; want allowed %v", pr.p.Name(), pr.key, at-t0, d, err, want)
		}
	}
	for i := range pairs {
		check(i, t0, true) // each a fresh key, whatever the others spent
	}
	for i := range pairs {
		check(i, t0+1, false)
	}
	if err := s.Reset(ctx, pairs[4].p, pairs[4].key); err != nil {
		t.Fatal(err)
	}
	check(4, t0+2, true)  // Reset forgot "a\x00b"
	check(5, t0+2, false) // and nothing else
	check(6, t0+2, false)
}

// StrategyChange checks a policy whose strategy changes under the same name, as a reload may do:
// for every pair of strategies, a key checked (and left with state) under the first is checked
// under the second, and every check is decided, none fails. The second reads the first's state as
// a fresh key's, or as near it as the two states' shapes allow: which of the two a store does is
// not fixed here, only that the key is neither stuck nor failing.
func StrategyChange(t *testing.T, s sluice.Store) {
	t.Helper()
	strategies := []sluice.Strategy{
		sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5},
		sluice.TokenBucket{Capacity: 5, RefillPerSec: 1},
		sluice.FixedWindow{Limit: 5, WindowMs: 60_000},
		sluice.SlidingWindow{Limit: 5, WindowMs: 60_000, Buckets: 4},
		sluice.SlidingWindowLog{Limit: 5, WindowMs: 60_000},
	}
	ctx := context.Background()
	for i, from := range strategies {
		for j, to := range strategies {
			key := fmt.Sprintf("change:%d:%d", i, j)
			before := sluice.MustPolicy("change", sluice.Limit{Strategy: from})
			after := sluice.MustPolicy("change", sluice.Limit{Strategy: to})
			for k := range 2 {
				if _, err := s.Check(ctx, t0+int64(k), before, key, 1); err != nil {
					t.Fatalf("%T: %v", from, err)
				}
			}
			for _, op := range []string{"Check", "Peek", "Forecast", "Refund", "Check"} {
				var err error
				var d sluice.Decision
				switch op {
				case "Check":
					d, err = s.Check(ctx, t0+10, after, key, 1)
				case "Peek":
					d, err = s.Peek(ctx, t0+10, after, key)
				case "Forecast":
					_, err = s.Forecast(ctx, t0+10, after, key, 1)
				case "Refund":
					err = s.Refund(ctx, t0+10, after, key, 1)
				}
				if err != nil {
					t.Errorf("%T then %T: %s: %v", from, to, op, err)
				} else if op != "Forecast" && op != "Refund" && (d.Remaining < 0 || d.Remaining > 5 || d.Limit != 5) {
					t.Errorf("%T then %T: %s: %+v", from, to, op, d)
				}
			}
			{
				if err := s.Debit(ctx, t0+11, after, key, 1); err != nil {
					t.Errorf("%T then %T: Debit: %v", from, to, err)
				}
				if _, err := s.Check(ctx, t0+12, after, key, 1); err != nil {
					t.Errorf("%T then %T: Check after Debit: %v", from, to, err)
				}
			}
		}
	}
}

// Op is one (policy, key, cost) of a CheckAll, its policy resolved, for tests that call a Store
// directly.
type Op struct {
	Policy *sluice.Policy
	Key    string
	Cost   int64
}

// Split is ops as Store.CheckAll takes them: the policies, and the items naming them.
func Split(ops ...Op) ([]*sluice.Policy, []sluice.Item) {
	ps, items := make([]*sluice.Policy, len(ops)), make([]sluice.Item, len(ops))
	for i, op := range ops {
		ps[i], items[i] = op.Policy, sluice.Item{Policy: op.Policy.Name(), Key: op.Key, Cost: op.Cost}
	}
	return ps, items
}

// CheckAll is s.CheckAll of ops.
func CheckAll(ctx context.Context, s sluice.Store, now int64, ops []Op, out []sluice.Decision) error {
	ps, items := Split(ops...)
	return s.CheckAll(ctx, now, ps, items, out)
}
