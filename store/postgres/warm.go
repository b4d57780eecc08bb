package pgstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
)

// A new connection's first check costs what its backend has not done yet: compiling decide and the
// strategies' PL/pgSQL, and planning their statements. That took 17 to 55 ms with psql on a quiet
// machine, and past the store timeout under load, when a service starts, or comes back after
// PostgreSQL did, with every connection new at once. warm does that work on a connection before it
// serves: one check of each strategy on a key of the connection's own, rolled back.
var warmPolicies = []*sluice.Policy{
	sluice.MustPolicy("sluice-warm-g", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}}),
	sluice.MustPolicy("sluice-warm-t", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 1}}),
	sluice.MustPolicy("sluice-warm-f", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}}),
	sluice.MustPolicy("sluice-warm-s", sluice.Limit{Strategy: sluice.SlidingWindow{Limit: 1, WindowMs: 1000, Buckets: 2}}),
	sluice.MustPolicy("sluice-warm-l", sluice.Limit{Strategy: sluice.SlidingWindowLog{Limit: 1, WindowMs: 1000}}),
}

// warm runs a check of every strategy on conn and rolls it back, leaving nothing behind. It fails
// where decide does not exist yet (before the first migration), which costs nothing but the try.
func warm(ctx context.Context, conn *pgx.Conn, sql statements) error {
	c := newCall(opCheck, 0, 1)
	key := fmt.Sprintf("sluice-warm-%d", conn.PgConn().PID())
	for _, p := range warmPolicies {
		c.addPolicy(p, key, 1)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var out []float64
	return tx.QueryRow(ctx, sql.decide, c.args(0)...).Scan(&out)
}

// warmPool warms n of the pool's connections, made now or already there, at once.
func warmPool(ctx context.Context, pool *pgxpool.Pool, sql statements, n int) {
	var wg sync.WaitGroup
	conns := make(chan *pgxpool.Conn, n)
	for range n {
		wg.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return
			}
			warm(ctx, conn.Conn(), sql)
			conns <- conn // held until all are warm, so that each of the n is another connection
		})
	}
	wg.Wait()
	close(conns)
	for conn := range conns {
		conn.Release()
	}
}
