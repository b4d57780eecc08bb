package region

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The coordinator's migrations: migrations/NNNN_name.sql, applied in name order, version NNNN.
// {{schema}} in a file stands for the quoted schema. A released file is never edited: a change
// is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateSchema applies the migrations schema lacks, in one transaction under an advisory lock on
// the schema's name, so regions starting together apply each one once.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "sluice region migrations: "+schema); err != nil {
			return err
		}
		// Looking first spares a migrated database the CREATE privilege that CREATE SCHEMA IF NOT
		// EXISTS needs even when the schema is there.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".migrations").Scan(&exists); err != nil {
			return err
		}
		have := 0
		if exists {
			if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+q+".migrations").Scan(&have); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q+"; CREATE TABLE "+q+
			".migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return err
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
				return fmt.Errorf("%s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+q+".migrations (version) VALUES ($1)", have+i+1); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || errors.Is(err, ErrSchemaNewer) {
		return err
	}
	return unavailable(fmt.Errorf("migrating schema %s: %w", q, err))
}
