// Package pgstore is sluice's shared store on PostgreSQL: many sluice servers or embedded limiters
// in front of one PostgreSQL database decide every key exactly, as if they were one process. Its
// directory is store/postgres; import it as
//
//	import pgstore "github.com/sluicehq/sluice/store/postgres"
//
// # Decisions
//
// Every operation is one statement, one round trip and one transaction: a call of the PL/pgSQL
// function <schema>.decide (see functions.sql), which computes package algo's float64
// operations in float8, in algo's order, so decisions equal the memory store's, the Redis store's
// and the conformance vectors field for field. The function returns float8s and the store
// truncates them as Redis truncates a Lua number (a cast to bigint would round).
//
// A check locks its rows with SELECT ... FOR UPDATE, decides, and writes, so concurrent checks of a
// key take turns on its row lock and none reads a state another is about to replace. A composite
// policy's limits, and all of CheckAll's items, are decided in one statement, all or nothing.
// Calls lock their rows in one order (by policy, key and limit, sorted in Go), so two multi-key
// calls never wait on each other. A key without a row is a fresh key: a check inserts the rows it
// lacks, fresh, with ON CONFLICT DO NOTHING, and locks them before deciding, so two first checks of
// one key take turns like any two checks. A check that found some of its rows and lacks others
// lets go of the ones it locked and inserts first, to keep the one order (a deadlock that rare
// out-of-order locking may still cause is rolled back whole and run again).
// Peek and Forecast read a snapshot and lock nothing.
//
// decide takes any number of groups of one size, decided one after another, each all or nothing
// (CheckMany sends one per key), so concurrent callers share statements (Config.BatchSize): the
// Checks, CheckManys and CheckAlls of concurrent callers are decided in one statement, a group
// each, as store/redis does for Redis, and so are their Peeks, Forecasts, Refunds and Debits,
// each operation in statements of its own (package internal/batch).
//
// now = 0 decides at the database server's clock (clock_timestamp(), read inside the function once
// every row is locked: one clock for the whole fleet, and a caller that waited for a row never
// decides at an instant before the caller it waited for; now() and statement_timestamp() are the
// instant the statement started, which can be). An explicit now is used as given, for replays and
// tests.
//
// # Schema and migrations
//
// Everything lives in one schema (Config.Schema, "sluice" by default), kept by package pgmigrate.
// New applies the embedded, versioned migrations the schema lacks (migrations/NNNN_name.sql: the
// tables, indexes and types), recorded in <schema>.migrations, then the functions (functions.sql,
// every function, each written once) with CREATE OR REPLACE if the file differs from the one
// recorded in <schema>.functions or a migration was applied: all in one transaction under a
// transaction-scoped advisory lock, so processes starting at once take turns and the first does
// the work. A database whose schema is newer than this build is an error matching
// sluice.ErrSchemaNewer.
//
// <schema>.limits holds a row per limit of a policy and key: (policy, key, i) is the primary key,
// state a float8[] in the strategy's layout, idle_at the epoch ms after which the row decides like
// a fresh key. A key's state is shared by every policy of the same name, as in Redis.
//
// # Idle rows
//
// A background sweep (Config.SweepInterval) deletes rows whose idle_at is more than
// Config.SweepGrace in the past, in batches of Config.SweepBatch locked with FOR UPDATE SKIP LOCKED,
// so it never waits for a check nor holds a lock for long, and it deletes only rows whose state
// decides like a fresh key's: deleting them changes no decision.
//
// idle_at is indexed so that the sweep finds idle rows without scanning the table. An update that
// changes an indexed column cannot be HOT (it writes a new entry in every index), so idle_at is
// stored rounded up to a multiple of Config.IdleRounding and is rewritten only when the new state
// goes idle after it: a busy key changes idle_at once per rounding step, and its other updates,
// changing only state, are HOT (the table's fillfactor of 80 leaves room on the page for them).
// The cost is that a row is deleted up to IdleRounding later.
//
// The rows an idle key leaves behind are therefore bounded: a key's row is deleted at most
// IdleRounding + SweepGrace + SweepInterval after it went idle (plus the time to delete the
// backlog, SweepBatch rows per statement), and the dead tuples it leaves are reclaimed by HOT
// pruning and autovacuum as usual. A replay whose explicit instants lag the clock is judged at the
// latest instant this Store was given (as the memory store does); replays should use their own
// schema, as other processes' sweeps judge by the clock.
//
// # Errors
//
// A connection failure, a timeout, a context deadline or a failing statement is an error matching
// sluice.ErrUnavailable (and the cause, with errors.Is); a call after Close is sluice.ErrClosed.
// A check that fails with ErrUnavailable may or may not have been decided and written; decide
// waits for row locks no longer than the context's deadline (lock_timeout), so a statement whose
// caller gave up does not go on to decide later. (A context canceled without a deadline leaves the
// statement to finish on the server.)
//
// A Store is safe for concurrent use.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/await"
	"github.com/sluicehq/sluice/internal/batch"
	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Schema holds the store's table and functions. Empty means "sluice".
	Schema string
	// SweepInterval is how often idle rows are deleted. 0 means 10 seconds; negative disables the
	// sweep (rows then stay until Reset).
	SweepInterval time.Duration
	// SweepGrace is how long past its idle instant a row is kept. 0 means one minute; anything under
	// a second is a second, which covers rounding at the idle instant.
	SweepGrace time.Duration
	// SweepBatch is how many rows one sweep statement deletes at most. 0 means 500.
	SweepBatch int
	// BatchSize is the most concurrent callers' groups one statement serves: Checks, CheckAlls
	// and the keys of CheckManys (of policies of as many limits) share statements, and so do
	// Peeks, Forecasts, Refunds and Debits, each with calls of its own operation. Only calls at the
	// same explicit instant share (now = 0 is one instant: the server's clock). Each caller is
	// answered as if its call had run alone, after the calls that joined before it. 0 means 128;
	// 1 sends every call on its own. A statement's cost is mostly its round trip and commit (one
	// check or 128 of a hot key: 0.8 against 1.5 ms measured with psql), so a hot key's callers
	// are best served by one statement each turn.
	BatchSize int
	// InFlight is how many statements that write (checks, refunds, debits) may run at once; the
	// others wait their turn, and calls that wait batch together. Many concurrent statements
	// locking overlapping rows spend more of the server on waiting for each other than they gain.
	// Peeks and Forecasts lock nothing and never wait for these slots; with batching on, each of
	// the two runs at most InFlight statements at once, and the calls that wait batch together.
	// 0 means 4.
	InFlight int
	// IdleRounding is the step idle_at is rounded up to, so that a busy row rewrites it (an indexed
	// column, which defeats HOT updates) at most once per step. 0 means one minute; negative stores
	// idle_at exactly.
	IdleRounding time.Duration
}

// Store is the PostgreSQL sluice.Store. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	owns   bool   // Close closes the pool: it came from Open
	schema string // where the tables are (Config.Schema)
	sql    statements
	round  int64 // idle_at rounding, ms
	grace  int64 // sweep grace, ms
	batch  int

	// given is the latest explicit instant a caller passed, 0 if none: the sweep judges rows idle
	// at no later instant, so a replay running behind the clock keeps its rows.
	given atomic.Int64
	late  atomic.Uint64 // statements that succeeded after their caller's deadline (Late)

	batchers   map[op]*batch.Batcher[*call, float64] // by operation; nil: every call runs on its own
	writers    chan struct{}                         // a token per writing statement running (Config.InFlight)
	statements atomic.Uint64                         // statements sent (decide or debit), for the tests

	closed    atomic.Bool
	closeOnce sync.Once
	stop      context.CancelFunc // stops the sweep
	done      chan struct{}      // closed when the sweep has stopped
}

var _ sluice.Store = (*Store)(nil)

// statements are the store's SQL, with the schema filled in.
type statements struct {
	decide, debit, reset, sweep string
	leases                      leaseStatements // concurrency.go
}

func newStatements(schema string) statements {
	q := pgx.Identifier{schema}.Sanitize()
	return statements{
		decide: "SELECT " + q + ".decide($1, $2, $3, $4, " + waitFor("$5") + ", $6, $7, $8, $9, $10, $11, $12, $13)" + before("$5"),
		debit:  "SELECT " + q + ".debit($1, $2, $3, $4, " + waitFor("$5") + ", $6, $7, $8, $9, $10, $11, $12, $13)" + before("$5"),
		reset:  "DELETE FROM " + q + ".limits WHERE policy = $1 AND key = $2 AND i < $3",
		// The cutoff is computed once (a stable expression), so the idle_at index serves it.
		sweep: "DELETE FROM " + q + ".limits WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + q + ".limits" +
			" WHERE idle_at < least(floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint, $1) - $2" +
			" LIMIT $3 FOR UPDATE SKIP LOCKED))",
		leases: newLeaseStatements(q),
	}
}

// Open connects to the PostgreSQL database that url names (postgres:// or postgresql://, with any
// query option pgx accepts, such as pool_max_conns), migrates it and starts the sweep. The query
// option sluice_schema sets Config.Schema. Close closes the pool.
func Open(ctx context.Context, url string) (*Store, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	cfg := Config{Schema: pgmigrate.TakeSchema(pc.ConnConfig.RuntimeParams)}
	// A connection made later (a pool growing, or PostgreSQL back from a restart) is warmed before
	// it serves; the first ones are warmed once the schema is migrated.
	sql := newStatements(or(cfg.Schema, "sluice"))
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		warm(ctx, conn, sql)
		return nil // a cold connection still decides
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, unavailable(err)
	}
	s, err := newStore(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owns = true
	warmPool(ctx, pool, sql, min(cap(s.writers)+1, int(pc.MaxConns)))
	return s, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// New returns a Store on pool, migrating the database first (waiting at most a minute). The caller
// keeps ownership of pool: Close does not close it.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return newStore(ctx, pool, cfg)
}

func newStore(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	schema := or(cfg.Schema, "sluice")
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		return nil, err
	}
	s := &Store{
		pool:   pool,
		schema: schema,
		sql:    newStatements(schema),
		round:  orDefault(cfg.IdleRounding, time.Minute).Milliseconds(),
		grace:  max(orDefault(cfg.SweepGrace, time.Minute), time.Second).Milliseconds(),
		batch:  cfg.SweepBatch,
		done:   make(chan struct{}),
	}
	if s.round < 0 {
		s.round = 0
	}
	if s.batch <= 0 {
		s.batch = 500
	}
	size, inFlight := cfg.BatchSize, cfg.InFlight
	if size == 0 {
		size = 128
	}
	if inFlight <= 0 {
		inFlight = 4
	}
	s.writers = make(chan struct{}, inFlight)
	if size > 1 {
		s.batchers = make(map[op]*batch.Batcher[*call, float64], 5)
		for _, o := range []op{opCheck, opPeek, opForecast, opRefund, opDebit} {
			s.batchers[o] = s.newBatcher(o, size, inFlight)
		}
	}
	every := orDefault(cfg.SweepInterval, 10*time.Second)
	if every < 0 {
		s.stop = func() {}
		close(s.done)
		return s, nil
	}
	sweepCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.sweepEvery(sweepCtx, every)
	return s, nil
}

// newBatcher returns the batcher of operation o: it joins concurrent callers' groups of o into
// calls of at most size groups, at most lanes calls at once, each holding a writers' slot while it
// runs if o writes. Callers join with Groups (see do), which takes the steps to add.
func (s *Store) newBatcher(o op, size, lanes int) *batch.Batcher[*call, float64] {
	cfg := batch.Config[*call, float64]{
		Max:     size,
		Lanes:   lanes,
		NewCall: func(now int64, n int) *call { return newCall(o, now, n) },
		Run:     s.run,
	}
	if o.writes() {
		cfg.Slots = s.writers
	}
	return batch.New(cfg)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Close stops the sweep, waiting for it, makes every later call return sluice.ErrClosed and, for a
// Store from Open, closes the pool. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stop()
		<-s.done
		if s.owns {
			s.pool.Close()
		}
	})
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.fail(s.pool.Ping(ctx))
}

func (s *Store) open() error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	return nil
}

func unavailable(err error) error { return storeerr.Unavailable("postgres store", err) }

// fail reports err from a call: sluice.ErrClosed if the store was closed meanwhile (its pool with
// it), else an ErrUnavailable.
func (s *Store) fail(err error) error {
	if err != nil && s.closed.Load() {
		return sluice.ErrClosed
	}
	return unavailable(err)
}

// begin checks that the store is open and notes an explicit instant for the sweep.
func (s *Store) begin(now int64) error {
	if err := s.open(); err != nil {
		return err
	}
	for now != 0 {
		g := s.given.Load()
		if g >= now || s.given.CompareAndSwap(g, now) {
			break
		}
	}
	return nil
}

// maxAttempts bounds how often a statement runs again after a deadlock or a serialization failure.
const maxAttempts = 10

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// linger is how long a statement may run past its caller's deadline before pgx gives up on it and
// drops its connection. The caller is answered at its deadline either way (retry); the statement
// goes on to the end the server gives it, having stopped waiting for locks at giveUpAt, so a
// timeout costs no connection. A new connection costs a backend's start and the first, planning,
// run of decide: tens of milliseconds, under load enough to time out the next call in turn. A
// statement still running after linger is on a server that stopped answering.
const linger = time.Second

// retry runs f, and runs it again after a serialization failure or a deadlock: both roll the
// statement back whole. When ctx has a deadline, f runs on a goroutine of its own with a context
// that ends linger after it, and retry returns once ctx is done (see linger); a statement that
// then still succeeds is counted in Late.
func (s *Store) retry(ctx context.Context, f func(qctx context.Context) error) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return s.attempts(ctx, ctx, f)
	}
	_, err := await.Call(ctx, func() { s.late.Add(1) }, func() (struct{}, error) {
		qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(linger))
		defer cancel()
		return struct{}{}, s.attempts(ctx, qctx, f)
	})
	if err != nil && err == ctx.Err() { // the caller's deadline, not the server's answer
		return unavailable(err)
	}
	return err
}

func (s *Store) attempts(ctx, qctx context.Context, f func(qctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := f(qctx)
		if err == nil || !retryable(err) || attempt == maxAttempts || ctx.Err() != nil {
			return s.fail(err)
		}
	}
}

// Late reports how many statements succeeded after their caller was answered, by its deadline,
// that the store had not answered: for a check, a decision written that its caller never saw. The
// server stops such a statement waiting for locks before the deadline (giveUpAt), so only one
// that had its locks and whose answer was slower than the margin can be late.
func (s *Store) Late() uint64 { return s.late.Load() }

// run decides c in one statement and returns its reply.
func (s *Store) run(ctx context.Context, c *call) ([]float64, error) {
	args := c.args(s.round)
	stmt := s.sql.decide
	if c.op == opDebit {
		stmt = s.sql.debit
	}
	var out []float64
	err := s.retry(ctx, func(qctx context.Context) error {
		args[4] = giveUpAt(ctx)
		s.statements.Add(1)
		return noRowsLate(s.pool.QueryRow(qctx, stmt, args...).Scan(&out))
	})
	if err != nil {
		return nil, err
	}
	if want := c.op.width() * len(c.steps); len(out) != want {
		return nil, unavailable(fmt.Errorf("decide replied %d numbers, want %d", len(out), want))
	}
	return out, nil
}

// do runs count groups of n steps of operation o, which add appends to a call (and returns it),
// and returns their part of the reply (o.width() numbers a step). With batching on
// (Config.BatchSize), the groups join a call of o's batcher beside concurrent callers' groups of
// o of the same size at the same now, p and key picking the lane, and are decided after the
// groups that joined before them, as if each call had run alone in that order; else they are a
// call of their own. A call that writes runs holding a writers' slot; a read never waits for one.
func (s *Store) do(ctx context.Context, o op, now int64, n, count int, p *sluice.Policy, key string, add func(c *call) *call) ([]float64, error) {
	b := s.batchers[o]
	if b == nil {
		c := add(newCall(o, now, n))
		if o.writes() {
			return s.write(ctx, c)
		}
		return s.run(ctx, c)
	}
	v, first, err := b.Groups(ctx, now, n, count, p, key, add)
	if err != nil {
		return nil, err
	}
	w := o.width() * n
	return v[w*first : w*(first+count)], nil
}

// write runs c, which writes, once it holds one of the Config.InFlight slots (a batcher of an
// operation that writes holds one for each call it runs).
func (s *Store) write(ctx context.Context, c *call) ([]float64, error) {
	select {
	case s.writers <- struct{}{}:
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
	defer func() { <-s.writers }()
	return s.run(ctx, c)
}

// giveUpAt is the instant (epoch ms) by which a statement must have taken its row locks, or 0 for
// no deadline: a little before ctx's deadline (an eighth of the time left, at most 50 ms, for the
// answer's way back). When the caller gives up, pgx drops the connection, but a statement waiting
// for a lock would still run on the server once the lock is free, consuming what its caller was
// told nothing about. So the server gives up first, by its own clock (the same as this process's,
// or close to it): waitFor turns the instant into the statement's lock_timeout when it starts, so
// however late it reached the server it waits no longer, and before skips it entirely if it
// arrived after that instant. A statement that has its locks by then still decides and commits,
// which takes a few milliseconds more: the margin is for that.
func giveUpAt(ctx context.Context) int64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	left := time.Until(dl)
	return max(dl.Add(-min(left/8, 50*time.Millisecond)).UnixMilli(), 1)
}

// serverMs is the server's clock in epoch ms, in SQL.
const serverMs = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

// waitFor is the lock wait, in ms, that the statement parameter at (a giveUpAt instant) leaves by
// the server's clock: at least 1, or 0 (no limit) for no instant.
func waitFor(at string) string {
	return "CASE WHEN " + at + "::bigint > 0 THEN greatest(" + at + "::bigint - " + serverMs + ", 1) ELSE 0 END"
}

// before makes a statement return no row when it reaches the server past the giveUpAt instant at.
func before(at string) string {
	return " WHERE " + at + "::bigint = 0 OR " + at + "::bigint > " + serverMs
}

// errLate is what a statement that reached the server past its instant reports: the caller's
// deadline, all but expired, as the server's clock sees it.
var errLate = fmt.Errorf("the statement reached the server after its instant to give up: %w", context.DeadlineExceeded)

func noRowsLate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errLate
	}
	return err
}

// Check implements sluice.Store: one statement decides every limit of p, all or nothing.
// Concurrent Checks, and CheckAlls and CheckManys' keys of as many limits, share statements
// (Config.BatchSize): each is still decided on its own, atomically, and answered once committed.
func (s *Store) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if err := s.begin(now); err != nil {
		return sluice.Decision{}, err
	}
	v, err := s.do(ctx, opCheck, now, len(p.Limits()), 1, p, key, func(c *call) *call { c.addPolicy(p, key, cost); return c })
	if err != nil {
		return sluice.Decision{}, err
	}
	return checked(p, cost, decisions(v)), nil
}

// CheckMany implements sluice.Store: one statement decides every key, each on its own, as a group
// of p's limits. The keys join concurrent Checks and CheckManys of policies of as many limits
// together, in one statement (Config.BatchSize).
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	if err := s.begin(now); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	n := len(p.Limits())
	v, err := s.do(ctx, opCheck, now, n, len(keys), p, keys[0], func(c *call) *call {
		for _, k := range keys {
			c.addPolicy(p, k, cost)
		}
		return c
	})
	if err != nil {
		return err
	}
	ds := decisions(v)
	for i := range keys {
		out[i] = checked(p, cost, ds[i*n:(i+1)*n])
	}
	return nil
}

// CheckAll implements sluice.Store: one statement, one transaction, all or nothing. Its steps,
// every limit of every item, are one group, which shares statements with concurrent Checks and
// CheckAlls of as many steps (Config.BatchSize), decided all or nothing as a statement of its own
// would decide it.
func (s *Store) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	if err := s.begin(now); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil
	}
	steps := 0
	for i := range items {
		steps += len(ps[i].Limits())
	}
	v, err := s.do(ctx, opCheck, now, steps, 1, ps[0], items[0].Key, func(c *call) *call {
		for i, it := range items {
			c.addPolicy(ps[i], it.Key, it.Cost)
		}
		return c
	})
	if err != nil {
		return err
	}
	checkedAll(ps, items, decisions(v), out)
	return nil
}

// Peek implements sluice.Store: one statement reads every limit of p, locking nothing. Concurrent
// Peeks of policies of as many limits share statements (Config.BatchSize), which never wait for a
// writers' slot.
func (s *Store) Peek(ctx context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	if err := s.begin(now); err != nil {
		return sluice.Decision{}, err
	}
	v, err := s.do(ctx, opPeek, now, len(p.Limits()), 1, p, key, func(c *call) *call { c.addPolicy(p, key, 1); return c })
	if err != nil {
		return sluice.Decision{}, err
	}
	return combine(decisions(v)), nil
}

// Forecast implements sluice.Store. For a composite policy it reports the limit that can spend the
// least: the smallest SpendableNow with its NextReplenishAt, and the latest FullAt. Concurrent
// Forecasts share statements as Peeks do.
func (s *Store) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	if err := s.begin(now); err != nil {
		return sluice.Forecast{}, err
	}
	v, err := s.do(ctx, opForecast, now, len(p.Limits()), 1, p, key, func(c *call) *call { c.addPolicy(p, key, cost); return c })
	if err != nil {
		return sluice.Forecast{}, err
	}
	var out sluice.Forecast
	for i := range p.Limits() {
		f := sluice.Forecast{SpendableNow: int64(v[3*i]), NextReplenishAt: int64(v[3*i+1]), FullAt: int64(v[3*i+2])}
		if i == 0 || f.SpendableNow < out.SpendableNow {
			out.SpendableNow, out.NextReplenishAt = f.SpendableNow, f.NextReplenishAt
		}
		out.FullAt = max(out.FullAt, f.FullAt)
	}
	return out, nil
}

// Refund implements sluice.Store: one statement gives cost back to every limit of p that counts
// cost; limits that count requests are left alone, and keys without a row have nothing to refund.
// Concurrent Refunds share statements (see onCostLimits).
func (s *Store) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(ctx, opRefund, now, p, key, cost)
}

// Debit implements sluice.Store: one statement charges cost to every limit of p that counts
// cost, past the limit if need be, making the rows it lacks; limits that count requests are left
// alone. Concurrent Debits share statements (see onCostLimits).
func (s *Store) Debit(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(ctx, opDebit, now, p, key, cost)
}

// onCostLimits runs operation o with cost on key under every limit of p that counts cost, in one
// statement: a group of those limits, which shares the statement with concurrent callers' groups
// of o of as many limits (Config.BatchSize), each applied after the ones before it.
func (s *Store) onCostLimits(ctx context.Context, o op, now int64, p *sluice.Policy, key string, cost int64) error {
	if err := s.begin(now); err != nil {
		return err
	}
	n := 0
	for _, l := range p.Limits() {
		if l.Unit == sluice.UnitCost {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	_, err := s.do(ctx, o, now, n, 1, p, key, func(c *call) *call {
		for i, l := range p.Limits() {
			if l.Unit == sluice.UnitCost {
				c.add(p, key, i, cost)
			}
		}
		return c
	})
	return err
}

// Reset implements sluice.Store: it deletes the key's row for every limit of p.
func (s *Store) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.retry(ctx, func(qctx context.Context) error {
		_, err := s.pool.Exec(qctx, s.sql.reset, p.Name(), textOf(key), len(p.Limits()))
		return err
	})
}

// DefaultTimeout is the store timeout sluice serve gives the store's calls when its config sets
// none: PostgreSQL commits each decision to disk, and a hot key's checks queue for its row, batch
// after batch, so its answers under load take longer than Redis's. docs/operations.md has the
// measurement behind it.
const DefaultTimeout = 500 * time.Millisecond

// DefaultTimeout returns the package's DefaultTimeout, for sluice serve.
func (s *Store) DefaultTimeout() time.Duration { return DefaultTimeout }
