package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
)

const nearConfig = `
storeTimeout: 20ms
policies:
  cached: {strategy: fixedWindow, limit: 1, window: 1m, nearCache: true}
  plain: {strategy: fixedWindow, limit: 1, window: 1m}
`

// sharedStore stands for a shared store such as Redis: a memory store that is not a *memory.Store,
// counting the checks that reach it, and failing them all once broken.
type sharedStore struct {
	sluice.Store
	checks atomic.Int64 // keys checked: one per Check, one per key of CheckMany
	broken atomic.Bool
}

func (s *sharedStore) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	s.checks.Add(1)
	if s.broken.Load() {
		return sluice.Decision{}, errors.New("connection refused")
	}
	return s.Store.Check(ctx, now, p, key, cost)
}

func (s *sharedStore) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	s.checks.Add(int64(len(keys)))
	if s.broken.Load() {
		return errors.New("connection refused")
	}
	return s.Store.CheckMany(ctx, now, p, keys, cost, out)
}

func newNearServer(t *testing.T, store sluice.Store, cfg *config.Config, local bool) *server.Server {
	t.Helper()
	srv, err := server.New(cfg, store, server.Options{AllowClientTime: true, Local: local, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func scrape(srv *server.Server) string {
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestNearCache: over a shared store, repeated denied checks of a nearCache policy are answered
// without the store and counted by policy; a policy without it always asks the store; a reload
// switches it.
func TestNearCache(t *testing.T) {
	store := &sharedStore{Store: memStore(t)}
	srv := newNearServer(t, store, parse(t, nearConfig), false)
	ctx := context.Background()
	steps := []struct {
		policy, key string
		at          int64
		allowed     bool
		asked       int64 // checks reaching the store so far
	}{
		{"cached", "k", t0, true, 1},
		{"cached", "k", t0 + 1, false, 2}, // denied by the store until the minute ends
		{"cached", "k", t0 + 2, false, 2},
		{"cached", "k", t0 + 3, false, 2},
		{"cached", "k", t0 + 4, false, 2},
		{"cached", "other", t0 + 4, true, 3},
		{"plain", "k", t0, true, 4},
		{"plain", "k", t0 + 1, false, 5},
		{"plain", "k", t0 + 2, false, 6},
	}
	for i, st := range steps {
		d, err := srv.Check(ctx, st.at, st.policy, st.key, 1)
		if err != nil || d.Allowed != st.allowed || store.checks.Load() != st.asked {
			t.Fatalf("step %d, %s %s at t0+%d: %+v, %v, store asked %d times; want allowed %v, %d times",
				i, st.policy, st.key, st.at-t0, d, err, store.checks.Load(), st.allowed, st.asked)
		}
	}
	ds, err := srv.CheckMany(ctx, t0+5, "cached", []string{"k", "new"}, 1)
	if err != nil || ds[0].Allowed || !ds[1].Allowed || store.checks.Load() != 7 {
		t.Fatalf("CheckMany: %+v, %v, store asked %d times; want k local, new from the store", ds, err, store.checks.Load())
	}
	body := scrape(srv)
	for _, want := range []string{
		`sluice_near_cache_answers_total{policy="cached"} 4`,
		`sluice_decisions_total{outcome="denied",policy="cached"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `sluice_near_cache_answers_total{policy="plain"}`) || strings.Contains(body, `"k"`) {
		t.Error("metrics count a policy without nearCache, or show a key")
	}

	// A reload turns the cache off for cached and on for plain.
	swapped := strings.NewReplacer("1m, nearCache: true}", "1m}", "plain: {strategy: fixedWindow, limit: 1, window: 1m}",
		"plain: {strategy: fixedWindow, limit: 1, window: 1m, nearCache: true}").Replace(nearConfig)
	if err := srv.Reload(parse(t, swapped)); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"cached", "plain", "plain", "plain"} {
		srv.Check(ctx, t0+6, policy, "k", 1)
	}
	if got := store.checks.Load(); got != 7+2 {
		t.Errorf("after the reload the store was asked %d more times; want 2 (cached, then plain once)", got-7)
	}
	if !strings.Contains(scrape(srv), `sluice_near_cache_answers_total{policy="plain"} 2`) {
		t.Error("plain's local answers are not counted after the reload")
	}
}

// TestNearCacheOutsideTheGuard: when the store fails, what the near cache knows is still denied;
// the fail mode decides only what had to go to the store.
func TestNearCacheOutsideTheGuard(t *testing.T) {
	store := &sharedStore{Store: memStore(t)}
	srv := newNearServer(t, store, parse(t, nearConfig), false)
	ctx := context.Background()
	srv.Check(ctx, t0, "cached", "k", 1)
	if d, _ := srv.Check(ctx, t0+1, "cached", "k", 1); d.Allowed {
		t.Fatal("not denied")
	}
	store.broken.Store(true)
	if d, err := srv.Check(ctx, t0+2, "cached", "k", 1); err != nil || d.Allowed {
		t.Errorf("a known denial with the store down: %+v, %v; want denied", d, err)
	}
	ds, err := srv.CheckMany(ctx, t0+3, "cached", []string{"k", "j"}, 1)
	if err != nil || len(ds) != 2 || ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("CheckMany with the store down: %+v, %v; want k denied by the cache, j allowed by the fail mode", ds, err)
	}
	body := scrape(srv)
	for _, want := range []string{
		`sluice_fail_mode_decisions_total{mode="open",policy="cached"} 1`,
		`sluice_store_errors_total{kind="error"} 1`,
		`sluice_near_cache_answers_total{policy="cached"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestNoNearCacheOverMemory: the memory store is not wrapped; it gains nothing from the cache.
func TestNoNearCacheOverLocalStore(t *testing.T) {
	srv := newNearServer(t, memStore(t), parse(t, nearConfig), true)
	for i := range int64(4) {
		srv.Check(context.Background(), t0+i, "cached", "k", 1)
	}
	body := scrape(srv)
	if strings.Contains(body, "sluice_near_cache_answers_total{") || !strings.Contains(body, `sluice_decisions_total{outcome="denied",policy="cached"} 3`) {
		t.Errorf("over a local store the near cache answered, or the decisions are wrong:\n%s", body)
	}
}
