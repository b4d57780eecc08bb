package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

const t0 int64 = 1_700_000_000_000

// dbURL is the test database: SLUICE_POSTGRES_URL, else a local server.
func dbURL() string {
	if u := os.Getenv("SLUICE_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

// testPool connects to the test database. Without one the test is skipped, or fails under CI.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL())
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		msg := fmt.Sprintf("no PostgreSQL at %s (set SLUICE_POSTGRES_URL or start postgres): %v", dbURL(), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(pool.Close)
	return pool
}

var schemas atomic.Int64

// freshSchema names a schema no other test or run uses, and drops it when the test ends.
func freshSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("sluice_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, schemas.Add(1))
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// newStore returns a store in a fresh schema, the pool it uses and the quoted schema.
func newStore(t *testing.T, cfg pgstore.Config) (*pgstore.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool := testPool(t)
	cfg.Schema = freshSchema(t, pool)
	s, err := pgstore.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, pool, pgx.Identifier{cfg.Schema}.Sanitize()
}

// count runs a counting query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// lockRow holds key's rows locked in a transaction of its own, as a check in progress does, until
// the returned function (or the test's end) releases them.
func lockRow(t *testing.T, pool *pgxpool.Pool, q, key string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock = func() { tx.Rollback(ctx) }
	t.Cleanup(unlock)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+q+".limits WHERE key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	return unlock
}

func TestConformanceVectors(t *testing.T) {
	t.Parallel()
	// No sweep: the vectors replay instants years apart, and a sweep judging by the clock would
	// delete a case's rows between its steps (see Config.SweepInterval).
	s, _, _ := newStore(t, pgstore.Config{SweepInterval: -1})
	storetest.Vectors(t, s)
}

func TestKeysApart(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.KeysApart(t, s)
}

func TestStrategyChange(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.StrategyChange(t, s)
}

// exhausting strategies admit 1000 units at one instant and replenish nothing soon after.
var exhausting = []struct {
	name     string
	strategy sluice.Strategy
}{
	{"gcra", sluice.GCRA{Limit: 1, PeriodMs: 1e9, Burst: 1000}},
	{"tokenBucket", sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1e-6}},
	{"fixedWindow", sluice.FixedWindow{Limit: 1000, WindowMs: 1e9}},
	{"slidingWindow", sluice.SlidingWindow{Limit: 1000, WindowMs: 1e9, Buckets: 10}},
	{"slidingWindowLog", sluice.SlidingWindowLog{Limit: 1000, WindowMs: 1e9}},
}

// hammer runs goroutines × checks Checks of cost 1 on one key of p at now and returns how many
// were admitted.
func hammer(t *testing.T, s sluice.Store, p *sluice.Policy, now int64, goroutines, checks int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range checks {
				d, err := s.Check(context.Background(), now, p, "hot", 1)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// TestConcurrentChecksAreExact races 64 goroutines on one key, which starts without a row: the
// first checks race to insert it, the rest queue on its row lock.
func TestConcurrentChecksAreExact(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	const goroutines, checks = 64, 50
	for _, tt := range exhausting {
		t.Run(tt.name, func(t *testing.T) {
			p := sluice.MustPolicy("exact-"+tt.name, sluice.Limit{Strategy: tt.strategy})
			if got := hammer(t, s, p, t0, goroutines, checks); got != 1000 {
				t.Errorf("admitted %d of %d checks, want exactly 1000", got, goroutines*checks)
			}
		})
	}
}

// TestFirstChecksAmongExistingRows races CheckManys over keys of which half have rows and half do
// not: a call that holds the rows it found and lacks others starts over, inserting first, and
// every key still admits exactly its capacity.
func TestFirstChecksAmongExistingRows(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	ctx := context.Background()
	const capacity, rounds, perRound, goroutines, checks = 10, 8, 20, 16, 3
	p := sluice.MustPolicy("mixed", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: capacity, RefillPerSec: 1e-6}})
	// Each round has its own keys; the even ones have rows before the race starts.
	keys := make([][]string, rounds)
	admitted := make([][perRound]atomic.Int64, rounds)
	for r := range keys {
		for i := range perRound {
			keys[r] = append(keys[r], fmt.Sprintf("r%d:k%02d", r, i))
			if i%2 == 0 {
				if d, err := s.Check(ctx, t0, p, keys[r][i], 1); err != nil || !d.Allowed {
					t.Fatalf("first check of %s: %+v, %v", keys[r][i], d, err)
				}
				admitted[r][i].Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			out := make([]sluice.Decision, perRound)
			for r := range rounds {
				for range checks {
					if err := s.CheckMany(ctx, t0, p, keys[r], 1, out); err != nil {
						t.Errorf("goroutine %d, round %d: %v", g, r, err)
						return
					}
					for i, d := range out {
						if d.Allowed {
							admitted[r][i].Add(1)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	for r := range keys {
		for i, k := range keys[r] {
			if got := admitted[r][i].Load(); got != capacity {
				t.Errorf("%s admitted %d, want exactly %d", k, got, capacity)
			}
		}
	}
}

// TestCheckAllLoginPair is the login pair: once an account has spent its 5 logins, attempts checked
// with CheckAll against the IP and the account spend nothing of the IP's budget.
func TestCheckAllLoginPair(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	ctx := context.Background()
	ip := sluice.MustPolicy("login-ip", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 50, RefillPerSec: 50.0 / 900}})
	account := sluice.MustPolicy("login-account", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 5.0 / 900}})
	ops := []storetest.Op{{Policy: ip, Key: "1.2.3.4", Cost: 1}, {Policy: account, Key: "asha", Cost: 1}}
	for i := range 5 {
		out := make([]sluice.Decision, 2)
		if err := storetest.CheckAll(ctx, s, t0, ops, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("login %d: %+v", i, out)
		}
	}
	// Ten more attempts at once: each is denied by the account and consumes nothing.
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			out := make([]sluice.Decision, 2)
			if err := storetest.CheckAll(ctx, s, t0+1000, ops, out); err != nil {
				t.Error(err)
				return
			}
			if !out[0].Allowed || out[1].Allowed {
				t.Errorf("attempt %d: %+v, want the IP allowing and the account denying", i, out)
			}
		})
	}
	wg.Wait()
	if d, err := s.Peek(ctx, t0+1000, ip, "1.2.3.4"); err != nil || d.Remaining != 45 {
		t.Errorf("IP after 5 logins and 10 denied attempts: %+v, %v; want exactly 45 remaining", d, err)
	}
}

func TestCheckManyMatchesCheck(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	p := sluice.MustPolicy("many", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 1}})
	keys := []string{"a", "b", "a", "c", "a"}
	out := make([]sluice.Decision, len(keys))
	if err := s.CheckMany(context.Background(), t0, p, keys, 1, out); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, true, false}
	for i, d := range out {
		if d.Allowed != want[i] {
			t.Errorf("key %d (%s): allowed %v, want %v", i, keys[i], d.Allowed, want[i])
		}
	}
	if out[4].RetryAfterMs != 1000 || out[4].DeniedBy != 0 {
		t.Errorf("third check of a: %+v, want retryAfterMs 1000 deniedBy 0", out[4])
	}
}

func TestServerClock(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	p := sluice.MustPolicy("clock", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}})
	before := time.Now().UnixMilli()
	d, err := s.Check(context.Background(), 0, p, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The window ends within a second of the server clock; allow a second of skew either side.
	if d.ResetAt < before-1000 || d.ResetAt > before+3000 {
		t.Errorf("resetAt %d not near the clock %d", d.ResetAt, before)
	}
	out := make([]sluice.Decision, 2)
	if err := s.CheckMany(context.Background(), 0, p, []string{"k", "k"}, 1, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || !out[1].Allowed || out[1].Remaining != out[0].Remaining-1 {
		t.Errorf("CheckMany at the server clock: %+v", out)
	}
}

// TestIdleAt checks what a write records: idle_at rounded up to IdleRounding, moved only when the
// state goes idle later, and a denied check writes nothing.
func TestIdleAt(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{SweepInterval: -1, IdleRounding: 10 * time.Second})
	ctx := context.Background()
	p := sluice.MustPolicy("idle", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}})
	idleAt := func() int64 {
		var v int64
		if err := pool.QueryRow(ctx, "SELECT idle_at FROM "+q+".limits WHERE policy = 'idle' AND key = 'k'").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	start := t0 - t0%10_000 + 1 // just past a multiple of 10 s
	if _, err := s.Check(ctx, start, p, "k", 1); err != nil {
		t.Fatal(err)
	}
	if got, want := idleAt(), start-1+10_000; got != want {
		t.Errorf("idle_at %d, want the TAT %d rounded up to %d", got, start+100, want)
	}
	if _, err := s.Check(ctx, start+5000, p, "k", 5); err != nil { // TAT start+5500: same step
		t.Fatal(err)
	}
	if got, want := idleAt(), start-1+10_000; got != want {
		t.Errorf("idle_at %d after a check within the step, want it unchanged at %d", got, want)
	}
	if d, _ := s.Check(ctx, start+9990, p, "k", 1); !d.Allowed { // TAT start+10090: the next step
		t.Fatal("check denied")
	}
	if got, want := idleAt(), start-1+20_000; got != want {
		t.Errorf("idle_at %d, want the next step %d", got, want)
	}
	big := sluice.MustPolicy("big", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})
	if d, _ := s.Check(ctx, start, big, "k", 1); !d.Allowed {
		t.Fatal("check denied")
	}
	if _, err := s.Check(ctx, start, big, "new", 2); err != nil {
		t.Fatal(err)
	}
	// A first check makes its row before it decides; denied, it leaves it fresh and idle at once,
	// for the sweep.
	if n := count(t, pool, "SELECT count(*) FROM "+q+".limits WHERE key = 'new' AND state = '{}' AND idle_at = 0"); n != 1 {
		t.Errorf("a denied first check left %d fresh, idle rows, want 1", n)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{})
	ctx := context.Background()
	p := sluice.MustPolicy("reset",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}},
		sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}})
	if d, _ := s.Check(ctx, t0, p, "k", 1); !d.Allowed {
		t.Fatal("first check denied")
	}
	if d, _ := s.Check(ctx, t0, p, "k", 1); d.Allowed {
		t.Fatal("second check allowed")
	}
	if err := s.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".limits"); n != 0 {
		t.Errorf("%d rows after Reset, want 0", n)
	}
	if d, err := s.Check(ctx, t0, p, "k", 1); err != nil || !d.Allowed {
		t.Errorf("check after Reset = %+v, %v", d, err)
	}
}

// proxy forwards TCP connections to the test database until cut, which closes its listener and
// every connection, as a database going away does.
type proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) cut() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// closedPort returns a local address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := pgstore.Open(ctx, "postgres://postgres@"+closedPort(t)+"/test?connect_timeout=1"); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Open of a closed port: error %v, want sluice.ErrUnavailable", err)
	}

	// A store whose database goes away after it started. (The URL names only the proxy: a config
	// edited after parsing would keep the database's address as a fallback.)
	u, err := url.Parse(dbURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	px := newProxy(t, target)
	u.Host = px.l.Addr().String()
	viaProxy, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	s, err := pgstore.New(viaProxy, pgstore.Config{Schema: freshSchema(t, pool)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := sluice.MustPolicy("down", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	if _, err := s.Check(ctx, t0, p, "k", 1); err != nil {
		t.Fatalf("Check before the cut: %v", err)
	}
	px.cut()
	tests := []struct {
		name string
		call func() error
	}{
		{"Ping", func() error { return s.Ping(ctx) }},
		{"Check", func() error { _, err := s.Check(ctx, t0, p, "k", 1); return err }},
		{"Check at server clock", func() error { _, err := s.Check(ctx, 0, p, "k", 1); return err }},
		{"CheckMany", func() error { return s.CheckMany(ctx, t0, p, []string{"a", "b"}, 1, make([]sluice.Decision, 2)) }},
		{"CheckAll", func() error {
			return storetest.CheckAll(ctx, s, t0, []storetest.Op{{Policy: p, Key: "a", Cost: 1}}, make([]sluice.Decision, 1))
		}},
		{"Peek", func() error { _, err := s.Peek(ctx, t0, p, "k"); return err }},
		{"Forecast", func() error { _, err := s.Forecast(ctx, t0, p, "k", 1); return err }},
		{"Refund", func() error { return s.Refund(ctx, t0, p, "k", 1) }},
		{"Reset", func() error { return s.Reset(ctx, p, "k") }},
		{"Sweep", func() error { _, err := s.Sweep(ctx); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, sluice.ErrUnavailable) {
				t.Errorf("error %v, want sluice.ErrUnavailable", err)
			}
		})
	}
}

func TestDeadlineIsUnavailable(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	p := sluice.MustPolicy("deadline", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := s.Check(ctx, t0, p, "k", 1)
	if !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want sluice.ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
}

// TestInFlightBoundsWriters holds the only writing slot with a check waiting for a locked row: a
// second check waits in the store, never reaching the server, and gives up at its deadline, while
// a peek, which writes nothing, still runs.
func TestInFlightBoundsWriters(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{InFlight: 1, BatchSize: 1})
	ctx := context.Background()
	p, unlock, first := holdWritersSlot(t, s, pool, q)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := s.Check(short, t0, p, "other", 1); !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second check with the slot taken: %v, want sluice.ErrUnavailable and context.DeadlineExceeded", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+q+".limits WHERE key = 'other'"); n != 0 {
		t.Errorf("the second check reached the server: %d rows for its key", n)
	}
	if d, err := s.Peek(ctx, t0, p, "other"); err != nil || d.Remaining != 5 {
		t.Errorf("a peek with the slot taken: %+v, %v; want 5 remaining", d, err)
	}
	unlock()
	if err := <-first; err != nil {
		t.Errorf("the check that held the slot: %v", err)
	}
}

// holdWritersSlot takes the only writers' slot of s (Config.InFlight 1) with a check of key "held"
// waiting for its row, locked by the test: it returns the check's policy, the unlock that lets it
// finish, and where its error arrives then.
func holdWritersSlot(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, q string) (*sluice.Policy, func(), <-chan error) {
	t.Helper()
	ctx := context.Background()
	p := sluice.MustPolicy("slots", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 1}})
	if _, err := s.Check(ctx, t0, p, "held", 1); err != nil {
		t.Fatal(err)
	}
	unlock := lockRow(t, pool, q, "held")
	first := make(chan error, 1)
	go func() {
		_, err := s.Check(ctx, t0, p, "held", 1)
		first <- err
	}()
	for count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", q) == 0 {
		time.Sleep(time.Millisecond)
	}
	return p, unlock, first
}

// TestDeadlineWhileWaiting gives up on a check queued behind a row lock another transaction holds:
// the server stops waiting before the caller does (its lock timeout, 55P03, unless the machine is
// so loaded that the answer comes after the caller's own deadline), so the check is not decided
// afterwards, or if it is, Late counts it: a check made once the lock is free, which queues behind
// anything still running on the row, finds one unit spent before it, plus any decided late.
func TestDeadlineWhileWaiting(t *testing.T) {
	t.Parallel()
	s, pool, q := newStore(t, pgstore.Config{})
	ctx := context.Background()
	p := sluice.MustPolicy("wait", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 5, RefillPerSec: 1}})
	if _, err := s.Check(ctx, t0, p, "k", 1); err != nil {
		t.Fatal(err)
	}
	unlock := lockRow(t, pool, q, "k")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := s.Check(short, t0, p, "k", 1)
	var pe *pgconn.PgError
	if !errors.Is(err, sluice.ErrUnavailable) ||
		!(errors.As(err, &pe) && pe.Code == "55P03" || errors.Is(err, context.DeadlineExceeded)) {
		t.Errorf("error %v, want sluice.ErrUnavailable from the server's lock timeout (55P03)", err)
	}
	unlock()
	d, err := s.Check(ctx, t0, p, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// On a machine too busy to run the server's lock timeout in time, the lock can be granted
	// after it: then the abandoned check is decided, and Late counts it (its reply may still be on
	// its way back when this check's comes).
	deadline := time.Now().Add(2 * time.Second)
	for d.Remaining != 3-int64(s.Late()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d.Remaining != 3-int64(s.Late()) {
		t.Errorf("a check after the abandoned one: %+v; want 3 remaining, less the %d decided late", d, s.Late())
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	s.Close()
	s.Close() // idempotent
	p := sluice.MustPolicy("closed", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}})
	ctx := context.Background()
	calls := map[string]func() error{
		"Check":  func() error { _, err := s.Check(ctx, t0, p, "k", 1); return err },
		"Peek":   func() error { _, err := s.Peek(ctx, t0, p, "k"); return err },
		"Reset":  func() error { return s.Reset(ctx, p, "k") },
		"Ping":   func() error { return s.Ping(ctx) },
		"Sweep":  func() error { _, err := s.Sweep(ctx); return err },
		"Refund": func() error { return s.Refund(ctx, t0, p, "k", 1) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("%s: error %v, want sluice.ErrClosed", name, err)
		}
	}
}

// TestOpen opens a store from a URL with pool options and a schema, and Close closes its pool.
func TestOpen(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	s, err := pgstore.Open(context.Background(), dbURL()+"?pool_max_conns=2&sluice_schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := sluice.MustPolicy("open", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}})
	if d, err := s.Check(context.Background(), t0, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Check = %+v, %v", d, err)
	}
	if n := count(t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".limits"); n != 1 {
		t.Errorf("%d rows in schema %s, want 1", n, schema)
	}
	s.Close()
	if _, err := s.Check(context.Background(), t0, p, "k", 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Check after Close: %v, want sluice.ErrClosed", err)
	}
}
