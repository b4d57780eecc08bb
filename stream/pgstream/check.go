package pgstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/stream"
)

// CheckQueries reports, changing nothing, whether the database url names (as Open reads it) holds
// any of qs under another definition: stream.ErrQueryChanged naming the first, the refusal Register
// would give it. A schema or a query not there yet is no error: Register would create it.
func CheckQueries(ctx context.Context, url string, qs []stream.Query) error {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	schema := pgmigrate.TakeSchema(cc.RuntimeParams)
	if schema == "" {
		schema = defaultSchema
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return unavailable(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "queries"}.Sanitize()).Scan(&exists); err != nil {
		return unavailable(err)
	}
	if !exists {
		return nil
	}
	for _, q := range qs {
		stored := stream.Query{Name: q.Name}
		err := conn.QueryRow(ctx, "SELECT stream, window_ms, grace_ms, idle_flush_ms, quota FROM "+pgx.Identifier{schema}.Sanitize()+".queries WHERE name = $1", q.Name).
			Scan(&stored.Stream, &stored.WindowMs, &stored.GraceMs, &stored.IdleFlushMs, &stored.Quota)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return unavailable(err)
		case stored != q:
			return fmt.Errorf("%w: %q is stored as %+v", stream.ErrQueryChanged, q.Name, stored)
		}
	}
	return nil
}
