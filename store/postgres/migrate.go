package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema's migrations: migrations/NNNN_name.sql, version NNNN, numbered from 1 without gaps.
// {{schema}} in a file stands for the quoted schema name. A released migration is never edited: a
// change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

var migrations = sync.OnceValue(func() []migration {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []migration // fs.Glob sorts names, and the numbers are zero-padded
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v != len(ms)+1 {
			panic(fmt.Sprintf("pgstore: migration %s is not number %d", name, len(ms)+1))
		}
		data, err := migrationFiles.ReadFile(name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: base, sql: string(data)})
	}
	return ms
})

// migrate brings schema up to the latest migration, one migration per transaction. Each
// transaction first takes an advisory lock scoped to the schema, so processes starting at once
// take turns and each migration is applied once.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ms := migrations()
	for {
		done, err := migrateOne(ctx, pool, schema, ms)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the first migration the database lacks, and reports whether none is left.
func migrateOne(ctx context.Context, pool *pgxpool.Pool, schema string, ms []migration) (done bool, err error) {
	q := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, unavailable(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	dbErr := func(err error) (bool, error) {
		return false, unavailable(fmt.Errorf("migrating schema %s: %w", q, err))
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "sluice migrations: "+schema); err != nil {
		return dbErr(err)
	}
	// CREATE ... IF NOT EXISTS would need the CREATE privilege even when the schema exists.
	var ready bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".migrations").Scan(&ready); err != nil {
		return dbErr(err)
	}
	if !ready {
		var hasSchema bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&hasSchema); err != nil {
			return dbErr(err)
		}
		if !hasSchema {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
				return dbErr(err)
			}
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE "+q+".migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return dbErr(err)
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+q+".migrations").Scan(&current); err != nil {
		return dbErr(err)
	}
	switch {
	case current > len(ms):
		return true, fmt.Errorf("%w: schema %s is at migration %d, this build knows %d: upgrade sluice", ErrSchemaNewer, q, current, len(ms))
	case current == len(ms):
		if err := tx.Commit(ctx); err != nil {
			return dbErr(err)
		}
		return true, nil
	}
	m := ms[current]
	if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "{{schema}}", q)); err != nil {
		return dbErr(fmt.Errorf("%s: %w", m.name, err))
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".migrations (version) VALUES ($1)", m.version); err != nil {
		return dbErr(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr(err)
	}
	return m.version == len(ms), nil
}
