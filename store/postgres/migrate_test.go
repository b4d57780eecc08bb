package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgmigrate"
	"github.com/sluicehq/sluice/internal/storetest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// latestMigration is the number of the last file of migrations/.
func latestMigration(t *testing.T) int {
	t.Helper()
	files, _ := filepath.Glob("migrations/*.sql")
	if len(files) == 0 {
		t.Fatal("no migrations/*.sql")
	}
	num, _, _ := strings.Cut(filepath.Base(files[len(files)-1]), "_")
	v, err := strconv.Atoi(num)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestConcurrentMigrations starts 8 stores at once on a schema that does not exist yet: all must
// succeed and each migration must be applied once.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	q := pgx.Identifier{schema}.Sanitize()
	const n = 8
	stores := make([]*pgstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	// Versions 1 to the latest: the first file is the squash of the migrations before it.
	latest := latestMigration(t)
	if got := count(t, pool, "SELECT count(*) FROM "+q+".migrations"); got != latest {
		t.Errorf("%d migrations recorded, want %d", got, latest)
	}
	if got := count(t, pool, "SELECT count(DISTINCT version) FROM "+q+".migrations WHERE version BETWEEN 1 AND $1", latest); got != latest {
		t.Errorf("%d distinct versions recorded, want %d", got, latest)
	}
	if got := count(t, pool, "SELECT count(*) FROM "+q+".functions"); got != 1 {
		t.Errorf("%d rows in functions, want 1", got)
	}
	p := sluice.MustPolicy("migrated", sluice.Limit{Strategy: sluice.FixedWindow{Limit: n, WindowMs: 1000}})
	for i, s := range stores {
		if d, err := s.Check(context.Background(), t0, p, "k", 1); err != nil || !d.Allowed || d.Remaining != int64(n-1-i) {
			t.Errorf("store %d: %+v, %v", i, d, err)
		}
	}
}

// TestSchemaNewer refuses a schema that a newer build migrated further.
func TestSchemaNewer(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	s, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Starting again on an up-to-date schema is fine.
	s, err = pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	if err != nil {
		t.Fatalf("second New: %v", err)
	}
	s.Close()
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+pgx.Identifier{schema}.Sanitize()+".migrations (version) VALUES (9999)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1}); !errors.Is(err, sluice.ErrSchemaNewer) {
		t.Errorf("New on a newer schema: error %v, want sluice.ErrSchemaNewer", err)
	}
}

// v6 are the store's files as the builds before functions.sql had them: migrations 1 to 6, each
// function spelled out in the migrations that made or changed it (testdata/v6).
var v6 = pgmigrate.New(os.DirFS("testdata/v6"), "sluice migrations")

// TestUpgradesV6Schema: a schema the builds before functions.sql made is brought to the layout of a
// new one, keeping its rows. Before the upgrade, its functions (migrations 1 to 6) and the new
// ones (functions.sql) make the same replies and rows from the same random calls, debits and
// refunds and strategy changes included; after it, the two schemas' tables, indexes, types,
// functions and recorded migrations are the same, and the upgraded one passes the conformance
// vectors.
func TestUpgradesV6Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	old := freshSchema(t, pool)
	if err := v6.Apply(ctx, pool, old); err != nil {
		t.Fatal(err)
	}
	freshSchemaName := freshSchema(t, pool)
	fresh, err := pgstore.New(pool, pgstore.Config{Schema: freshSchemaName, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	schemas := []string{old, freshSchemaName}

	r := rand.New(rand.NewPCG(22, 3))
	now := t0
	for i := range 600 {
		now += r.Int64N(300) - 40 // now and then back in time, as a replay may go
		c := randomCall(r, now)
		replies := make([]string, len(schemas))
		for j, schema := range schemas {
			replies[j] = c.run(ctx, pool, schema)
		}
		if replies[0] != replies[1] {
			t.Fatalf("call %d, %s: migrations 1-6 reply %s, functions.sql %s", i, c, replies[0], replies[1])
		}
		if a, b := rows(t, pool, old), rows(t, pool, freshSchemaName); !slices.Equal(a, b) {
			t.Fatalf("call %d, %s: rows after migrations 1-6's functions\n%s\nafter functions.sql's\n%s", i, c, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
	kept := rows(t, pool, old)

	upgraded, err := pgstore.New(pool, pgstore.Config{Schema: old, SweepInterval: -1})
	if err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	defer upgraded.Close()
	if a, b := layout(t, pool, old), layout(t, pool, freshSchemaName); !slices.Equal(a, b) {
		t.Errorf("upgraded schema differs from a new one:\n%s", lineDiff(a, b))
	}
	if after := rows(t, pool, old); !slices.Equal(after, kept) {
		t.Errorf("rows changed by the upgrade:\n%s", lineDiff(kept, after))
	}
	// The upgraded schema is up to date: starting again changes nothing.
	again, err := pgstore.New(pool, pgstore.Config{Schema: old, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	again.Close()

	// The leases the old functions granted still count.
	held := count(t, pool, "SELECT count(*) FROM "+pgx.Identifier{old}.Sanitize()+".leases WHERE expires_at > $1", now)
	if a, err := upgraded.Admit(ctx, now, "jobs", "k", "new", 3, 1000); err != nil || a.Allowed != (held < 3) || a.Allowed && a.InFlight != int64(held+1) {
		t.Errorf("Admit after upgrading: %+v, %v", a, err)
	}
	t.Run("vectors", func(t *testing.T) { storetest.Vectors(t, upgraded) })
	t.Run("strategyChange", func(t *testing.T) { storetest.StrategyChange(t, upgraded) })
	t.Run("sameAsMemory", func(t *testing.T) { storetest.SameAsMemory(t, upgraded, 7, 300) })
}

// TestRefusesSchemaBeforeSquash: a schema at a migration before the squash this build starts from
// is refused, and left as it is.
func TestRefusesSchemaBeforeSquash(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	if err := v6.ApplyTo(context.Background(), pool, schema, 3); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.New(pool, pgstore.Config{Schema: schema, SweepInterval: -1})
	var oe *pgmigrate.OlderError
	if !errors.As(err, &oe) || oe.Have != 3 {
		t.Fatalf("New on a schema at migration 3: %v, want an *OlderError", err)
	}
	if n := count(t, pool, "SELECT max(version) FROM "+pgx.Identifier{schema}.Sanitize()+".migrations"); n != 3 {
		t.Errorf("schema at migration %d, want 3", n)
	}
}

// call is one call of decide (or debit) as the store makes them, with random steps.
type call struct {
	fn   string // decide, debit or admit
	args []any
}

func (c call) String() string { return fmt.Sprintf("%s%v", c.fn, c.args) }

// run runs c in schema and returns its reply, or its error, as text.
func (c call) run(ctx context.Context, pool *pgxpool.Pool, schema string) string {
	q := pgx.Identifier{schema}.Sanitize()
	var sql string
	switch c.fn {
	case "admit":
		sql = "SELECT " + q + ".admit($1::bytea, $2::bigint, $3::text, $4::text, $5::text, $6::bigint, $7::bigint, $8::bigint, 0)::float8[]"
	default:
		sql = "SELECT " + q + "." + c.fn + "($1::text, $2::bigint, $3::int, $4::bigint, 0, $5::text[], $6::text[], $7::smallint[]," +
			" $8::int[], $9::text[], $10::float8[], $11::bigint[], $12::float8[])"
	}
	var out []float64
	if err := pool.QueryRow(ctx, sql, c.args...).Scan(&out); err != nil {
		// The schema's name may be in the message: leave it out.
		return "error " + strings.ReplaceAll(err.Error(), schema, "S")
	}
	return fmt.Sprint(out)
}

// randomCall returns a call at now: an operation on one to three limits of a few policies and keys,
// each of a strategy its policy usually has, and now and then another (a strategy changed by a
// reload), or an Admit.
func randomCall(r *rand.Rand, now int64) call {
	if r.IntN(12) == 0 {
		// The slot and lock of jobs and k, as the store computes them (slotOf).
		b := binary.BigEndian.AppendUint64(nil, uint64(len("jobs")))
		slot := sha256.Sum256(append(b, "jobsk"...))
		lock := int64(binary.BigEndian.Uint64(slot[:]))
		return call{fn: "admit", args: []any{slot[:], lock, "jobs", "k", "h" + strconv.Itoa(r.IntN(4)), int64(3), int64(500 + r.IntN(1000)), now}}
	}
	ops := []string{"c", "c", "c", "p", "f", "r", "d"}
	op := ops[r.IntN(len(ops))]
	fn := "decide"
	if op == "d" {
		fn = "debit"
	}
	type row struct {
		policy, key string
		i           int16
	}
	var steps []row
	for range 1 + r.IntN(3) {
		steps = append(steps, row{"p" + strconv.Itoa(r.IntN(5)), "k" + strconv.Itoa(r.IntN(2)), int16(r.IntN(2))})
	}
	rowsUsed := slices.Clone(steps)
	slices.SortFunc(rowsUsed, func(a, b row) int {
		return strings.Compare(fmt.Sprint(a.policy, "\x00", a.key, "\x00", a.i), fmt.Sprint(b.policy, "\x00", b.key, "\x00", b.i))
	})
	rowsUsed = slices.Compact(rowsUsed)
	var policies, keys, kinds []string
	var idx []int16
	var stepRow []int32
	var params, bounds []float64
	var costs []int64
	for _, rw := range rowsUsed {
		policies, keys, idx = append(policies, rw.policy), append(keys, rw.key), append(idx, rw.i)
	}
	const kindsOf = "gtfsl"
	for _, st := range steps {
		stepRow = append(stepRow, int32(slices.Index(rowsUsed, st)+1))
		pn, _ := strconv.Atoi(st.policy[1:])
		kind := kindsOf[pn]
		if r.IntN(8) == 0 {
			kind = kindsOf[r.IntN(len(kindsOf))]
		}
		kinds = append(kinds, string(kind))
		lim := float64(1 + r.IntN(8))
		b := []float64{0, 0, 0, 0}
		switch kind {
		case 'g':
			params = append(params, lim, float64([]int{7, 100, 1000}[r.IntN(3)]), float64(1+r.IntN(8)))
		case 't':
			params = append(params, lim, []float64{0.5, 2.5, 10}[r.IntN(3)], 0)
		case 'f':
			win := float64([]int{0, 500, 1000}[r.IntN(3)])
			if win == 0 { // calendar windows: three of 700 ms around now
				start := float64(now - now%700 - 700)
				b = []float64{start, start + 700, start + 1400, start + 2100}
			}
			params = append(params, lim, win, 0)
		case 's':
			params = append(params, lim, 1000, float64(1+r.IntN(4)))
		case 'l':
			params = append(params, lim, 800, 0)
		}
		bounds = append(bounds, b...)
		costs = append(costs, int64(1+r.IntN(3)))
	}
	perGroup := int32(len(steps))
	if r.IntN(2) == 0 {
		perGroup = 1
	}
	round := int64([]int{0, 1000}[r.IntN(2)])
	return call{fn: fn, args: []any{op, now, perGroup, round, policies, keys, idx, stepRow, kinds, params, costs, bounds}}
}

// rows are schema's limits and leases, as text.
func rows(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	return lines(t, pool, schema,
		"SELECT format('%s %s %s %s %s', policy, key, i, state, idle_at) FROM "+q+".limits",
		"SELECT format('%s %s %s %s %s', encode(slot, 'hex'), holder, name, key, expires_at) FROM "+q+".leases")
}

// layout describes schema's objects, its name replaced by S: what an upgraded schema must share
// with a new one.
func layout(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	const ns = "(SELECT oid FROM pg_namespace WHERE nspname = $1)"
	return lines(t, pool, schema,
		// Tables, indexes and types, with their options and columns in order.
		"SELECT format('relation %s %s %s', relname, relkind, reloptions) FROM pg_class WHERE relnamespace = "+ns,
		"SELECT format('column %s.%s %s %s %s %s', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"+
			" pg_get_expr(d.adbin, d.adrelid)) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"+
			" LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"+
			" WHERE c.relnamespace = "+ns+" AND a.attnum > 0 AND NOT a.attisdropped",
		"SELECT format('index %s', pg_get_indexdef(i.indexrelid)) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = "+ns,
		"SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint WHERE connamespace = "+ns,
		"SELECT format('type %s %s', typname, typtype) FROM pg_type WHERE typnamespace = "+ns,
		// Functions, whole: arguments, result, language, volatility, settings and body.
		"SELECT pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = "+ns,
		"SELECT format('migration %s', version) FROM "+q+".migrations",
		"SELECT format('functions %s', sha256) FROM "+q+".functions")
}

// lines runs queries of one text column (a $1, if any, is schema) and returns their rows, sorted,
// with schema's name replaced by S.
func lines(t *testing.T, pool *pgxpool.Pool, schema string, queries ...string) []string {
	t.Helper()
	var out []string
	for _, query := range queries {
		var args []any
		if strings.Contains(query, "$1") {
			args = append(args, schema)
		}
		rs, err := pool.Query(context.Background(), query, args...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		got, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		for _, s := range got {
			out = append(out, strings.ReplaceAll(s, schema, "S"))
		}
	}
	slices.Sort(out)
	return out
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b []string) string {
	var d []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			d = append(d, "- "+s)
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			d = append(d, "+ "+s)
		}
	}
	return strings.Join(d, "\n")
}
