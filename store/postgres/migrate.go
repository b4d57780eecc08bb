package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The schema's migrations: migrations/NNNN_name.sql, version NNNN, numbered from 1 without gaps
// (package pgmigrate).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

var migrations = sync.OnceValue(func() []pgmigrate.Migration { return pgmigrate.Load(migrationFiles, "migrations") })

// migrate brings schema up to the latest migration (package pgmigrate): processes starting at once
// take turns, and each migration is applied once.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrationError(pgmigrate.Apply(ctx, pool, schema, "sluice migrations", migrations(), -1))
}

// migrationError is ErrSchemaNewer for a schema a newer build migrated, ErrUnavailable for the
// database's failures.
func migrationError(err error) error {
	var ne *pgmigrate.NewerError
	if errors.As(err, &ne) {
		return fmt.Errorf("%w: %v", ErrSchemaNewer, ne)
	}
	return unavailable(err)
}
