package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// plansConfig has a policy with plans (free by default, pro) and one without.
const plansConfig = `
policies:
  tiers:
    plans:
      free: {strategy: gcra, limit: 60, period: 1m, burst: 5}
      pro: {strategy: gcra, limit: 600, period: 1m, burst: 50}
    plan: free
  fixed: {strategy: fixedWindow, limit: 100, window: 1m}
`

// plansServer is `sluice serve --allow-client-time` over plansConfig on the memory store, in
// process; stop closes it.
func plansServer(opts httpapi.Options) (url string, stop func(), err error) {
	cfg, err := config.Parse([]byte(plansConfig))
	if err != nil {
		return "", nil, err
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	srv, err := server.New(cfg, store, server.Options{AllowClientTime: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		store.Close()
		return "", nil, err
	}
	ts := httptest.NewServer(httpapi.New(srv, opts))
	return ts.URL, func() { ts.Close(); _ = srv.Close(context.Background()); store.Close() }, nil
}

// overridesClient is a Client of a fresh plansServer.
func overridesClient(t *testing.T, opts httpapi.Options, copts client.Options) *client.Client {
	t.Helper()
	url, stop, err := plansServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return newClient(t, url, copts)
}

func TestOverridesRoundTrip(t *testing.T) {
	c := overridesClient(t, httpapi.Options{}, client.Options{})
	ctx := context.Background()
	tests := []struct {
		name string
		o    overrides.Override
		ttl  time.Duration
	}{
		{"plan", overrides.Override{Policy: "tiers", Key: "acme", Plan: "pro", Reason: "contract"}, 0},
		{"plan for an hour", overrides.Override{Policy: "tiers", Key: "trial", Plan: "pro"}, time.Hour},
		{"plan until an instant", overrides.Override{Policy: "tiers", Key: "until", Plan: "pro", ExpiresAt: 4102444800000}, 0},
		{"own limits", overrides.Override{Policy: "fixed", Key: "scraper",
			Limits: []overrides.Limit{{Strategy: "tokenBucket", Capacity: 3, RefillPerSec: 0.5, Name: "slow", Unit: "request"}}}, 0},
		{"key with slashes", overrides.Override{Policy: "tiers", Key: "org/acme/", Plan: "pro"}, 0},
		{"key with escapes", overrides.Override{Policy: "tiers", Key: "a b%?#ü+", Plan: "pro"}, 0},
		{"key of dots", overrides.Override{Policy: "tiers", Key: "..", Plan: "pro"}, 0},
		{"key of a dot", overrides.Override{Policy: "tiers", Key: ".", Plan: "pro"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().UnixMilli()
			got, err := c.SetOverride(ctx, tt.o, tt.ttl)
			after := time.Now().UnixMilli()
			if err != nil {
				t.Fatal(err)
			}
			want := tt.o
			want.UpdatedAt = got.UpdatedAt
			if tt.ttl > 0 {
				if ms := tt.ttl.Milliseconds(); got.ExpiresAt < before+ms || got.ExpiresAt > after+ms {
					t.Errorf("ExpiresAt %d, want %d to %d", got.ExpiresAt, before+ms, after+ms)
				}
				want.ExpiresAt = got.ExpiresAt
			}
			if got.UpdatedAt < before || got.UpdatedAt > after || !reflect.DeepEqual(got, want) {
				t.Errorf("SetOverride = %+v, want %+v updated from %d to %d", got, want, before, after)
			}
			if read, err := c.GetOverride(ctx, tt.o.Policy, tt.o.Key); err != nil || !reflect.DeepEqual(read, got) {
				t.Errorf("GetOverride = %+v, %v; want %+v", read, err, got)
			}
			list, next, err := c.ListOverrides(ctx, tt.o.Policy, tt.o.Key, "", 0)
			if err != nil || next != "" || len(list) != 1 || !reflect.DeepEqual(list[0], got) {
				t.Errorf("ListOverrides = %+v, %q, %v; want [%+v]", list, next, err, got)
			}
			if ok, err := c.DeleteOverride(ctx, tt.o.Policy, tt.o.Key); !ok || err != nil {
				t.Errorf("DeleteOverride = %v, %v; want true", ok, err)
			}
			_, err = c.GetOverride(ctx, tt.o.Policy, tt.o.Key)
			if !errors.Is(err, client.ErrNotFound) || errors.Is(err, sluice.ErrUnknownPolicy) {
				t.Errorf("GetOverride after the delete: %v, want ErrNotFound alone", err)
			}
			if ok, err := c.DeleteOverride(ctx, tt.o.Policy, tt.o.Key); ok || err != nil {
				t.Errorf("DeleteOverride again = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

func TestListOverridesPages(t *testing.T) {
	c := overridesClient(t, httpapi.Options{}, client.Options{})
	ctx := context.Background()
	for _, key := range []string{"a3", "b1", "a1", "a2"} {
		if _, err := c.SetOverride(ctx, overrides.Override{Policy: "tiers", Key: key, Plan: "pro"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	token, pages := "", 0
	for {
		page, next, err := c.ListOverrides(ctx, "tiers", "a", token, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			keys = append(keys, o.Key)
		}
		if pages++; next == "" {
			break
		}
		token = next
	}
	if strings.Join(keys, " ") != "a1 a2 a3" || pages != 2 {
		t.Errorf("pages of 2 of prefix a: %q in %d pages, want a1 a2 a3 in 2", keys, pages)
	}
	if _, _, err := c.ListOverrides(ctx, "tiers", "", "", 1001); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("limit 1001: %v, want ErrInvalid", err)
	}
}

// TestOverridesBadInput: bad input is a *sluice.InvalidError naming the field, and stores nothing.
func TestOverridesBadInput(t *testing.T) {
	c := overridesClient(t, httpapi.Options{}, client.Options{})
	ctx := context.Background()
	pro := func(key string) overrides.Override { return overrides.Override{Policy: "tiers", Key: key, Plan: "pro"} }
	tests := []struct {
		name  string
		o     overrides.Override
		ttl   time.Duration
		field string // the InvalidError's Field, or its prefix ending in "]"
	}{
		{"unknown plan", overrides.Override{Policy: "tiers", Key: "k", Plan: "gold"}, 0, "plan"},
		{"unknown policy", overrides.Override{Policy: "nope", Key: "k", Plan: "pro"}, 0, "policy"},
		{"empty policy", overrides.Override{Key: "k", Plan: "pro"}, 0, "policy"},
		{"neither plan nor limits", overrides.Override{Policy: "tiers", Key: "k"}, 0, "plan"},
		{"negative capacity", overrides.Override{Policy: "tiers", Key: "k",
			Limits: []overrides.Limit{{Strategy: "tokenBucket", Capacity: -1, RefillPerSec: 1}}}, 0, "limits[0]"},
		{"no strategy", overrides.Override{Policy: "tiers", Key: "k", Limits: []overrides.Limit{{Limit: 1}}}, 0, "limits[0].strategy"},
		{"negative ttl", pro("k"), -time.Second, "ttlMs"},
		{"ttl too long", pro("k"), time.Duration(overrides.MaxTTLMs+1) * time.Millisecond, "ttlMs"},
		{"ttl and ExpiresAt", overrides.Override{Policy: "tiers", Key: "k", Plan: "pro", ExpiresAt: 4102444800000}, time.Hour, "expiresAt"},
		{"ExpiresAt past", overrides.Override{Policy: "tiers", Key: "k", Plan: "pro", ExpiresAt: 1000}, 0, "expiresAt"},
		{"empty key", pro(""), 0, "key"},
		{"key too long", pro(strings.Repeat("k", sluice.MaxKeyLen+1)), 0, "key"},
		{"key not UTF-8", pro("\xff"), 0, "key"},
		{"reason too long", overrides.Override{Policy: "tiers", Key: "k", Plan: "pro", Reason: strings.Repeat("r", overrides.MaxReasonLen+1)}, 0, "reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.SetOverride(ctx, tt.o, tt.ttl)
			var ie *sluice.InvalidError
			if !errors.Is(err, sluice.ErrInvalid) || !errors.As(err, &ie) ||
				ie.Field != tt.field && !(strings.HasSuffix(tt.field, "]") && strings.HasPrefix(ie.Field, tt.field)) {
				t.Fatalf("SetOverride: %v (%#v), want an InvalidError of field %q", err, ie, tt.field)
			}
			for _, policy := range []string{"tiers", "nope"} {
				if list, _, err := c.ListOverrides(ctx, policy, "", "", 0); err != nil || len(list) != 0 {
					t.Errorf("%s holds %+v (%v), want nothing", policy, list, err)
				}
			}
		})
	}
	for _, key := range []string{"", strings.Repeat("k", sluice.MaxKeyLen+1)} {
		if _, err := c.GetOverride(ctx, "tiers", key); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("GetOverride of a key of %d bytes: %v, want ErrInvalid", len(key), err)
		}
		if _, err := c.DeleteOverride(ctx, "tiers", key); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("DeleteOverride of a key of %d bytes: %v, want ErrInvalid", len(key), err)
		}
	}
}

func TestOverridesTokens(t *testing.T) {
	set, err := bearer.Parse([]byte("check:c1\nadmin:a1\n"))
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := plansServer(httpapi.Options{Tokens: bearer.NewLive(set)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx := context.Background()
	o := overrides.Override{Policy: "tiers", Key: "acme", Plan: "pro"}
	var ce *client.Error
	if _, err := newClient(t, url, client.Options{Token: "c1"}).SetOverride(ctx, o, 0); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
		t.Errorf("check token: %v, want a 403", err)
	}
	if _, err := newClient(t, url, client.Options{}).GetOverride(ctx, "tiers", "acme"); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("no token: %v, want ErrUnauthorized", err)
	}
	if _, err := newClient(t, url, client.Options{Token: "a1"}).SetOverride(ctx, o, 0); err != nil {
		t.Errorf("admin token: %v", err)
	}
}

// TestOverrideDecisions: decisions the client decodes say which plan and override applied.
func TestOverrideDecisions(t *testing.T) {
	c := overridesClient(t, httpapi.Options{}, client.Options{})
	ctx := sluice.WithNow(context.Background(), t0)
	if _, err := c.SetOverride(ctx, overrides.Override{Policy: "tiers", Key: "acme", Plan: "pro"}, 0); err != nil {
		t.Fatal(err)
	}
	type applied struct {
		Plan     string
		Override bool
		Limit    int64
	}
	of := func(d sluice.Decision) applied { return applied{d.Plan, d.Override, d.Limit} }
	pro, free := applied{"pro", true, 50}, applied{"free", false, 5}
	tests := []struct {
		name string
		call func() ([]sluice.Decision, error)
		want []applied
	}{
		{"check", func() ([]sluice.Decision, error) {
			d, err := c.Check(ctx, "tiers", "acme", 1)
			return []sluice.Decision{d}, err
		}, []applied{pro}},
		{"peek", func() ([]sluice.Decision, error) {
			d, err := c.Peek(ctx, "tiers", "acme")
			return []sluice.Decision{d}, err
		}, []applied{pro}},
		{"check of another key", func() ([]sluice.Decision, error) {
			d, err := c.Check(ctx, "tiers", "other", 1)
			return []sluice.Decision{d}, err
		}, []applied{free}},
		{"check-many", func() ([]sluice.Decision, error) {
			return c.CheckMany(ctx, "tiers", []string{"acme", "other"}, 1)
		}, []applied{pro, free}},
		{"check-all parts", func() ([]sluice.Decision, error) {
			d, err := c.CheckAll(ctx, sluice.Item{Policy: "tiers", Key: "acme", Cost: 1}, sluice.Item{Policy: "tiers", Key: "other", Cost: 1})
			return d.Parts, err
		}, []applied{pro, free}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			var got []applied
			for _, d := range ds {
				got = append(got, of(d))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
