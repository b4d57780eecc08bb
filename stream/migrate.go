package stream

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// Migrations are migrations/NNNN_name.sql (package pgmigrate).
//
//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = sync.OnceValue(func() []pgmigrate.Migration { return pgmigrate.Load(migrationFS, "migrations") })

// migrateSchema applies the migrations schema lacks; engines starting together apply each once.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrateSchemaTo(ctx, pool, schema, -1)
}

// migrateSchemaTo is migrateSchema stopping after migration upto (-1: the last), so that tests
// can build a schema as an earlier release left it.
func migrateSchemaTo(ctx context.Context, pool *pgxpool.Pool, schema string, upto int) error {
	err := pgmigrate.Apply(ctx, pool, schema, "sluice stream migrations", migrations(), upto)
	var ne *pgmigrate.NewerError
	if errors.As(err, &ne) {
		return fmt.Errorf("%w: %v", ErrSchemaNewer, ne)
	}
	return unavailable(err)
}
