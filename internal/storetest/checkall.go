package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
)

// OneItemCheckAll checks that Limiter.CheckAll of one item, which s decides as a Check, answers what
// s.CheckAll of that item answers: every policy of Policies, composite ones included, from random
// states at fixed instants, denials included. Each answer path has a key of its own, so both see
// the same history.
func OneItemCheckAll(t *testing.T, s sluice.Store) {
	t.Helper()
	lim, err := sluice.New(s, Policies...)
	if err != nil {
		t.Fatal(err)
	}
	for pi, p := range Policies {
		t.Run(p.Name(), func(t *testing.T) {
			ctx := context.Background()
			r := rand.New(rand.NewPCG(uint64(pi), 7))
			viaLimiter, viaStore := "one-item-lim-"+p.Name(), "one-item-store-"+p.Name()
			now, denials := t0, 0
			for step := range 40 {
				now += r.Int64N(150)
				cost := 1 + r.Int64N(min(3, p.MaxCost()))
				got, err := lim.CheckAll(sluice.WithNow(ctx, now), sluice.Item{Policy: p.Name(), Key: viaLimiter, Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				out := make([]sluice.Decision, 1)
				if err := s.CheckAll(ctx, now, []*sluice.Policy{p}, []sluice.Item{{Policy: p.Name(), Key: viaStore, Cost: cost}}, out); err != nil {
					t.Fatal(err)
				}
				if want := sluice.Combine(out); !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d at %+d, cost %d:\nLimiter.CheckAll: %+v\nStore.CheckAll:   %+v", step, now-t0, cost, got, want)
				}
				if !got.Allowed {
					denials++
				}
			}
			if denials == 0 {
				t.Fatal("no check was denied: the denials' answers went untested")
			}
		})
	}
}

// ConcurrentCheckAll checks that CheckAlls of many concurrent callers at one instant, however s
// coalesces them, admit exactly what they would one at a time: a window of limit units on a hot
// key admits limit of them, never more, and an all-or-nothing CheckAll that a second item denies
// consumes nothing of its first.
func ConcurrentCheckAll(t *testing.T, s sluice.Store) {
	t.Helper()
	const limit, callers, each = 100, 64, 4
	window := sluice.MustPolicy("concurrent-window", sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 1e9}})
	shut := sluice.MustPolicy("concurrent-shut", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1e9}})
	lim, err := sluice.New(s, window, shut)
	if err != nil {
		t.Fatal(err)
	}
	ctx := sluice.WithNow(context.Background(), t0)
	// Spend shut's one unit, so that every CheckAll holding it is denied.
	if d, err := lim.Check(ctx, shut.Name(), "shut", 1); err != nil || !d.Allowed {
		t.Fatalf("Check(shut): %+v, %v", d, err)
	}
	cases := []struct {
		name  string
		items func(i int) []sluice.Item
		want  int64 // admitted CheckAlls
	}{
		{"oneItem", func(int) []sluice.Item { return []sluice.Item{{Policy: window.Name(), Key: "hot1", Cost: 1}} }, limit},
		{"twoItems", func(i int) []sluice.Item {
			return []sluice.Item{{Policy: window.Name(), Key: "hot2", Cost: 1}, {Policy: window.Name(), Key: fmt.Sprint("cold", i%8), Cost: 1}}
		}, limit},
		{"deniedBySecond", func(int) []sluice.Item {
			return []sluice.Item{{Policy: window.Name(), Key: "hot3", Cost: 1}, {Policy: shut.Name(), Key: "shut", Cost: 1}}
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			var n int64
			var firstErr error
			for i := range callers {
				wg.Go(func() {
					for range each {
						d, err := lim.CheckAll(ctx, c.items(i)...)
						mu.Lock()
						if err != nil && firstErr == nil {
							firstErr = err
						}
						if err == nil && d.Allowed {
							n++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if firstErr != nil {
				t.Fatal(firstErr)
			}
			if n != c.want {
				t.Fatalf("%d of %d CheckAlls admitted, want %d", n, callers*each, c.want)
			}
			// What is left is what the admitted CheckAlls left: nothing of a denied one was spent.
			first := c.items(0)[0]
			left := limit - c.want
			if d, err := s.Peek(ctx, t0, window, first.Key); err != nil || d.Remaining != left {
				t.Fatalf("Peek(%s) after: %+v, %v; want remaining %d", first.Key, d, err, left)
			}
		})
	}
}
