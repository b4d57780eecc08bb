package pgmigrate_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/internal/pgtest"
)

func TestLoad(t *testing.T) {
	ms := pgmigrate.Load(fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("SELECT 2")},
		"m/0001_init.sql": {Data: []byte("SELECT 1")},
		"m/README":        {Data: []byte("not a migration")},
	}, "m")
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].Name != "0001_init.sql" || ms[1].SQL != "SELECT 2" {
		t.Fatalf("Load: %+v", ms)
	}
}

// A first file numbered N is the squash of migrations 1 to N.
func TestLoadSquash(t *testing.T) {
	ms := pgmigrate.Load(fstest.MapFS{
		"m/0004_init.sql": {Data: []byte("SELECT 4")},
		"m/0005_more.sql": {Data: []byte("SELECT 5")},
	}, "m")
	if len(ms) != 2 || ms[0].Version != 4 || ms[1].Version != 5 {
		t.Fatalf("Load: %+v", ms)
	}
}

// Misnumbered migrations are a programming error: Load panics rather than apply them out of order.
func TestLoadRefusesGaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
	}{
		{"a gap", []string{"0001_a.sql", "0003_c.sql"}},
		{"a gap after a squash", []string{"0002_b.sql", "0004_d.sql"}},
		{"twice a number", []string{"0001_a.sql", "0001_b.sql"}},
		{"zero", []string{"0000_a.sql"}},
		{"no number", []string{"init.sql"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("SELECT 1")}
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Load did not panic")
				}
			}()
			pgmigrate.Load(fsys, "m")
		})
	}
}

// files is a component's files: migrations by name, and functions.sql if functions is not empty.
func files(functions string, migrations ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := 0; i < len(migrations); i += 2 {
		fsys["migrations/"+migrations[i]] = &fstest.MapFile{Data: []byte(migrations[i+1])}
	}
	if functions != "" {
		fsys["functions.sql"] = &fstest.MapFile{Data: []byte(functions)}
	}
	return fsys
}

const (
	tableT = "CREATE TABLE {{schema}}.t (a int)"
	tableU = "CREATE TABLE {{schema}}.u (b int)"
	// fnV1 and fnV2 are two versions of one function.
	fnV1 = "CREATE OR REPLACE FUNCTION {{schema}}.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;"
	fnV2 = "CREATE OR REPLACE FUNCTION {{schema}}.f() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;"
)

func query[T any](t *testing.T, pool *pgxpool.Pool, sql string) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func versions(t *testing.T, pool *pgxpool.Pool, q string) []int {
	t.Helper()
	return query[[]int](t, pool, "SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM "+q+".migrations")
}

// A new schema gets the migrations, then the functions, and records both; starting again changes
// nothing; a changed functions.sql reaches the schema without a migration.
func TestApplyFunctions(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "pgmigrate_test")
	q := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	v1 := pgmigrate.New(files(fnV1, "0001_t.sql", tableT), "pgmigrate test")
	if err := v1.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if got := query[int](t, pool, "SELECT "+q+".f()"); got != 1 {
		t.Fatalf("f() = %d after the first Apply, want 1", got)
	}
	applied := query[string](t, pool, "SELECT applied_at::text FROM "+q+".functions")
	if err := v1.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if again := query[string](t, pool, "SELECT applied_at::text FROM "+q+".functions"); again != applied {
		t.Errorf("functions applied again (at %s, first at %s) though unchanged", again, applied)
	}
	v2 := pgmigrate.New(files(fnV2, "0001_t.sql", tableT), "pgmigrate test")
	if err := v2.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if got := query[int](t, pool, "SELECT "+q+".f()"); got != 2 {
		t.Errorf("f() = %d after functions.sql changed, want 2", got)
	}
	if got := versions(t, pool, q); !slices.Equal(got, []int{1}) {
		t.Errorf("versions %v, want [1]", got)
	}
	if n := query[int](t, pool, "SELECT count(*) FROM "+q+".functions"); n != 1 {
		t.Errorf("%d rows in functions, want 1", n)
	}
}

// A migration applies the functions again even if they are unchanged, so that one may drop a
// function whose arguments change and rely on functions.sql to make it anew.
func TestMigrationAppliesFunctions(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "pgmigrate_test")
	q := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	if err := pgmigrate.New(files(fnV1, "0001_t.sql", tableT), "pgmigrate test").Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	next := pgmigrate.New(files(fnV1, "0001_t.sql", tableT, "0002_drop_f.sql", "DROP FUNCTION {{schema}}.f()"), "pgmigrate test")
	if err := next.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if got := query[int](t, pool, "SELECT "+q+".f()"); got != 1 {
		t.Errorf("f() = %d, want 1", got)
	}
}

// A schema made by migrations 1 and 2 is up to date for a build whose first migration is their
// squash, numbered 2: the squash is not applied to it again, and the migrations after it and the
// functions are. A new schema gets the squash, recorded as versions 1 and 2.
func TestSquash(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	old := pgmigrate.New(files("", "0001_t.sql", tableT, "0002_u.sql", tableU), "pgmigrate test")
	squashed := pgmigrate.New(files(fnV1, "0002_init.sql", tableT+"; "+tableU, "0003_more.sql", "ALTER TABLE {{schema}}.t ADD c int"), "pgmigrate test")

	upgraded := pgtest.Schema(t, pool, "pgmigrate_test")
	if err := old.Apply(ctx, pool, upgraded); err != nil {
		t.Fatal(err)
	}
	if err := squashed.Apply(ctx, pool, upgraded); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	fresh := pgtest.Schema(t, pool, "pgmigrate_test")
	if err := squashed.Apply(ctx, pool, fresh); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{upgraded, fresh} {
		q := pgx.Identifier{schema}.Sanitize()
		if got := versions(t, pool, q); !slices.Equal(got, []int{1, 2, 3}) {
			t.Errorf("%s: versions %v, want [1 2 3]", schema, got)
		}
		if got := query[int](t, pool, "SELECT count(*) FROM "+q+".t WHERE c IS NULL AND "+q+".f() = 1"); got != 0 {
			t.Errorf("%s: %d rows", schema, got)
		}
	}

	// A schema at migration 1 cannot be upgraded by a build that starts at 2.
	tooOld := pgtest.Schema(t, pool, "pgmigrate_test")
	if err := old.ApplyTo(ctx, pool, tooOld, 1); err != nil {
		t.Fatal(err)
	}
	err := squashed.Apply(ctx, pool, tooOld)
	var oe *pgmigrate.OlderError
	if !errors.As(err, &oe) || oe.Have != 1 || oe.First != 2 || errors.Is(err, sluice.ErrUnavailable) || errors.Is(err, sluice.ErrSchemaNewer) {
		t.Errorf("Apply on a schema at 1 of a build starting at 2: %v, want an *OlderError", err)
	}
}

func TestSchemaNewer(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "pgmigrate_test")
	ctx := context.Background()
	newer := pgmigrate.New(files(fnV2, "0001_t.sql", tableT, "0002_u.sql", tableU), "pgmigrate test")
	if err := newer.Apply(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	err := pgmigrate.New(files(fnV1, "0001_t.sql", tableT), "pgmigrate test").Apply(ctx, pool, schema)
	var ne *pgmigrate.NewerError
	if !errors.Is(err, sluice.ErrSchemaNewer) || !errors.As(err, &ne) || ne.Have != 2 || ne.Know != 1 {
		t.Fatalf("Apply of an older build: %v, want sluice.ErrSchemaNewer", err)
	}
	// The older build changed nothing: the functions are still the newer build's.
	if got := query[int](t, pool, "SELECT "+pgx.Identifier{schema}.Sanitize()+".f()"); got != 2 {
		t.Errorf("f() = %d, want 2", got)
	}
}

// A failing migration or functions.sql leaves the schema as it was: everything is one transaction.
func TestFailureChangesNothing(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		set  *pgmigrate.Set
	}{
		{"migration", pgmigrate.New(files(fnV1, "0001_t.sql", tableT, "0002_bad.sql", "SELECT nonsense"), "pgmigrate test")},
		{"functions", pgmigrate.New(files("CREATE FUNCTION nonsense", "0001_t.sql", tableT), "pgmigrate test")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.Schema(t, pool, "pgmigrate_test")
			err := tc.set.Apply(ctx, pool, schema)
			if !errors.Is(err, sluice.ErrUnavailable) {
				t.Fatalf("Apply: %v, want sluice.ErrUnavailable", err)
			}
			if query[bool](t, pool, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = '"+schema+"')") {
				t.Errorf("schema %s exists after a failed Apply", schema)
			}
		})
	}
}

// Processes starting together take turns: each migration is applied once and every Apply succeeds.
func TestConcurrentApply(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "pgmigrate_test")
	q := pgx.Identifier{schema}.Sanitize()
	// A migration applied twice would fail: its table would exist.
	set := pgmigrate.New(files(fnV1, "0001_t.sql", tableT, "0002_u.sql", tableU), "pgmigrate test")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = set.Apply(context.Background(), pool, schema) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Apply %d: %v", i, err)
		}
	}
	if got := versions(t, pool, q); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("versions %v, want [1 2]", got)
	}
}

// ApplyTo stops at a migration and leaves the functions out: a schema as an earlier build left it.
func TestApplyTo(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "pgmigrate_test")
	q := pgx.Identifier{schema}.Sanitize()
	set := pgmigrate.New(files(fnV1, "0001_t.sql", tableT, "0002_u.sql", tableU), "pgmigrate test")
	if err := set.ApplyTo(context.Background(), pool, schema, 1); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, pool, q); !slices.Equal(got, []int{1}) {
		t.Errorf("versions %v, want [1]", got)
	}
	if query[bool](t, pool, "SELECT to_regclass('"+q+".functions') IS NOT NULL") {
		t.Error("functions applied by ApplyTo short of the last migration")
	}
}
