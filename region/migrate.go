package region

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The coordinator's migrations: migrations/NNNN_name.sql (package pgmigrate).
//
//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = sync.OnceValue(func() []pgmigrate.Migration { return pgmigrate.Load(migrationFS, "migrations") })

// migrateSchema applies the migrations schema lacks; regions starting together apply each once.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	err := pgmigrate.Apply(ctx, pool, schema, "sluice region migrations", migrations(), -1)
	var ne *pgmigrate.NewerError
	if errors.As(err, &ne) {
		return fmt.Errorf("%w: %v", ErrSchemaNewer, ne)
	}
	return unavailable(err)
}
