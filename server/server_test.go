package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memory"
)

const t0 = 1_700_000_000_000

const yamlConfig = `
storeTimeout: 20ms
policies:
  open-api: {strategy: fixedWindow, limit: 3, window: 1m}
  closed-api: {strategy: fixedWindow, limit: 3, window: 1m, failMode: closed}
`

func parse(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newServer(t *testing.T, store sluice.Store, opts server.Options) *server.Server {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(parse(t, yamlConfig), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func memStore(t testing.TB) *memory.Store {
	t.Helper()
	s := memory.New(memory.Config{Now: func() int64 { return t0 }, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// brokenStore is a store that cannot answer: it fails at once, or waits for the caller's deadline.
type brokenStore struct {
	sluice.Store
	hang bool
}

func (b brokenStore) wait(ctx context.Context) error {
	if b.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("connection refused")
}

func (b brokenStore) Check(ctx context.Context, _ int64, _ *sluice.Policy, _ string, _ int64) (sluice.Decision, error) {
	return sluice.Decision{}, b.wait(ctx)
}

func (b brokenStore) CheckMany(ctx context.Context, _ int64, _ *sluice.Policy, _ []string, _ int64, _ []sluice.Decision) error {
	return b.wait(ctx)
}

func (b brokenStore) CheckAll(ctx context.Context, _ int64, _ []*sluice.Policy, _ []sluice.Item, _ []sluice.Decision) error {
	return b.wait(ctx)
}

func (b brokenStore) Peek(ctx context.Context, _ int64, _ *sluice.Policy, _ string) (sluice.Decision, error) {
	return sluice.Decision{}, b.wait(ctx)
}

func TestFailModes(t *testing.T) {
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "store fails", true: "store hangs past the timeout"}[hang]
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, brokenStore{hang: hang}, server.Options{})
			ctx := context.Background()
			start := time.Now()
			d, err := srv.Check(ctx, 0, "open-api", "k", 1)
			if err != nil || !d.Allowed {
				t.Errorf("fail-open check: %+v, %v; want allowed", d, err)
			}
			if hang && time.Since(start) > time.Second {
				t.Errorf("a hanging store held the check %v; the timeout is 20ms", time.Since(start))
			}
			if _, err := srv.Check(ctx, 0, "closed-api", "k", 1); !errors.Is(err, sluice.ErrUnavailable) || server.CodeOf(err) != server.CodeUnavailable {
				t.Errorf("fail-closed check: %v; want ErrUnavailable", err)
			}
			ds, err := srv.CheckMany(ctx, 0, "open-api", []string{"a", "b"}, 1)
			if err != nil || len(ds) != 2 || !ds[0].Allowed || !ds[1].Allowed {
				t.Errorf("fail-open CheckMany: %+v, %v", ds, err)
			}
			items := []sluice.Item{{Policy: "open-api", Key: "a", Cost: 1}, {Policy: "closed-api", Key: "a", Cost: 1}}
			if _, err := srv.CheckAll(ctx, 0, items); !errors.Is(err, sluice.ErrUnavailable) {
				t.Errorf("CheckAll with a fail-closed item: %v; want ErrUnavailable", err)
			}
			if _, err := srv.Peek(ctx, 0, "open-api", "k"); !errors.Is(err, sluice.ErrUnavailable) {
				t.Errorf("Peek: %v; want ErrUnavailable whatever the fail mode", err)
			}
			// Bad input never reaches the store, whatever state it is in.
			if _, err := srv.Check(ctx, 0, "open-api", "", 1); server.CodeOf(err) != server.CodeInvalid {
				t.Errorf("empty key: %v; want CodeInvalid", err)
			}
			if _, err := srv.Check(ctx, 0, "nope", "k", 1); server.CodeOf(err) != server.CodeNotFound {
				t.Errorf("unknown policy: %v; want CodeNotFound", err)
			}
		})
	}
}

func TestCallerCancellationIsNotAStoreFailure(t *testing.T) {
	srv := newServer(t, brokenStore{hang: true}, server.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := srv.Check(ctx, 0, "open-api", "k", 1); err == nil || d.Allowed {
		t.Errorf("cancelled check: %+v, %v; want the cancellation, not a fail-open allow", d, err)
	}
}

func TestClientTime(t *testing.T) {
	tests := []struct {
		name  string
		allow bool
		now   int64
		code  server.Code
	}{
		{"server clock", false, 0, server.CodeOK},
		{"refused without the option", false, t0 + 5, server.CodeInvalid},
		{"honoured with the option", true, t0 + 5, server.CodeOK},
		{"negative", true, -1, server.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, memStore(t), server.Options{AllowClientTime: tt.allow})
			d, err := srv.Check(context.Background(), tt.now, "open-api", "k", 1)
			if got := server.CodeOf(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
			// The window is epoch-aligned: it ends at the next multiple of 60 s after the instant used.
			if want := tt.now/60_000*60_000 + 60_000; err == nil && tt.now > 0 && d.ResetAt != want {
				t.Errorf("resetAt %d, want %d: the client's instant was not used", d.ResetAt, want)
			}
		})
	}
}

func TestReloadKeepsUnchangedState(t *testing.T) {
	srv := newServer(t, memStore(t), server.Options{})
	ctx := context.Background()
	for range 3 {
		srv.Check(ctx, 0, "open-api", "k", 1)
	}
	next := parse(t, yamlConfig+"  extra: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n")
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	if d, _ := srv.Check(ctx, 0, "open-api", "k", 1); d.Allowed {
		t.Error("open-api forgot its spent budget across a reload that left it unchanged")
	}
	if d, err := srv.Check(ctx, 0, "extra", "k", 1); err != nil || !d.Allowed {
		t.Errorf("the new policy: %+v, %v", d, err)
	}
	if srv.Config() != next {
		t.Error("Config does not return the reloaded config")
	}
}

func TestMetrics(t *testing.T) {
	srv := newServer(t, memStore(t), server.Options{})
	ctx := context.Background()
	for range 4 {
		srv.Check(ctx, 0, "open-api", "k", 1)
	}
	srv.Check(ctx, 0, "no-such-policy", "k", 1)
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",policy="open-api"} 3`,
		`sluice_decisions_total{outcome="denied",policy="open-api"} 1`,
		`sluice_decisions_total{outcome="error",policy="(unknown)"} 1`,
		`sluice_keys 1`,
		`sluice_decision_seconds_count{op="check"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `"k"`) {
		t.Error("a key appears in the metrics")
	}
}

// storeWithDefaults is a store that names its default timeout and counts late calls.
type storeWithDefaults struct {
	sluice.Store
	timeout time.Duration
	late    uint64
}

func (s storeWithDefaults) DefaultTimeout() time.Duration { return s.timeout }
func (s storeWithDefaults) Late() uint64                  { return s.late }

func TestStoreDefaults(t *testing.T) {
	unset := parse(t, strings.Replace(yamlConfig, "storeTimeout: 20ms\n", "", 1))
	st := storeWithDefaults{Store: memStore(t), timeout: 123 * time.Millisecond, late: 7}
	srv, err := server.New(unset, st, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.StoreTimeout(); got != st.timeout {
		t.Errorf("StoreTimeout() = %v with a config that sets none, want the store's %v", got, st.timeout)
	}
	cfg := parse(t, yamlConfig)
	cfg.StoreTimeout = time.Second
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := srv.StoreTimeout(); got != time.Second {
		t.Errorf("StoreTimeout() = %v with a config that sets 1s", got)
	}
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := "sluice_store_late_total 7"; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
	for _, tt := range []struct {
		name  string
		store sluice.Store
		opts  server.Options
		want  time.Duration
	}{
		{"a store that names no default", struct{ sluice.Store }{memStore(t)}, server.Options{}, server.DefaultStoreTimeout},
		{"a local store", memStore(t), server.Options{Local: true}, 0},
		{"a local store, with a timeout in the config", memStore(t), server.Options{Local: true}, 0},
	} {
		cfg := unset
		if strings.Contains(tt.name, "in the config") {
			cfg = parse(t, yamlConfig)
		}
		srv, err := server.New(cfg, tt.store, tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.StoreTimeout(); got != tt.want {
			t.Errorf("StoreTimeout() = %v for %s, want %v", got, tt.name, tt.want)
		}
	}
}

func TestExtraPolicies(t *testing.T) {
	srv := newServer(t, memStore(t), server.Options{})
	extra := sluice.MustPolicy("envoy:minute:5", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}})
	if err := srv.SetExtraPolicies("envoy", []*sluice.Policy{extra}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(parse(t, yamlConfig)); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Limiter().Policy("envoy:minute:5"); !ok {
		t.Error("a reload dropped a front end's policies")
	}
	clash := sluice.MustPolicy("open-api", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}})
	if err := srv.SetExtraPolicies("envoy", []*sluice.Policy{clash}); err == nil {
		t.Fatal("a front end's policy named like a config policy was accepted")
	}
	if _, ok := srv.Limiter().Policy("envoy:minute:5"); !ok {
		t.Error("a rejected SetExtraPolicies changed the policy set")
	}
}

// unsupportedStore is a store that implements no Forecast.
type unsupportedStore struct{ *memory.Store }

func (unsupportedStore) Forecast(context.Context, int64, *sluice.Policy, string, int64) (sluice.Forecast, error) {
	return sluice.Forecast{}, sluice.ErrUnsupported
}

func TestUnsupportedIsNotAStoreFailure(t *testing.T) {
	srv := newServer(t, unsupportedStore{memStore(t)}, server.Options{})
	_, err := srv.Forecast(context.Background(), 0, "closed-api", "k", 1)
	if server.CodeOf(err) != server.CodeUnimplemented || errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Forecast: %v (code %v); want CodeUnimplemented, not a store failure", err, server.CodeOf(err))
	}
}
