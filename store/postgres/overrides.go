package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/internal/storeerr"
	"github.com/sluicehq/sluice/overrides"
)

// Overrides is the overrides.Backend on PostgreSQL: a row per override in <schema>.overrides
// (migration 0008), and every change sent with pg_notify on the schema's channel (Channel) in the
// transaction that writes it, so listeners get the changes in commit order, only once committed.
// A change is at most overrides.MaxJSONLen bytes of override plus its envelope, within the
// 8000 bytes a notification holds.
//
// Watch listens on a connection of its own, outside the pool (a pool connection would be taken
// from checks for good). When that connection is lost (a restart, a network fault,
// pg_terminate_backend) it connects and listens again, backing off up to a second between tries,
// and then delivers Change{Op: OpReload}, since notifications sent meanwhile are lost. A
// connection lost without a word (a silent network partition) is noticed only by TCP, and the
// Table's periodic reload covers it meanwhile.
//
// Overrides is safe for concurrent use. It uses its pool and never closes it (but one from
// OpenOverrides: Close closes that).
type Overrides struct {
	pool    *pgxpool.Pool
	owns    bool
	channel string
	sql     struct{ put, del, expire, load string }
}

var _ overrides.Backend = (*Overrides)(nil)

// NewOverrides returns the overrides backend of schema ("" means "sluice", as for a Store) on pool,
// migrating the schema first as New does.
func NewOverrides(ctx context.Context, pool *pgxpool.Pool, schema string) (*Overrides, error) {
	schema = or(schema, "sluice")
	if err := migrations.Apply(ctx, pool, schema); err != nil {
		return nil, err
	}
	q := pgx.Identifier{schema}.Sanitize()
	o := &Overrides{pool: pool, channel: channelOf(schema)}
	o.sql.put = "INSERT INTO " + q + ".overrides (expires_at, updated_at, policy, key, body) VALUES ($1, $2, $3, $4, $5)" +
		" ON CONFLICT (policy, key) DO UPDATE SET expires_at = excluded.expires_at, updated_at = excluded.updated_at, body = excluded.body" +
		" RETURNING xmax <> 0" // a row updated, not inserted
	o.sql.del = "DELETE FROM " + q + ".overrides WHERE policy = $1 AND key = $2"
	o.sql.expire = o.sql.del + " AND expires_at > 0 AND expires_at <= $3"
	o.sql.load = "SELECT body::text FROM " + q + ".overrides"
	return o, nil
}

// Overrides returns the overrides backend of the store's schema, on the store's pool: the
// backend a fleet sharing this store keeps its overrides in.
func (s *Store) Overrides(ctx context.Context) (*Overrides, error) {
	return NewOverrides(ctx, s.pool, s.schema)
}

// OpenOverrides connects to the database url names (as Open takes it, sluice_schema included) with
// a pool of its own, for the overrides of that schema. Close closes the pool.
func OpenOverrides(ctx context.Context, url string) (*Overrides, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	schema := pgmigrate.TakeSchema(pc.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, unavailable(err)
	}
	o, err := NewOverrides(ctx, pool, schema)
	if err != nil {
		pool.Close()
		return nil, err
	}
	o.owns = true
	return o, nil
}

// Close closes the pool of an Overrides from OpenOverrides; it does nothing to a pool passed to
// NewOverrides.
func (o *Overrides) Close() {
	if o.owns {
		o.pool.Close()
	}
}

// channelOf is the notification channel of schema's overrides: "<schema>:overrides", or, when that
// is longer than a channel name may be (63 bytes), a digest of the schema.
func channelOf(schema string) string {
	ch := schema + ":overrides"
	if len(ch) > 63 {
		sum := sha256.Sum256([]byte(schema))
		ch = "sluice-overrides:" + hex.EncodeToString(sum[:16])
	}
	return ch
}

// Channel is the channel changes are notified on.
func (o *Overrides) Channel() string { return o.channel }

// Apply writes c and notifies it, in one transaction.
func (o *Overrides) Apply(ctx context.Context, c overrides.Change) (bool, error) {
	msg, err := overrides.EncodeChange(c)
	if err != nil {
		return false, err
	}
	if len(msg) >= 8000 {
		return false, fmt.Errorf("pgstore overrides: a change of %d bytes does not fit a notification", len(msg))
	}
	ov := &c.Override
	var existed bool
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		switch c.Op {
		case overrides.OpPut:
			body, err := overrides.EncodeOverride(*ov)
			if err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, o.sql.put, ov.ExpiresAt, ov.UpdatedAt, ov.Policy, textOf(ov.Key), string(body)).Scan(&existed); err != nil {
				return err
			}
		case overrides.OpDelete, overrides.OpExpire:
			args := []any{ov.Policy, textOf(ov.Key)}
			sql := o.sql.del
			if c.Op == overrides.OpExpire {
				sql, args = o.sql.expire, append(args, ov.ExpiresAt)
			}
			tag, err := tx.Exec(ctx, sql, args...)
			if err != nil {
				return err
			}
			if existed = tag.RowsAffected() == 1; !existed {
				return nil // nothing changed: nothing to tell
			}
		default:
			return fmt.Errorf("cannot apply a change of op %q", c.Op)
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", o.channel, string(msg))
		return err
	})
	if err != nil {
		return false, storeerr.Unavailable("pgstore overrides", err)
	}
	return existed, nil
}

// Load reads every row. A body that is not an override's JSON (not written by sluice) is left out.
func (o *Overrides) Load(ctx context.Context) ([]overrides.Override, error) {
	rows, err := o.pool.Query(ctx, o.sql.load)
	if err != nil {
		return nil, storeerr.Unavailable("pgstore overrides", err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeerr.Unavailable("pgstore overrides", err)
	}
	out := make([]overrides.Override, 0, len(bodies))
	for _, b := range bodies {
		if ov, err := overrides.DecodeOverride([]byte(b)); err == nil {
			out = append(out, ov)
		}
	}
	return out, nil
}

// Watch connects and listens, and returns once listening; see Overrides for what follows.
func (o *Overrides) Watch(ctx context.Context, fn func(overrides.Change)) error {
	conn, err := o.listen(ctx)
	if err != nil {
		return err
	}
	go o.watch(ctx, conn, fn)
	return nil
}

// listen connects outside the pool, with the pool's settings, and listens on the channel.
func (o *Overrides) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, o.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, storeerr.Unavailable("pgstore overrides: listening", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{o.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, storeerr.Unavailable("pgstore overrides: listening", err)
	}
	return conn, nil
}

// watch delivers the notifications conn receives until ctx ends, listening again (and delivering
// a reload) whenever the connection is lost.
func (o *Overrides) watch(ctx context.Context, conn *pgx.Conn, fn func(overrides.Change)) {
	wait := 50 * time.Millisecond
	for {
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			if c, err := overrides.DecodeChange([]byte(n.Payload)); err == nil && ctx.Err() == nil {
				fn(c)
			}
		}
		conn.Close(context.Background())
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Second)
			var err error
			if conn, err = o.listen(ctx); err == nil {
				break
			}
		}
		wait = 50 * time.Millisecond
		if ctx.Err() == nil {
			fn(overrides.Change{Op: overrides.OpReload})
		}
	}
}
