package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/overrides/overridestest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// overridesHarness opens PostgreSQL overrides backends, each on a pool of its own (a process of
// its own), in a schema for the test alone; cut terminates the backends that listen on its
// channel.
func overridesHarness() overridestest.Harness {
	return overridestest.Harness{Fresh: func(t *testing.T) (func() overrides.Backend, func()) {
		t.Helper()
		admin := testPool(t)
		schema := freshSchema(t, admin)
		var channel string
		open := func() overrides.Backend {
			t.Helper()
			pool, err := pgxpool.New(context.Background(), dbURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			b, err := pgstore.NewOverrides(context.Background(), pool, schema)
			if err != nil {
				t.Fatal(err)
			}
			channel = b.Channel()
			return b
		}
		cut := func() {
			t.Helper()
			n := count(t, admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN ' || quote_ident($1)", channel)
			if n == 0 {
				t.Fatalf("no backend listening on %s to terminate", channel)
			}
			t.Logf("terminated %d listening backends", n)
		}
		return open, cut
	}}
}

// TestOverrides runs package overridestest's fleet checks on PostgreSQL: three Tables on one
// schema see each other's changes within a second, expiry, restart, a terminated listener.
func TestOverrides(t *testing.T) {
	t.Parallel()
	overridestest.Run(t, overridesHarness())
}

// TestOverridesRows: a row per override, its key as the limits table stores keys, and expire
// deletes only a row expired by the instant given.
func TestOverridesRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	b, err := pgstore.NewOverrides(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	o := overrides.Override{Policy: "api", Key: "a\x00b", Plan: "pro", ExpiresAt: 1000, UpdatedAt: 5}
	for i, want := range []bool{false, true} {
		if existed, err := b.Apply(ctx, overrides.Change{Op: overrides.OpPut, Override: o}); err != nil || existed != want {
			t.Fatalf("put %d: %v, %v; want %v", i, existed, err, want)
		}
	}
	q := `"` + schema + `"`
	if n := count(t, pool, "SELECT count(*) FROM "+q+".overrides WHERE key = $1 AND expires_at = 1000 AND updated_at = 5", "\x01610062"); n != 1 {
		t.Errorf("%d rows of the escaped key, want 1", n)
	}
	list, err := b.Load(ctx)
	if err != nil || len(list) != 1 || list[0].Key != o.Key {
		t.Fatalf("Load: %+v, %v", list, err)
	}
	overridestest.ExpireByInstant(t, b, o)
}

// A store's Overrides is the backend of its schema: what one writes, an OpenOverrides of the same
// URL reads.
func TestStoreOverrides(t *testing.T) {
	pool := testPool(t)
	schema := freshSchema(t, pool)
	s, err := pgstore.New(pool, pgstore.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b, err := s.Overrides(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := overrides.Override{Policy: "api", Key: "acme", Plan: "pro", UpdatedAt: 1}
	if _, err := b.Apply(ctx, overrides.Change{Op: overrides.OpPut, Override: o}); err != nil {
		t.Fatal(err)
	}
	url := dbURL() + "?sluice_schema=" + schema
	if strings.Contains(dbURL(), "?") {
		url = dbURL() + "&sluice_schema=" + schema
	}
	other, err := pgstore.OpenOverrides(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	got, err := other.Load(ctx)
	if err != nil || len(got) != 1 || got[0].Key != "acme" || got[0].Plan != "pro" {
		t.Errorf("Load through the schema's URL: %+v, %v; want acme on plan pro", got, err)
	}
}
