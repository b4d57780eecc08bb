package pgstream

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/stream"
)

// newLease is a lease id: random, so that a lease of one partition or one engine's lifetime never
// matches another's.
func newLease() string { return rand.Text() }

// dbNow is the database clock in epoch ms plus the engine's skew (the parameter named by param):
// leases expire by one clock, whichever process or host pulls and acks.
func dbNow(param string) string {
	return "(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + " + param + "::bigint)"
}

// Pull implements stream.Backend, in one transaction: create the group's partition rows on its
// first pull, lock (FOR UPDATE SKIP LOCKED) the free partition whose next item is oldest, read its
// batch and write the lease. A puller skips the rows other pullers hold locked, so two never lease
// the same partition and neither waits for the other.
func (e *Engine) Pull(ctx context.Context, r stream.PullRequest) (stream.Batch, error) {
	r, err := r.Normalize()
	if err != nil {
		return stream.Batch{}, err
	}
	if err := e.open(); err != nil {
		return stream.Batch{}, err
	}
	var b stream.Batch
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		b, err = e.pull(ctx, tx, r)
		return err
	})
	if err != nil {
		return stream.Batch{}, e.fail(err)
	}
	return b, nil
}

func (e *Engine) pull(ctx context.Context, tx pgx.Tx, r stream.PullRequest) (stream.Batch, error) {
	out := e.q + "." + string(r.Kind) // each kind is its table's name; Normalize checked it
	// A stream without outputs of the kind gets no rows: a typo does not store 16 of them.
	if _, err := tx.Exec(ctx, "INSERT INTO "+e.q+".group_parts (grp, stream, kind, part)"+
		" SELECT $1, $2, $3, p FROM generate_series(0, $4::int - 1) p"+
		" WHERE NOT EXISTS (SELECT FROM "+e.q+".group_parts WHERE grp = $1 AND stream = $2 AND kind = $3)"+
		" AND EXISTS (SELECT FROM "+out+" WHERE stream = $2)"+
		" ON CONFLICT DO NOTHING", r.Group, r.Stream, string(r.Kind), stream.Partitions); err != nil {
		return stream.Batch{}, err
	}
	// The row lock is taken after the candidates were chosen: a row another puller or acker
	// changed meanwhile is rechecked, but its next item is not, so a partition acked up to its
	// end meanwhile can come back empty. Then the next candidate is tried, without it.
	empty := []int16{}
	for {
		var part int16
		var committed, now int64
		err := tx.QueryRow(ctx, "SELECT g.part, g.committed, c.now FROM (SELECT "+dbNow("$4")+" AS now) c, "+e.q+".group_parts g"+
			" CROSS JOIN LATERAL (SELECT o.\"offset\" FROM "+out+" o"+
			"  WHERE o.stream = g.stream AND o.part = g.part AND o.\"offset\" > g.committed ORDER BY o.\"offset\" LIMIT 1) n"+
			" WHERE g.grp = $1 AND g.stream = $2 AND g.kind = $3 AND (g.lease IS NULL OR g.expires_at <= c.now) AND g.part <> ALL ($5::smallint[])"+
			" ORDER BY n.\"offset\" LIMIT 1 FOR UPDATE OF g SKIP LOCKED",
			r.Group, r.Stream, string(r.Kind), e.skew.Load(), empty).Scan(&part, &committed, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return stream.Batch{}, nil
		}
		if err != nil {
			return stream.Batch{}, err
		}
		b := stream.Batch{Partition: int(part), Lease: newLease(), ExpiresAt: now + r.LeaseMs}
		var last int64 // the batch's last offset; offsets start at 1, so 0 is an empty batch
		from := " FROM " + out + " WHERE stream = $1 AND part = $2 AND \"offset\" > $3 ORDER BY \"offset\" LIMIT $4"
		if r.Kind == stream.KindWindows {
			rows, _ := tx.Query(ctx, "SELECT \"offset\", "+windowColumns+from, r.Stream, part, committed, r.Limit)
			if b.Windows, err = pgx.CollectRows(rows, pgx.RowToStructByPos[stream.Window]); len(b.Windows) > 0 {
				last = b.Windows[len(b.Windows)-1].Offset
			}
		} else {
			rows, _ := tx.Query(ctx, "SELECT \"offset\", "+decisionColumns+from, r.Stream, part, committed, r.Limit)
			if b.Decisions, err = pgx.CollectRows(rows, pgx.RowToStructByPos[stream.Decision]); len(b.Decisions) > 0 {
				last = b.Decisions[len(b.Decisions)-1].Offset
			}
		}
		if err != nil {
			return stream.Batch{}, err
		}
		if last == 0 {
			empty = append(empty, part)
			continue
		}
		if _, err := tx.Exec(ctx, "UPDATE "+e.q+".group_parts SET lease = $5, consumer = $6, expires_at = $7, upto = $8"+
			" WHERE grp = $1 AND stream = $2 AND kind = $3 AND part = $4",
			r.Group, r.Stream, string(r.Kind), part, b.Lease, r.Consumer, b.ExpiresAt, last); err != nil {
			return stream.Batch{}, err
		}
		return b, nil
	}
}

// Ack implements stream.Backend, in one transaction on the lease's row. A Pull taking over the
// expired lease locks the same row, so either the Ack commits first (and the Pull sees the new
// offset) or the Pull does (and the Ack finds its lease gone).
func (e *Engine) Ack(ctx context.Context, r stream.AckRequest) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := e.open(); err != nil {
		return err
	}
	return e.fail(pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var part int16
		var upto, expires, now int64
		err := tx.QueryRow(ctx, "SELECT part, upto, expires_at, "+dbNow("$5")+" FROM "+e.q+".group_parts"+
			" WHERE grp = $1 AND stream = $2 AND kind = $3 AND lease = $4 FOR UPDATE",
			r.Group, r.Stream, string(r.Kind), r.Lease, e.skew.Load()).Scan(&part, &upto, &expires, &now)
		switch {
		case errors.Is(err, pgx.ErrNoRows), err == nil && now >= expires:
			return r.LeaseLost()
		case err != nil:
			return err
		}
		if err := r.CheckBatch(upto); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE "+e.q+".group_parts SET committed = greatest(committed, $5), lease = NULL, consumer = NULL, expires_at = NULL, upto = NULL"+
			" WHERE grp = $1 AND stream = $2 AND kind = $3 AND part = $4",
			r.Group, r.Stream, string(r.Kind), part, r.Offset)
		return err
	}))
}
