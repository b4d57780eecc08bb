package stream

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations are migrations/NNNN_name.sql, applied in name order; {{schema}} stands for the
// quoted schema. A released file is never edited: a change is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateSchema applies the migrations schema lacks, all in one transaction under an advisory
// lock on the schema's name, so engines starting together apply each one once.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrateSchemaTo(ctx, pool, schema, -1)
}

// migrateSchemaTo is migrateSchema stopping after migration upto (-1: the last), so that tests
// can build a schema as an earlier release left it.
func migrateSchemaTo(ctx context.Context, pool *pgxpool.Pool, schema string, upto int) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	if upto >= 0 && upto < len(names) {
		names = names[:upto]
	}
	q := pgx.Identifier{schema}.Sanitize()
	fail := func(err error) error { return unavailable(fmt.Errorf("migrating schema %s: %w", q, err)) }
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "sluice stream migrations: "+schema); err != nil {
		return fail(err)
	}
	var have int
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".migrations").Scan(&exists); err != nil {
		return fail(err)
	}
	if exists {
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+q+".migrations").Scan(&have); err != nil {
			return fail(err)
		}
	} else if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q+"; CREATE TABLE "+q+
		".migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return fail(err)
	}
	if have > len(names) {
		return fmt.Errorf("%w: schema %s is at migration %d, this build knows %d", ErrSchemaNewer, q, have, len(names))
	}
	for i, name := range names[have:] {
		sql, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(string(sql), "{{schema}}", q)); err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+q+".migrations (version) VALUES ($1)", have+i+1); err != nil {
			return fail(err)
		}
	}
	return fail0(tx.Commit(ctx), fail)
}

func fail0(err error, wrap func(error) error) error {
	if err != nil {
		return wrap(err)
	}
	return nil
}
