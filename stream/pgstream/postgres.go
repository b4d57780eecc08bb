// Package pgstream is stream mode's engine on PostgreSQL: a stream.Backend whose log, query state
// and outputs are rows of its own schema, so that processing survives crashes and restarts and
// many processes can share the work. The model, the guarantees and the errors are package
// stream's; this package is apart so that programs using only stream's types, or its memory
// engine, do not link a PostgreSQL driver.
//
// Process is one transaction: lock the query's row, read a batch of the log after its offset,
// load the open windows the batch may touch, fold with stream.Aggregator, then write the changed
// windows, the closed ones, their decisions and the new offset, and commit. Consumer groups keep
// a row per partition holding the committed offset and the lease, and lease expiry is on the
// database clock, so every process and host agrees on it.
package pgstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/internal/storeerr"
	"github.com/sluicehq/sluice/stream"
)

// defaultSchema holds the engine's tables when Config.Schema is empty.
const defaultSchema = "sluice_stream"

// Config configures an Engine. The zero value is ready to use.
type Config struct {
	// Schema holds the engine's tables. Empty means "sluice_stream".
	Schema string
}

// Engine is the Backend on PostgreSQL. It is safe for concurrent use, also by many processes on
// one database: processors of one query take turns on its row lock.
type Engine struct {
	pool   *pgxpool.Pool
	owns   bool // Close closes the pool: it came from Open
	schema string
	q      string // schema, quoted
	closed atomic.Bool
	// skew is added to the database clock in lease arithmetic: tests move it forward to expire
	// leases without waiting. It is always 0 otherwise.
	skew atomic.Int64
}

var _ stream.Backend = (*Engine)(nil)

// Open connects to the database url names (any option pgx accepts; the option
// sluice_schema sets Config.Schema) and migrates it. Close closes the pool.
func Open(ctx context.Context, url string) (*Engine, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	cfg := Config{Schema: pgmigrate.TakeSchema(pc.ConnConfig.RuntimeParams)}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, unavailable(err)
	}
	e, err := newEngine(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	e.owns = true
	return e, nil
}

// New returns an Engine on pool, migrating first (for at most a minute). The caller keeps the
// pool: Close does not close it.
func New(pool *pgxpool.Pool, cfg Config) (*Engine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return newEngine(ctx, pool, cfg)
}

func newEngine(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Engine, error) {
	schema := cfg.Schema
	if schema == "" {
		schema = defaultSchema
	}
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		return nil, err
	}
	return &Engine{pool: pool, schema: schema, q: pgx.Identifier{schema}.Sanitize()}, nil
}

// Close makes later calls return sluice.ErrClosed and, for an Engine from Open, closes
// the pool. It is idempotent.
func (e *Engine) Close() error {
	if !e.closed.Swap(true) && e.owns {
		e.pool.Close()
	}
	return nil
}

func unavailable(err error) error { return storeerr.Unavailable("stream engine", err) }

// fail classifies err: the package's own errors as they are, the rest ErrUnavailable (or
// ErrClosed once closed).
func (e *Engine) fail(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, stream.ErrQueryChanged), errors.Is(err, sluice.ErrInvalid), errors.Is(err, stream.ErrLeaseLost):
		return err
	case e.closed.Load():
		return sluice.ErrClosed
	}
	return unavailable(err)
}

func (e *Engine) open() error {
	if e.closed.Load() {
		return sluice.ErrClosed
	}
	return nil
}

// lockStream takes the transaction-scoped lock that orders one stream's offsets in table.
func (e *Engine) lockStream(ctx context.Context, tx pgx.Tx, table, name string) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", e.schema+"."+table+":"+name)
	return err
}

// Append implements stream.Backend: one transaction and one INSERT for all events. Events repeating
// a stored (Stream, ID), or an earlier one in the same call, are skipped.
func (e *Engine) Append(ctx context.Context, events []stream.Event) error {
	if err := e.open(); err != nil {
		return err
	}
	events, err := stream.NormalizeEvents(events, time.Now().UnixMilli())
	if err != nil {
		return err
	}
	n := len(events)
	if n == 0 {
		return nil
	}
	streams, keys, ids := make([]string, n), make([]string, n), make([]*string, n)
	costs, ats := make([]int64, n), make([]int64, n)
	for i, ev := range events {
		streams[i], keys[i], costs[i], ats[i] = ev.Stream, ev.Key, ev.Cost, ev.At
		if ev.ID != "" {
			ids[i] = &events[i].ID
		}
	}
	locks := slices.Compact(slices.Sorted(slices.Values(streams))) // one order: no deadlocks
	return e.fail(pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for _, s := range locks {
			if err := e.lockStream(ctx, tx, "log", s); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+e.q+".log (stream, key, cost, at, id)"+
			" SELECT s, k, c, a, i FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[]) WITH ORDINALITY AS u(s, k, c, a, i, o)"+
			" ORDER BY o ON CONFLICT (stream, id) WHERE id IS NOT NULL DO NOTHING",
			streams, keys, costs, ats, ids)
		return err
	}))
}

// Register implements stream.Backend.
func (e *Engine) Register(ctx context.Context, q stream.Query) error {
	if err := q.Validate(); err != nil {
		return err
	}
	if err := e.open(); err != nil {
		return err
	}
	return e.fail(pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, _, err := e.lockQuery(ctx, tx, q)
		return err
	}))
}

// lockQuery locks q's row, inserting it when missing, and returns its run and state.
func (e *Engine) lockQuery(ctx context.Context, tx pgx.Tx, q stream.Query) (run int64, st stream.Stats, err error) {
	for range 2 {
		var stored stream.Query
		err = tx.QueryRow(ctx, "SELECT run, stream, window_ms, grace_ms, idle_flush_ms, quota, \"offset\", horizon, max_at, late, late_sum"+
			" FROM "+e.q+".queries WHERE name = $1 FOR UPDATE", q.Name).Scan(
			&run, &stored.Stream, &stored.WindowMs, &stored.GraceMs, &stored.IdleFlushMs, &stored.Quota,
			&st.Offset, &st.Horizon, &st.MaxAt, &st.Late, &st.LateSum)
		if err == nil {
			stored.Name = q.Name
			if stored != q {
				return 0, st, stream.ErrQueryChanged
			}
			return run, st, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, st, err
		}
		fresh, _ := stream.NewAggregator(q)
		init := fresh.Stats()
		if _, err := tx.Exec(ctx, "INSERT INTO "+e.q+".queries (name, stream, window_ms, grace_ms, idle_flush_ms, quota, horizon, max_at)"+
			" VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING",
			q.Name, q.Stream, q.WindowMs, q.GraceMs, q.IdleFlushMs, q.Quota, init.Horizon, init.MaxAt); err != nil {
			return 0, st, err
		}
	}
	return 0, st, fmt.Errorf("query %q vanished while registering", q.Name)
}

// Reset implements stream.Backend.
func (e *Engine) Reset(ctx context.Context, name string) error {
	if err := e.open(); err != nil {
		return err
	}
	return e.fail(pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM "+e.q+".queries WHERE name = $1", name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+e.q+".open_windows WHERE query = $1", name)
		return err
	}))
}

// Process implements stream.Backend. It is one transaction: lock the query's row (so processors of
// one query take turns), read up to max events after its offset, load only the open windows those
// events or the new horizon touch, fold, then write the changed open windows, the closed windows,
// their decisions and the new offset and commit. A crash before the commit leaves everything as it
// was, so the batch is processed again, once.
func (e *Engine) Process(ctx context.Context, q stream.Query, now int64, max int) (int, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	if err := e.open(); err != nil {
		return 0, err
	}
	var n int
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		n, err = e.process(ctx, tx, q, now, batchSize(max))
		return err
	})
	if err != nil {
		return 0, e.fail(err)
	}
	return n, nil
}

func (e *Engine) process(ctx context.Context, tx pgx.Tx, q stream.Query, now int64, max int) (int, error) {
	run, st, err := e.lockQuery(ctx, tx, q)
	if err != nil {
		return 0, err
	}
	rows, _ := tx.Query(ctx, "SELECT \"offset\", key, cost, at FROM "+e.q+".log WHERE stream = $1 AND \"offset\" > $2 ORDER BY \"offset\" LIMIT $3",
		q.Stream, st.Offset, max)
	var events []stream.Event
	offset := st.Offset
	var ev stream.Event
	_, err = pgx.ForEachRow(rows, []any{&offset, &ev.Key, &ev.Cost, &ev.At}, func() error {
		events = append(events, ev)
		return nil
	})
	if err != nil {
		return 0, err
	}

	agg, _ := stream.NewAggregator(q)
	agg.Restore(st, nil)
	// Windows ending at or below bound may close in this batch; the others change only if a
	// batch event lands in them. Only those two kinds are loaded.
	bound := agg.HorizonAfter(events, now)
	keys := make([]string, 0, 16)
	for _, ev := range events {
		keys = append(keys, ev.Key)
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	rows, _ = tx.Query(ctx, "SELECT key, start, \"end\", count, sum FROM "+e.q+".open_windows"+
		" WHERE query = $1 AND (\"end\" <= $2 OR (key = ANY ($3) AND \"end\" > $4))", q.Name, bound, keys, st.Horizon)
	var open []stream.Window
	var w stream.Window
	if _, err := pgx.ForEachRow(rows, []any{&w.Key, &w.Start, &w.End, &w.Count, &w.Sum}, func() error {
		open = append(open, w)
		return nil
	}); err != nil {
		return 0, err
	}
	agg.Restore(st, open)
	for _, ev := range events {
		agg.Add(ev)
	}
	closed := agg.Close(now)
	changed := agg.Changed()
	next := agg.Stats()
	if len(events) == 0 && len(closed) == 0 && next.Horizon == st.Horizon {
		return 0, nil // nothing to write
	}

	if len(closed) > 0 {
		if err := e.emit(ctx, tx, q, run, closed); err != nil {
			return 0, err
		}
	}
	if len(changed) > 0 {
		ks, starts, ends, counts, sums := columns(changed)
		if _, err := tx.Exec(ctx, "INSERT INTO "+e.q+".open_windows (query, key, start, \"end\", count, sum)"+
			" SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])"+
			" ON CONFLICT (query, key, start) DO UPDATE SET count = excluded.count, sum = excluded.sum",
			q.Name, ks, starts, ends, counts, sums); err != nil {
			return 0, err
		}
	}
	if _, err := tx.Exec(ctx, "UPDATE "+e.q+".queries SET \"offset\" = $2, horizon = $3, max_at = $4, late = $5, late_sum = $6, events = events + $7 WHERE name = $1",
		q.Name, offset, next.Horizon, next.MaxAt, next.Late, next.LateSum, len(events)); err != nil {
		return 0, err
	}
	return len(events), nil
}

// emit moves closed windows from open_windows to the outputs, with their decisions. A window an
// earlier run (before a Reset) already decided gets no second decision: (query, key,
// window_start) identifies a decision, and consumers may have acted on the first.
func (e *Engine) emit(ctx context.Context, tx pgx.Tx, q stream.Query, run int64, closed []stream.Window) error {
	ks, starts, ends, counts, sums := columns(closed)
	if _, err := tx.Exec(ctx, "DELETE FROM "+e.q+".open_windows WHERE query = $1 AND (key, start) IN (SELECT * FROM unnest($2::text[], $3::bigint[]))",
		q.Name, ks, starts); err != nil {
		return err
	}
	if err := e.lockStream(ctx, tx, "out", q.Stream); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+e.q+".windows (run, stream, query, key, start, \"end\", count, sum, part)"+
		" SELECT $1, $2, $3, k, s, e, c, m, p FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::smallint[]) WITH ORDINALITY AS u(k, s, e, c, m, p, o) ORDER BY o",
		run, q.Stream, q.Name, ks, starts, ends, counts, sums, partitions(ks)); err != nil {
		return err
	}
	var over []stream.Window
	for _, w := range closed {
		if _, ok := q.Decide(w); ok {
			over = append(over, w)
		}
	}
	if len(over) == 0 {
		return nil
	}
	ks, starts, ends, counts, _ = columns(over)
	_, err := tx.Exec(ctx, "INSERT INTO "+e.q+".decisions (run, stream, query, key, window_start, window_end, count, quota, over_by, part)"+
		" SELECT $1, $2, $3, k, s, e, c, $8, c - $8, p FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $9::smallint[]) WITH ORDINALITY AS u(k, s, e, c, p, o) ORDER BY o"+
		" ON CONFLICT (query, key, window_start) DO NOTHING",
		run, q.Stream, q.Name, ks, starts, ends, counts, q.Quota, partitions(ks))
	return err
}

// batchSize is Process's max, or Windows' and Decisions' limit, with its default.
func batchSize(max int) int {
	if max <= 0 {
		return stream.DefaultBatch
	}
	return max
}

// partitions is the stream.Partition of each key.
func partitions(keys []string) []int16 {
	ps := make([]int16, len(keys))
	for i, k := range keys {
		ps[i] = int16(stream.Partition(k))
	}
	return ps
}

func columns(ws []stream.Window) (keys []string, starts, ends, counts, sums []int64) {
	for _, w := range ws {
		keys = append(keys, w.Key)
		starts = append(starts, w.Start)
		ends = append(ends, w.End)
		counts = append(counts, w.Count)
		sums = append(sums, w.Sum)
	}
	return
}

// The columns of the output tables after "offset", in the order of Window's and Decision's fields.
const (
	windowColumns   = "query, stream, key, start, \"end\", count, sum"
	decisionColumns = "query, stream, key, window_start, window_end, count, quota, over_by"
)

// Windows implements stream.Backend. limit <= 0 means stream.DefaultBatch.
func (e *Engine) Windows(ctx context.Context, name string, after int64, limit int) ([]stream.Window, error) {
	return readOutput[stream.Window](ctx, e, windowColumns+" FROM "+e.q+".windows", name, after, limit)
}

// Decisions implements stream.Backend. limit <= 0 means stream.DefaultBatch.
func (e *Engine) Decisions(ctx context.Context, name string, after int64, limit int) ([]stream.Decision, error) {
	return readOutput[stream.Decision](ctx, e, decisionColumns+" FROM "+e.q+".decisions", name, after, limit)
}

// readOutput reads rows of stream name's output table (columns and table in from, offset first)
// in order.
func readOutput[T any](ctx context.Context, e *Engine, from, name string, after int64, limit int) ([]T, error) {
	if err := e.open(); err != nil {
		return nil, err
	}
	rows, _ := e.pool.Query(ctx, "SELECT \"offset\", "+from+" WHERE stream = $1 AND \"offset\" > $2 ORDER BY \"offset\" LIMIT $3",
		name, after, batchSize(limit))
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
	return out, e.fail(err)
}

// Stats implements stream.Backend. An unknown name has zero Stats.
func (e *Engine) Stats(ctx context.Context, name string) (stream.Stats, error) {
	if err := e.open(); err != nil {
		return stream.Stats{}, err
	}
	var st stream.Stats
	err := e.pool.QueryRow(ctx, "SELECT \"offset\", events, horizon, max_at, late, late_sum,"+
		" (SELECT count(*) FROM "+e.q+".open_windows WHERE query = $1) FROM "+e.q+".queries WHERE name = $1", name).Scan(
		&st.Offset, &st.Events, &st.Horizon, &st.MaxAt, &st.Late, &st.LateSum, &st.Open)
	if errors.Is(err, pgx.ErrNoRows) {
		return stream.Stats{}, nil
	}
	return st, e.fail(err)
}
