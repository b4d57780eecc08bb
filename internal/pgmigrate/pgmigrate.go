// Package pgmigrate applies a component's embedded SQL migrations to the PostgreSQL schema the
// component keeps its tables in: the PostgreSQL store, stream mode and the region coordinator each
// have their own schema and their own migrations, and share this mechanism.
//
// Migrations are files NNNN_name.sql, numbered from 1 without gaps; {{schema}} in a file stands for
// the quoted schema. A released file is never edited: a change is a new file. The schema's
// migrations table records the versions applied.
package pgmigrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migration is one file of a Set.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads the migrations *.sql of dir in fsys, in version order. Misnumbered files are a
// programming error, and panic.
func Load(fsys fs.FS, dir string) []Migration {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		panic(err)
	}
	var ms []Migration // fs.Glob sorts names, and the numbers are zero-padded
	for _, name := range names {
		base := path.Base(name)
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v != len(ms)+1 {
			panic(fmt.Sprintf("pgmigrate: migration %s is not number %d", name, len(ms)+1))
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(data)})
	}
	return ms
}

// NewerError means the schema holds migrations this build does not know: a newer build migrated
// it. The caller should refuse to run rather than guess at tables it does not know.
type NewerError struct {
	Schema     string // quoted
	Have, Know int
}

func (e *NewerError) Error() string {
	return fmt.Sprintf("schema %s is at migration %d, this build knows %d: upgrade sluice", e.Schema, e.Have, e.Know)
}

// Apply brings schema up to migration upto of ms (all of them when upto < 0), one migration per
// transaction. Each transaction first takes an advisory lock named by lock and the schema, so
// processes starting together take turns and apply each migration once. A schema at a later
// migration than ms knows is a *NewerError; a database failure is returned wrapped, naming the
// schema.
func Apply(ctx context.Context, pool *pgxpool.Pool, schema, lock string, ms []Migration, upto int) error {
	if upto < 0 || upto > len(ms) {
		upto = len(ms)
	}
	for {
		done, err := applyOne(ctx, pool, schema, lock, ms, upto)
		if err != nil || done {
			return err
		}
	}
}

// applyOne applies the first migration the schema lacks, and reports whether none is left.
func applyOne(ctx context.Context, pool *pgxpool.Pool, schema, lock string, ms []Migration, upto int) (done bool, err error) {
	q := pgx.Identifier{schema}.Sanitize()
	dbErr := func(err error) (bool, error) { return false, fmt.Errorf("migrating schema %s: %w", q, err) }
	tx, err := pool.Begin(ctx)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lock+": "+schema); err != nil {
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
		return true, &NewerError{Schema: q, Have: current, Know: len(ms)}
	case current >= upto:
		if err := tx.Commit(ctx); err != nil {
			return dbErr(err)
		}
		return true, nil
	}
	m := ms[current]
	if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, "{{schema}}", q)); err != nil {
		return dbErr(fmt.Errorf("%s: %w", m.Name, err))
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".migrations (version) VALUES ($1)", m.Version); err != nil {
		return dbErr(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr(err)
	}
	return m.Version == upto, nil
}
