package redisstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// TestEveryScript loads every script the store can send into Redis (SCRIPT LOAD compiles it) and
// runs each once with valid arguments, on the server's clock and at an instant of the caller's,
// checking that each reply is well formed (a batch's also agrees with package algo).
func TestEveryScript(t *testing.T) {
	s, c, _ := newStore(t)
	ctx := context.Background()
	for _, now := range []int64{0, time.Now().UnixMilli()} {
		runs, err := s.ScriptRuns(now, time.Now().Add(time.Minute).UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range runs {
			sha, err := c.Do(ctx, c.B().ScriptLoad().Script(run.Source).Build()).ToString()
			if err != nil {
				t.Errorf("%s: SCRIPT LOAD: %v", run.Name, err)
				continue
			}
			if sha != run.SHA {
				t.Errorf("%s: SCRIPT LOAD answered SHA-1 %s, the store sends %s", run.Name, sha, run.SHA)
			}
			r := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(int64(len(run.Keys))).Key(run.Keys...).Arg(run.Args...).Build())
			if err := run.Check(r); err != nil {
				t.Errorf("%s at now %d: %v", run.Name, now, err)
			}
		}
		if now == 0 {
			t.Logf("%d scripts", len(runs))
		}
	}
}

// TestLargeGeneralScript runs the general script (a composite policy) on more keys than one MGET
// takes (4000), some repeated, and checks its decisions against the memory store's. Windows of a
// minute keep the keys alive however slowly the test runs.
func TestLargeGeneralScript(t *testing.T) {
	s, _, _ := newStore(t)
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	p := sluice.MustPolicy("large-composite",
		sluice.Limit{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 60_000, Burst: 2}},
		sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 60_000}})
	keys := make([]string, 9000) // 18000 steps
	for i := range keys {
		keys[i] = fmt.Sprint("k", i%5000)
	}
	for _, now := range []int64{t0, t0 + 1} {
		got, want := make([]sluice.Decision, len(keys)), make([]sluice.Decision, len(keys))
		if err := s.CheckMany(ctx, now, p, keys, 1, got); err != nil {
			t.Fatal(err)
		}
		if err := ms.CheckMany(ctx, now, p, keys, 1, want); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("now %d, key %d (%s): %+v, memory store %+v", now, i, keys[i], got[i], want[i])
			}
		}
	}
}
