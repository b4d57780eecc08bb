package grpcapi_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/grpcapi"
	"github.com/sluicehq/sluice/store/memory"
)

// plansConfig has a policy with plans: free by default, pro for the keys moved to it.
const plansConfig = `
policies:
  tiers:
    plans:
      free: {strategy: fixedWindow, limit: 10, window: 1m}
      pro: {strategy: fixedWindow, limit: 1000, window: 1m}
    plan: free
`

// serveOverrides serves plansConfig on a memory store, returning a client and the server.
func serveOverrides(t *testing.T, opts ...grpc.ServerOption) (sluicev1.RateLimiterClient, *server.Server) {
	t.Helper()
	mem := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	cfg, err := config.Parse([]byte(plansConfig))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, mem, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	grpcapi.Register(gs, srv)
	return sluicev1.NewRateLimiterClient(dial(t, gs)), srv
}

// setOverride sets req and fails the test on error.
func setOverride(t *testing.T, c sluicev1.RateLimiterClient, req *sluicev1.SetOverrideRequest) *sluicev1.Override {
	t.Helper()
	o, err := c.SetOverride(t.Context(), req)
	if err != nil {
		t.Fatalf("SetOverride(%v): %v", req, err)
	}
	return o
}

// sameOverride compares got with want, but for updated_at, which must be set.
func sameOverride(t *testing.T, got, want *sluicev1.Override) {
	t.Helper()
	if got.GetUpdatedAt() <= 0 {
		t.Errorf("updated_at %d, want it set", got.GetUpdatedAt())
	}
	got = proto.CloneOf(got)
	got.UpdatedAt = 0
	if !proto.Equal(got, want) {
		t.Errorf("override\n got %v\nwant %v", got, want)
	}
}

func TestOverridesRoundTrip(t *testing.T) {
	c, _ := serveOverrides(t)
	ctx := t.Context()
	pro := &sluicev1.Override{Policy: "tiers", Key: "acme-1", Plan: "pro", Reason: "signed up"}
	own := &sluicev1.Override{Policy: "tiers", Key: "acme-2", Limits: []*sluicev1.OverrideLimit{
		{Name: "requests", Unit: "request", Strategy: "gcra", Limit: 5, PeriodMs: 1000, Burst: 5},
	}}
	other := &sluicev1.Override{Policy: "tiers", Key: "beta", Plan: "free"}

	sameOverride(t, setOverride(t, c, &sluicev1.SetOverrideRequest{Override: pro}), pro)
	before := time.Now().UnixMilli()
	got := setOverride(t, c, &sluicev1.SetOverrideRequest{Override: own, TtlMs: 3_600_000})
	after := time.Now().UnixMilli()
	if at := got.GetExpiresAt(); at < before+3_600_000 || at > after+3_600_000 {
		t.Errorf("expires_at %d, want ttl_ms from the server's clock, in [%d, %d]", at, before+3_600_000, after+3_600_000)
	}
	own = proto.CloneOf(own)
	own.ExpiresAt = got.GetExpiresAt()
	sameOverride(t, got, own)
	setOverride(t, c, &sluicev1.SetOverrideRequest{Override: other})

	for _, want := range []*sluicev1.Override{pro, own, other} {
		got, err := c.GetOverride(ctx, &sluicev1.OverrideRef{Policy: want.Policy, Key: want.Key})
		if err != nil {
			t.Fatalf("GetOverride(%s): %v", want.Key, err)
		}
		sameOverride(t, got, want)
	}

	// Pages of one, of the keys starting "acme-": beta is left out.
	var keys []string
	token := ""
	for range 3 {
		page, err := c.ListOverrides(ctx, &sluicev1.ListOverridesRequest{Policy: "tiers", Prefix: "acme-", PageToken: token, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.GetOverrides() {
			keys = append(keys, o.GetKey())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(keys, ",") != "acme-1,acme-2" || token != "" {
		t.Errorf("listed %q (next %q), want acme-1, acme-2 and no next page", keys, token)
	}

	for _, step := range []struct {
		name string
		key  string
		want bool
	}{
		{"delete one", "acme-1", true},
		{"delete it again", "acme-1", false},
		{"delete none", "nobody", false},
	} {
		d, err := c.DeleteOverride(ctx, &sluicev1.OverrideRef{Policy: "tiers", Key: step.key})
		if err != nil || d.GetDeleted() != step.want {
			t.Errorf("%s: deleted %v, %v; want %v", step.name, d.GetDeleted(), err, step.want)
		}
	}
	_, err := c.GetOverride(ctx, &sluicev1.OverrideRef{Policy: "tiers", Key: "acme-1"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"tiers"`) || !strings.Contains(err.Error(), `"acme-1"`) {
		t.Errorf("get of a deleted override: %v, want NOT_FOUND naming the policy and key", err)
	}
}

func TestOverridesRefused(t *testing.T) {
	set := func(req *sluicev1.SetOverrideRequest) func(context.Context, sluicev1.RateLimiterClient) error {
		return func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.SetOverride(ctx, req)
			return err
		}
	}
	list := func(req *sluicev1.ListOverridesRequest) func(context.Context, sluicev1.RateLimiterClient) error {
		return func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.ListOverrides(ctx, req)
			return err
		}
	}
	planned := func(policy, key, plan string) *sluicev1.Override {
		return &sluicev1.Override{Policy: policy, Key: key, Plan: plan}
	}
	tests := []struct {
		name      string
		call      func(context.Context, sluicev1.RateLimiterClient) error
		wantField string
	}{
		{"unknown plan", set(&sluicev1.SetOverrideRequest{Override: planned("tiers", "k", "gold")}), "override.plan"},
		{"invalid custom limit", set(&sluicev1.SetOverrideRequest{Override: &sluicev1.Override{Policy: "tiers", Key: "k", Limits: []*sluicev1.OverrideLimit{
			{Strategy: "tokenBucket", Capacity: -1, RefillPerSec: 1},
		}}}), "override.limits[0].capacity"},
		{"negative ttl", set(&sluicev1.SetOverrideRequest{Override: planned("tiers", "k", "pro"), TtlMs: -1}), "ttlMs"},
		{"ttl beside expires_at", set(&sluicev1.SetOverrideRequest{
			Override: &sluicev1.Override{Policy: "tiers", Key: "k", Plan: "pro", ExpiresAt: time.Now().Add(time.Hour).UnixMilli()},
			TtlMs:    1000,
		}), "override.expiresAt"},
		{"unknown policy", set(&sluicev1.SetOverrideRequest{Override: planned("nope", "k", "pro")}), "override.policy"},
		{"no override", set(&sluicev1.SetOverrideRequest{}), "override.policy"},
		{"empty key", set(&sluicev1.SetOverrideRequest{Override: planned("tiers", "", "pro")}), "override.key"},
		{"key too long", set(&sluicev1.SetOverrideRequest{Override: planned("tiers", strings.Repeat("k", sluice.MaxKeyLen+1), "pro")}), "override.key"},
		{"get without key", func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.GetOverride(ctx, &sluicev1.OverrideRef{Policy: "tiers"})
			return err
		}, "key"},
		{"delete without policy", func(ctx context.Context, c sluicev1.RateLimiterClient) error {
			_, err := c.DeleteOverride(ctx, &sluicev1.OverrideRef{Key: "k"})
			return err
		}, "policy"},
		{"list without policy", list(&sluicev1.ListOverridesRequest{}), "policy"},
		{"list over the limit", list(&sluicev1.ListOverridesRequest{Policy: "tiers", Limit: 5000}), "limit"},
		{"list under the limit", list(&sluicev1.ListOverridesRequest{Policy: "tiers", Limit: -1}), "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := serveOverrides(t)
			err := tt.call(t.Context(), c)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("%v, want INVALID_ARGUMENT", err)
			}
			if got := violationField(st); got != tt.wantField {
				t.Errorf("BadRequest field %q, want %q (%v)", got, tt.wantField, err)
			}
			if n := srv.Overrides().Len(); n != 0 {
				t.Errorf("%d overrides stored, want none", n)
			}
		})
	}
}

func TestOverridesNeedAdmin(t *testing.T) {
	set, err := bearer.Parse([]byte("check:c1\nadmin:a1\n"))
	if err != nil {
		t.Fatal(err)
	}
	live := bearer.NewLive(set)
	c, srv := serveOverrides(t, grpc.UnaryInterceptor(grpcapi.UnaryScopes(live)))
	if err := srv.Overrides().Set(t.Context(), overrides.Override{Policy: "tiers", Key: "held", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(context.Context) error{
		"setOverride": func(ctx context.Context) error {
			_, err := c.SetOverride(ctx, &sluicev1.SetOverrideRequest{Override: &sluicev1.Override{Policy: "tiers", Key: "k", Plan: "pro"}})
			return err
		},
		"getOverride": func(ctx context.Context) error {
			_, err := c.GetOverride(ctx, &sluicev1.OverrideRef{Policy: "tiers", Key: "held"})
			return err
		},
		"deleteOverride": func(ctx context.Context) error {
			_, err := c.DeleteOverride(ctx, &sluicev1.OverrideRef{Policy: "tiers", Key: "none"})
			return err
		},
		"listOverrides": func(ctx context.Context) error {
			_, err := c.ListOverrides(ctx, &sluicev1.ListOverridesRequest{Policy: "tiers"})
			return err
		},
	}
	for _, token := range []string{"c1", "a1"} {
		for _, name := range []string{"setOverride", "getOverride", "deleteOverride", "listOverrides"} {
			t.Run(token+" "+name, func(t *testing.T) {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
				err := calls[name](ctx)
				if token == "a1" {
					if err != nil {
						t.Fatalf("admin token: %v", err)
					}
					return
				}
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("check token: %v, want PERMISSION_DENIED", err)
				}
				if msg := status.Convert(err).Message(); msg != "/sluice.v1.RateLimiter/"+title(name)+" needs a token of scope admin" {
					t.Errorf("message %q does not name the scope", msg)
				}
			})
		}
	}
}

func TestDecisionsSayPlanAndOverride(t *testing.T) {
	c, _ := serveOverrides(t)
	setOverride(t, c, &sluicev1.SetOverrideRequest{Override: &sluicev1.Override{Policy: "tiers", Key: "acme", Plan: "pro"}})
	setOverride(t, c, &sluicev1.SetOverrideRequest{Override: &sluicev1.Override{Policy: "tiers", Key: "own", Limits: []*sluicev1.OverrideLimit{
		{Strategy: "fixedWindow", Limit: 3, WindowMs: 60_000},
	}}})
	check := func(ctx context.Context, key string) (*sluicev1.Decision, error) {
		return c.Check(ctx, &sluicev1.CheckRequest{Policy: "tiers", Key: key})
	}
	peek := func(ctx context.Context, key string) (*sluicev1.Decision, error) {
		return c.Peek(ctx, &sluicev1.PeekRequest{Policy: "tiers", Key: key})
	}
	many := func(ctx context.Context, key string) (*sluicev1.Decision, error) {
		r, err := c.CheckMany(ctx, &sluicev1.CheckManyRequest{Policy: "tiers", Keys: []string{key}})
		if err != nil {
			return nil, err
		}
		return r.GetDecisions()[0], nil
	}
	// Of CheckAll each part says its own plan; a second item makes parts of a single-limit policy.
	all := func(ctx context.Context, key string) (*sluicev1.Decision, error) {
		d, err := c.CheckAll(ctx, &sluicev1.CheckAllRequest{Items: []*sluicev1.Item{{Policy: "tiers", Key: key}, {Policy: "tiers", Key: "filler"}}})
		if err != nil {
			return nil, err
		}
		return d.GetParts()[0], nil
	}
	tests := []struct {
		name     string
		call     func(context.Context, string) (*sluicev1.Decision, error)
		key      string
		plan     string
		override bool
		limit    int64
	}{
		{"check of a pro key", check, "acme", "pro", true, 1000},
		{"peek of a pro key", peek, "acme", "pro", true, 1000},
		{"check many of a pro key", many, "acme", "pro", true, 1000},
		{"check all of a pro key", all, "acme", "pro", true, 1000},
		{"check of a key with its own limits", check, "own", "", true, 3},
		{"check of another key", check, "other", "free", false, 10},
		{"peek of another key", peek, "other", "free", false, 10},
		{"check all of another key", all, "other", "free", false, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.call(t.Context(), tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if d.GetPlan() != tt.plan || d.GetOverride() != tt.override || d.GetLimit() != tt.limit {
				t.Errorf("plan %q, override %v, limit %d; want %q, %v, %d", d.GetPlan(), d.GetOverride(), d.GetLimit(), tt.plan, tt.override, tt.limit)
			}
		})
	}
}
