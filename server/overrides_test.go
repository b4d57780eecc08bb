package server_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
)

const plansConfig = `
policies:
  api:
    plans:
      free: {strategy: fixedWindow, limit: 10, window: 1h}
      pro:  {strategy: fixedWindow, limit: 100, window: 1h}
    plan: free
    lease: true
`

// plansServer is a Server of cfg over a memory store, closed when the test ends.
func plansServer(t *testing.T, cfg *config.Config, opts server.Options) *server.Server {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(cfg, memStore(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

// checkOf checks key of api once at the server's clock and returns what it reported.
func checkOf(t *testing.T, srv *server.Server, key string) (limit int64, plan string, override bool) {
	t.Helper()
	d, err := srv.Check(context.Background(), 0, "api", key, 1)
	if err != nil {
		t.Fatalf("Check(%s): %v", key, err)
	}
	return d.Limit, d.Plan, d.Override
}

// An override names a plan; a reload that changes the plan changes what the override applies, and
// one that removes the plan ends the override's effect (the policy's default applies).
func TestOverridesFollowReloads(t *testing.T) {
	srv := plansServer(t, parse(t, plansConfig), server.Options{Local: true})
	ctx := context.Background()
	if err := srv.Overrides().Set(ctx, overrides.Override{Policy: "api", Key: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		limit    int64
		plan     string
		override bool
	}
	steps := []struct {
		name   string
		config string // "" keeps the one in force
		key    string
		want   seen
	}{
		{name: "the plan the override names", key: "acme", want: seen{100, "pro", true}},
		{name: "another key: the default plan", key: "initech", want: seen{10, "free", false}},
		{name: "pro raised by a reload", config: `
policies:
  api:
    plans:
      free: {strategy: fixedWindow, limit: 10, window: 1h}
      pro:  {strategy: fixedWindow, limit: 200, window: 1h}
    plan: free
`, key: "acme", want: seen{200, "pro", true}},
		{name: "pro removed by a reload", config: `
policies:
  api:
    plans:
      free: {strategy: fixedWindow, limit: 10, window: 1h}
    plan: free
`, key: "acme", want: seen{10, "free", false}},
	}
	for _, st := range steps {
		if st.config != "" {
			if err := srv.Reload(parse(t, st.config)); err != nil {
				t.Fatalf("%s: Reload: %v", st.name, err)
			}
		}
		limit, plan, over := checkOf(t, srv, st.key)
		if got := (seen{limit, plan, over}); got != st.want {
			t.Errorf("%s: check of %s = %+v, want %+v", st.name, st.key, got, st.want)
		}
	}
}

// A key with an override on a leased policy is checked at the store, under its override; the
// other keys are leased.
func TestOverriddenKeysAreNotLeased(t *testing.T) {
	store := &countingStore{Store: memStore(t)}
	srv, err := server.New(parse(t, plansConfig), store, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	ctx := context.Background()
	if err := srv.Overrides().Set(ctx, overrides.Override{Policy: "api", Key: "acme", Limits: []overrides.Limit{{Strategy: "fixedWindow", Limit: 5, WindowMs: 3_600_000}}}); err != nil {
		t.Fatal(err)
	}
	before := store.checks.Load()
	allowed := 0
	for range 8 {
		d, err := srv.Check(ctx, 0, "api", "acme", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
		if d.Limit != 5 || !d.Override || d.Plan != "" {
			t.Fatalf("check of acme = %+v, want limit 5 of its own override", d)
		}
	}
	if calls := store.checks.Load() - before; allowed != 5 || calls != 8 {
		t.Errorf("8 checks of the overridden key: %d allowed in %d store calls, want 5 in 8", allowed, calls)
	}
	if limit, plan, over := checkOf(t, srv, "initech"); limit != 10 || plan != "free" || over {
		t.Errorf("a leased key = %d %q %v, want the default plan free of 10", limit, plan, over)
	}
}

// On the embedded store, the config's overrides.file keeps the overrides across a restart.
func TestOverridesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "overrides.json")
	cfg := parse(t, plansConfig+"overrides: {file: "+file+"}\n")
	srv1 := plansServer(t, cfg, server.Options{Local: true})
	if err := srv1.Overrides().Set(context.Background(), overrides.Override{Policy: "api", Key: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	_ = srv1.Close(context.Background())
	srv2 := plansServer(t, cfg, server.Options{Local: true})
	if limit, plan, over := checkOf(t, srv2, "acme"); limit != 100 || plan != "pro" || !over {
		t.Errorf("after a restart, acme = %d %q %v; want plan pro by override", limit, plan, over)
	}
}
