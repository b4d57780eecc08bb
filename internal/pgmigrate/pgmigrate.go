// Package pgmigrate keeps the PostgreSQL schema a component keeps its tables in: the PostgreSQL
// store, stream mode and the region coordinator each have their own schema and their own files,
// and share this mechanism.
//
// A component's files are migrations/NNNN_name.sql, which make its tables, indexes and types, and
// optionally functions.sql, which holds all of its functions; {{schema}} in a file stands for the
// quoted schema.
//
// Migrations are numbered without gaps, and the schema's migrations table records the versions
// applied. A released migration is never edited: a change is a new file. The first file may be
// numbered N > 1: it is then the squash of migrations 1 to N, applied only to a schema that has
// none and recorded as versions 1 to N, so that a schema those migrations made is up to date
// without it, and a schema at a version before N cannot be upgraded by the build.
//
// functions.sql is applied whole, with CREATE OR REPLACE FUNCTION, after the migrations: each
// function is written once, and editing one reaches existing schemas without a migration. The
// file's SHA-256 is recorded in the schema's functions table, and the file is applied again when
// it differs from the one recorded, or when a migration was applied. CREATE OR REPLACE cannot
// rename a function's arguments or change its result type, nor drop a function the file no longer
// defines: such a change also needs a migration that drops the old function (the migrations and
// the functions are applied in one transaction, so no caller sees the schema without it).
//
// Apply does everything in one transaction that first takes an advisory lock named by the
// component and the schema, so processes starting together take turns: the first migrates, the
// others find the schema up to date. A schema is never seen half migrated. The functions are those
// of the last build to start: a build does not start on a schema a newer one migrated further
// (sluice.ErrSchemaNewer), but an older build with the same migrations applies its own functions
// again, so a function changed without a migration must still suit the older builds' calls.
package pgmigrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Migration is one migration file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads the migrations *.sql of dir in fsys, in version order: consecutive numbers from the
// first file's (see the package comment for a first file not numbered 1). Misnumbered files are a
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
		if err != nil || v < 1 || len(ms) > 0 && v != ms[len(ms)-1].Version+1 {
			panic(fmt.Sprintf("pgmigrate: migration %s is misnumbered: numbers start at 1 or more and go up by one", name))
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(data)})
	}
	return ms
}

// Set is a component's schema: its migrations and its functions.
type Set struct {
	lock       string
	migrations []Migration
	functions  string // functions.sql, "" for none
	hash       string // functions' SHA-256, hex
}

// New reads a component's files from fsys: migrations/NNNN_name.sql and, if there is one,
// functions.sql. lock names the component's advisory lock, with each schema's name. Misnumbered
// migrations are a programming error, and panic.
func New(fsys fs.FS, lock string) *Set {
	s := &Set{lock: lock, migrations: Load(fsys, "migrations")}
	data, err := fs.ReadFile(fsys, "functions.sql")
	switch {
	case err == nil:
		sum := sha256.Sum256(data)
		s.functions, s.hash = string(data), hex.EncodeToString(sum[:])
	case !errors.Is(err, fs.ErrNotExist):
		panic(err)
	}
	return s
}

// Latest is the version of the last migration, 0 if there is none.
func (s *Set) Latest() int {
	if len(s.migrations) == 0 {
		return 0
	}
	return s.migrations[len(s.migrations)-1].Version
}

// NewerError means the schema holds migrations this build does not know: a newer build migrated
// it. It matches sluice.ErrSchemaNewer.
type NewerError struct {
	Schema     string // quoted
	Have, Know int
}

func (e *NewerError) Error() string {
	return fmt.Sprintf("sluice: schema %s is at migration %d, this build knows %d: upgrade sluice", e.Schema, e.Have, e.Know)
}

// Is makes errors.Is(err, sluice.ErrSchemaNewer) true.
func (e *NewerError) Is(target error) bool { return target == sluice.ErrSchemaNewer }

// OlderError means the schema is at a migration before the first this build has (a squash of
// those before it): this build cannot upgrade it.
type OlderError struct {
	Schema      string // quoted
	Have, First int
}

func (e *OlderError) Error() string {
	return fmt.Sprintf("sluice: schema %s is at migration %d, which this build cannot upgrade: it upgrades schemas from migration %d on",
		e.Schema, e.Have, e.First)
}

// Apply brings schema up to date: the migrations it lacks, then the functions if they changed
// (see the package comment). A schema a newer build migrated is a *NewerError (errors.Is
// sluice.ErrSchemaNewer), one too old to upgrade an *OlderError; a database failure is
// sluice.ErrUnavailable, naming the schema.
func (s *Set) Apply(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return s.ApplyTo(ctx, pool, schema, -1)
}

// ApplyTo is Apply stopping after migration upto (< 0: the last), and applying the functions only
// if it gets to the last: tests use it to build a schema as an earlier build left it. upto is at
// least the first migration's version.
func (s *Set) ApplyTo(ctx context.Context, pool *pgxpool.Pool, schema string, upto int) error {
	q := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.apply(ctx, tx, schema, q, upto) })
	var newer *NewerError
	var older *OlderError
	if err == nil || errors.As(err, &newer) || errors.As(err, &older) {
		return err
	}
	return storeerr.Unavailable("migrating schema "+q, err)
}

func (s *Set) apply(ctx context.Context, tx pgx.Tx, schema, q string, upto int) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", s.lock+": "+schema); err != nil {
		return err
	}
	current, err := version(ctx, tx, schema, q)
	if err != nil {
		return err
	}
	latest := s.Latest()
	if upto < 0 || upto > latest {
		upto = latest
	}
	switch {
	case current > latest:
		return &NewerError{Schema: q, Have: current, Know: latest}
	case current > 0 && current < s.migrations[0].Version:
		return &OlderError{Schema: q, Have: current, First: s.migrations[0].Version}
	}
	migrated := false
	for _, m := range s.migrations {
		if m.Version <= current || m.Version > upto {
			continue
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, "{{schema}}", q)); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		// current+1 is 1 for a squash applied to a new schema, m.Version otherwise.
		if _, err := tx.Exec(ctx, "INSERT INTO "+q+".migrations (version) SELECT generate_series($1::int, $2::int)", current+1, m.Version); err != nil {
			return err
		}
		current, migrated = m.Version, true
	}
	if s.functions == "" || upto < latest {
		return nil
	}
	return s.applyFunctions(ctx, tx, q, migrated)
}

// version returns the schema's migration, making the schema and its migrations table if they are
// missing.
func version(ctx context.Context, tx pgx.Tx, schema, q string) (int, error) {
	// CREATE ... IF NOT EXISTS would need the CREATE privilege even when the schema exists.
	ready, err := exists(ctx, tx, q+".migrations")
	if err != nil {
		return 0, err
	}
	if !ready {
		var hasSchema bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&hasSchema); err != nil {
			return 0, err
		}
		if !hasSchema {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
				return 0, err
			}
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE "+q+".migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return 0, err
		}
	}
	var current int
	err = tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+q+".migrations").Scan(&current)
	return current, err
}

// applyFunctions applies functions.sql if a migration was applied or the schema's functions
// table records another file, and records this one.
func (s *Set) applyFunctions(ctx context.Context, tx pgx.Tx, q string, migrated bool) error {
	ready, err := exists(ctx, tx, q+".functions")
	if err != nil {
		return err
	}
	if !ready {
		// One row: the file last applied.
		if _, err := tx.Exec(ctx, "CREATE TABLE "+q+".functions (one bool PRIMARY KEY DEFAULT true CHECK (one),"+
			" sha256 text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return err
		}
	} else if !migrated {
		var hash string
		err := tx.QueryRow(ctx, "SELECT sha256 FROM "+q+".functions").Scan(&hash)
		if err == nil && hash == s.hash {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	if _, err := tx.Exec(ctx, strings.ReplaceAll(s.functions, "{{schema}}", q)); err != nil {
		return fmt.Errorf("functions.sql: %w", err)
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+q+".functions (sha256) VALUES ($1)"+
		" ON CONFLICT (one) DO UPDATE SET sha256 = excluded.sha256, applied_at = excluded.applied_at", s.hash)
	return err
}

// exists reports whether the table q names (schema-qualified, quoted) exists.
func exists(ctx context.Context, tx pgx.Tx, q string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q).Scan(&ok)
	return ok, err
}

// TakeSchema removes sluice's connection option sluice_schema from params, the runtime parameters
// of a parsed PostgreSQL URL (it names the schema, and is no server setting), and returns it: ""
// when the URL has none.
func TakeSchema(params map[string]string) string {
	schema := params["sluice_schema"]
	delete(params, "sluice_schema")
	return schema
}
