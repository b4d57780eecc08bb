package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// coalesceConfigs are the stores the coalescing tests run on: batching on with the default lanes
// and slots, on with one of each (every call waiting for the one in flight), and off.
var coalesceConfigs = []struct {
	name    string
	cfg     pgstore.Config
	batched bool
}{
	{"batched", pgstore.Config{SweepInterval: -1}, true},
	{"oneLane", pgstore.Config{SweepInterval: -1, InFlight: 1}, true},
	{"unbatched", pgstore.Config{SweepInterval: -1, BatchSize: 1}, false},
}

// TestBatchedCheckAll runs the shared stores' CheckAll tests with multi-item CheckAlls batched
// beside concurrent callers' (and, to compare, with batching off): a one-item CheckAll answers
// as a Check does, a denied group spends nothing, and 64 concurrent callers of a hot key are
// admitted exactly, in far fewer statements than calls when batched.
func TestBatchedCheckAll(t *testing.T) {
	t.Parallel()
	for _, c := range coalesceConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			t.Run("OneItemCheckAll", func(t *testing.T) {
				s, _, _ := newStore(t, c.cfg)
				storetest.OneItemCheckAll(t, s)
			})
			t.Run("DeniedGroups", func(t *testing.T) {
				s, _, _ := newStore(t, c.cfg)
				storetest.DeniedGroups(t, s)
			})
			t.Run("ConcurrentCheckAll", func(t *testing.T) {
				s, _, _ := newStore(t, c.cfg)
				storetest.ConcurrentCheckAll(t, s)
				// Three cases of 64 callers × 4 CheckAlls, a Check and a Peek per case.
				const calls = 3*64*4 + 1 + 3
				got := s.Statements()
				t.Logf("%d calls in %d statements", calls, got)
				if c.batched && got > calls/2 {
					t.Errorf("%d statements for %d calls: concurrent CheckAlls did not share statements", got, calls)
				}
				if !c.batched && got < calls {
					t.Errorf("%d statements for %d calls with batching off, want one a call at least", got, calls)
				}
			})
		})
	}
}

// TestCoalesced checks that concurrent CheckManys, Peeks, Forecasts, Debits and Refunds answer what
// each would alone (storetest.Coalesced): with batching on, in batches smaller than the callers
// and one statement in flight, and off.
func TestCoalesced(t *testing.T) {
	t.Parallel()
	configs := []struct {
		name string
		cfg  pgstore.Config
	}{
		{"batched", pgstore.Config{}},
		{"smallBatches", pgstore.Config{BatchSize: 4, InFlight: 1}},
		{"unbatched", pgstore.Config{BatchSize: 1}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, _, _ := newStore(t, c.cfg)
			storetest.Coalesced(t, s)
		})
	}
}

// coalesceNow is the instant of the concurrent calls; their keys' history is at t0.
const coalesceNow = t0 + 1500

var (
	// coalesceComp counts cost in tokens and requests in a window: a Refund or a Debit of it is a
	// group of one step, a check a group of two.
	coalesceComp = sluice.MustPolicy("coalesce-comp",
		sluice.Limit{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 10, RefillPerSec: 0.5}},
		sluice.Limit{Name: "requests", Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}, Unit: sluice.UnitRequest})
	coalesceOne = sluice.MustPolicy("coalesce-one", sluice.Limit{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 3}})
)

// coalesceOps are the calls TestConcurrentCallsShareStatements makes concurrently: each returns its
// answer as text, and the keys whose state it reads or writes.
var coalesceOps = []struct {
	name string
	call func(ctx context.Context, s sluice.Store, key string, cost int64) string
	keys func(key string) []string
}{
	{"checkAll", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		out := make([]sluice.Decision, 2)
		err := s.CheckAll(ctx, coalesceNow, []*sluice.Policy{coalesceComp, coalesceOne},
			[]sluice.Item{{Policy: coalesceComp.Name(), Key: key, Cost: cost}, {Policy: coalesceOne.Name(), Key: key, Cost: 1}}, out)
		return fmt.Sprintf("%+v %v", out, err)
	}, func(key string) []string { return []string{key} }},
	{"checkMany", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		out := make([]sluice.Decision, 4)
		err := s.CheckMany(ctx, coalesceNow, coalesceComp, []string{key, key + "/b", key, key + "/c"}, cost, out)
		return fmt.Sprintf("%+v %v", out, err)
	}, func(key string) []string { return []string{key, key + "/b", key + "/c"} }},
	{"peek", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		d, err := s.Peek(ctx, coalesceNow, coalesceComp, key)
		return fmt.Sprintf("%+v %v", d, err)
	}, func(key string) []string { return []string{key} }},
	{"forecast", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		f, err := s.Forecast(ctx, coalesceNow, coalesceComp, key, cost)
		return fmt.Sprintf("%+v %v", f, err)
	}, func(key string) []string { return []string{key} }},
	{"refund", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		return fmt.Sprint(s.Refund(ctx, coalesceNow, coalesceComp, key, cost))
	}, func(key string) []string { return []string{key} }},
	{"debit", func(ctx context.Context, s sluice.Store, key string, cost int64) string {
		return fmt.Sprint(s.Debit(ctx, coalesceNow, coalesceComp, key, cost))
	}, func(key string) []string { return []string{key} }},
}

// TestConcurrentCallsShareStatements makes 64 concurrent calls of each operation while the table
// is locked, so that the first statements wait and the other calls queue behind them, and checks
// that batched they share statements (far fewer than 64), that off they do not, and that every
// caller gets the answer the memory store gives to the same calls one at a time. With keys of
// their own, each caller's answer is the memory store's for its call; on one key, the callers'
// answers are those of the same calls made one after another, in some order. Either way the
// keys' states afterwards are the memory store's.
func TestConcurrentCallsShareStatements(t *testing.T) {
	t.Parallel()
	const callers = 64
	modes := []struct {
		name   string
		shared bool // every caller the same call on one key
	}{
		{"ownKeys", false},
		{"oneKey", true},
	}
	for _, c := range coalesceConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, _, q := newStore(t, c.cfg)
			ms := memory.New(memory.Config{SweepInterval: -1})
			defer ms.Close()
			lock, watch := testConn(t), testConn(t)
			for _, op := range coalesceOps {
				for _, m := range modes {
					t.Run(op.name+"/"+m.name, func(t *testing.T) {
						ctx := context.Background()
						key := func(i int) string {
							if m.shared {
								return op.name + "/" + m.name + "/hot"
							}
							return fmt.Sprint(op.name, "/", m.name, "/", i)
						}
						cost := func(i int) int64 {
							if m.shared {
								return 2
							}
							return 1 + int64(i%3)
						}
						// A history at t0 on both stores: from untouched keys to denied ones.
						for i := range callers {
							if m.shared && i > 0 {
								break
							}
							for j := range i % 4 {
								for _, p := range []*sluice.Policy{coalesceComp, coalesceOne} {
									for _, st := range []sluice.Store{s, ms} {
										if _, err := st.Check(ctx, t0, p, key(i), 1+int64(j%3)); err != nil {
											t.Fatal(err)
										}
									}
								}
							}
						}
						want := make([]string, callers)
						for i := range callers {
							want[i] = op.call(ctx, ms, key(i), cost(i))
						}

						before := s.Statements()
						unlock := lockTable(t, lock, q)
						got := make([]string, callers)
						var started atomic.Int64
						var wg sync.WaitGroup
						for i := range callers {
							wg.Go(func() {
								started.Add(1)
								got[i] = op.call(ctx, s, key(i), cost(i))
							})
						}
						waitLockWait(t, watch, q)
						for started.Load() < callers {
							time.Sleep(time.Millisecond)
						}
						time.Sleep(50 * time.Millisecond) // for the last callers to join a batch
						unlock()
						wg.Wait()
						statements := s.Statements() - before

						t.Logf("%d calls in %d statements", callers, statements)
						switch {
						case c.batched && statements > callers/4:
							t.Errorf("%d statements for %d concurrent calls: they did not share statements", statements, callers)
						case !c.batched && statements < callers:
							t.Errorf("%d statements for %d calls with batching off, want one a call", statements, callers)
						}
						if m.shared {
							slices.Sort(got)
							slices.Sort(want)
						}
						for i := range callers {
							if got[i] != want[i] {
								t.Errorf("caller %d (%s):\nstore:  %s\nmemory: %s", i, key(i), got[i], want[i])
							}
						}
						for i := range callers {
							if m.shared && i > 0 {
								break
							}
							for _, k := range op.keys(key(i)) {
								for _, p := range []*sluice.Policy{coalesceComp, coalesceOne} {
									d1, err1 := s.Peek(ctx, coalesceNow, p, k)
									d2, err2 := ms.Peek(ctx, coalesceNow, p, k)
									if g, w := fmt.Sprintf("%+v %v", d1, err1), fmt.Sprintf("%+v %v", d2, err2); g != w {
										t.Errorf("after: Peek(%s, %s):\nstore:  %s\nmemory: %s", p.Name(), k, g, w)
									}
								}
							}
						}
					})
				}
			}
		})
	}
}

// TestBatchedReadsTakeNoWritersSlot holds the only writers' slot with a check waiting for a locked
// row: a Peek and a Forecast, batched or not, still run, as they wait for no slot.
func TestBatchedReadsTakeNoWritersSlot(t *testing.T) {
	t.Parallel()
	for _, c := range coalesceConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := c.cfg
			cfg.InFlight = 1
			s, pool, q := newStore(t, cfg)
			ctx := context.Background()
			p, unlock, first := holdWritersSlot(t, s, pool, q)
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if d, err := s.Peek(short, t0, p, "held"); err != nil || d.Remaining != 4 {
				t.Errorf("a peek with the slot taken: %+v, %v; want 4 remaining", d, err)
			}
			if f, err := s.Forecast(short, t0, p, "other", 1); err != nil || f.SpendableNow != 5 {
				t.Errorf("a forecast with the slot taken: %+v, %v; want 5 spendable", f, err)
			}
			unlock()
			if err := <-first; err != nil {
				t.Errorf("the check that held the slot: %v", err)
			}
		})
	}
}

// testConn is a connection of the test's own, outside the store's pool, so that it answers while
// every connection of the pool waits.
func testConn(t *testing.T) *pgx.Conn {
	t.Helper()
	testPool(t) // skips, or fails under CI, without a database
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// lockTable locks the store's table (q is its schema) on conn against every statement, reads
// included, until the returned function (or the test's end) lets go.
func lockTable(t *testing.T, conn *pgx.Conn, q string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+q+".limits IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return unlock
}

// waitLockWait returns once a statement on schema q waits for a lock, as conn sees.
func waitLockWait(t *testing.T, conn *pgx.Conn, q string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement waits for the locked table")
		}
		time.Sleep(time.Millisecond)
	}
}
