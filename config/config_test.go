package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/stream"
)

func mustParse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

// policy returns the policy named name of c.
func policy(t *testing.T, c *config.Config, name string) config.Policy {
	t.Helper()
	for _, p := range c.Policies {
		if p.Name() == name {
			return p
		}
	}
	t.Fatalf("no policy %q", name)
	return config.Policy{}
}

func TestDefaults(t *testing.T) {
	for _, tt := range []struct{ name, yaml string }{
		{"empty file", ""},
		{"comment only", "# nothing here\n"},
		{"null document", "~"},
		{"empty values", "store: ''\nhttp: ''\ngrpc: ''\nfailMode: ''\nstoreTimeout: ''"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.yaml)
			want := &config.Config{Store: "memory", HTTP: "127.0.0.1:8080", GRPC: "127.0.0.1:8081",
				FailMode: config.FailOpen, MaxKeys: config.DefaultMaxKeys, MaxSlotTTL: config.DefaultMaxSlotTTL,
				MaxSlotLimit: config.DefaultMaxSlotLimit, MaxSettle: config.DefaultMaxSettle}
			want.Network = config.Network{IdleTimeout: config.DefaultIdleTimeout, ReadTimeout: config.DefaultReadTimeout,
				WriteTimeout: config.DefaultWriteTimeout, MaxConnections: config.DefaultMaxConnections,
				GRPCMaxConnectionIdle: config.DefaultGRPCMaxConnectionIdle, GRPCMaxConcurrentStreams: config.DefaultGRPCMaxConcurrentStreams}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("Parse = %+v, want %+v", c, want)
			}
		})
	}
}

func TestEveryField(t *testing.T) {
	c := mustParse(t, `
store: redis://cache:6379/0
http: 0.0.0.0:9090
grpc: "[::1]:9091"
failMode: closed
storeTimeout: 250ms
envoy: [/etc/ratelimit/config/*.yaml, /etc/ratelimit/extra.yaml]
policies:
  api: {strategy: gcra, limit: 100, period: 1m, burst: 20, nearCache: true}
  partner: {strategy: tokenBucket, capacity: 100, refillPerSec: 1.6666666666666667, failMode: open}
`)
	if c.Store != "redis://cache:6379/0" || c.HTTP != "0.0.0.0:9090" || c.GRPC != "[::1]:9091" ||
		c.FailMode != config.FailClosed || c.StoreTimeout != 250*time.Millisecond {
		t.Errorf("Parse = %+v", c)
	}
	if want := []string{"/etc/ratelimit/config/*.yaml", "/etc/ratelimit/extra.yaml"}; !slices.Equal(c.Envoy, want) {
		t.Errorf("Envoy = %q, want %q", c.Envoy, want)
	}
	names := make([]string, len(c.Policies))
	for i, p := range c.Policies {
		names[i] = p.Name()
	}
	if want := []string{"api", "partner"}; !slices.Equal(names, want) {
		t.Errorf("policies %q, want %q in name order", names, want)
	}
	if got := policy(t, c, "api").FailMode; got != config.FailClosed {
		t.Errorf("api fail mode %q, want the file's, closed", got)
	}
	if got := policy(t, c, "partner").FailMode; got != config.FailOpen {
		t.Errorf("partner fail mode %q, want its own, open", got)
	}
	if got := c.FailModeOf("partner"); got != config.FailOpen {
		t.Errorf("FailModeOf(partner) = %q, want open", got)
	}
	if got := c.FailModeOf("nope"); got != config.FailClosed {
		t.Errorf("FailModeOf(nope) = %q, want the file's, closed", got)
	}
	if !policy(t, c, "api").NearCache || !c.NearCache("api") || c.NearCache("partner") || c.NearCache("nope") {
		t.Errorf("NearCache: api %v, partner %v, nope %v; want true, false, false", c.NearCache("api"), c.NearCache("partner"), c.NearCache("nope"))
	}
	ps := c.SluicePolicies()
	if len(ps) != 2 || ps[0] != c.Policies[0].Policy || ps[1] != c.Policies[1].Policy {
		t.Errorf("SluicePolicies = %v, want the policies in order", ps)
	}
}

func TestStrategies(t *testing.T) {
	tests := []struct {
		name, spec string
		want       sluice.Strategy
	}{
		{"gcra, period", "{strategy: gcra, limit: 100, period: 1m, burst: 20}", sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20}},
		{"gcra, periodMs", "{strategy: gcra, limit: 100, periodMs: 60000, burst: 20}", sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20}},
		{"gcra, fractional", "{strategy: gcra, limit: 0.5, period: 1.5s, burst: 1.5}", sluice.GCRA{Limit: 0.5, PeriodMs: 1500, Burst: 1.5}},
		{"tokenBucket", "{strategy: tokenBucket, capacity: 100, refillPerSec: 1.6666666666666667}", sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}},
		{"fixedWindow, window", "{strategy: fixedWindow, limit: 50, window: 15m}", sluice.FixedWindow{Limit: 50, WindowMs: 900_000}},
		{"fixedWindow, windowMs", "{strategy: fixedWindow, limit: 50, windowMs: 900000}", sluice.FixedWindow{Limit: 50, WindowMs: 900_000}},
		{"fixedWindow, sub-millisecond duration", "{strategy: fixedWindow, limit: 50, window: 1500us}", sluice.FixedWindow{Limit: 50, WindowMs: 1.5}},
		{"slidingWindow", "{strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}", sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}},
		{"slidingWindowLog", "{strategy: slidingWindowLog, limit: 10, windowMs: 1000}", sluice.SlidingWindowLog{Limit: 10, WindowMs: 1000}},
		{"block style", "\n    strategy: fixedWindow\n    limit: 5\n    window: 1h", sluice.FixedWindow{Limit: 5, WindowMs: 3_600_000}},
		{"daily quota", "{strategy: fixedWindow, limit: 10000, window: day, timezone: Europe/Rome}",
			sluice.FixedWindow{Limit: 10_000, Calendar: sluice.Day, TimeZone: "Europe/Rome"}},
		{"monthly quota in UTC", "{strategy: fixedWindow, limit: 1000000, window: month}", sluice.FixedWindow{Limit: 1_000_000, Calendar: sluice.Month}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(t, mustParse(t, "policies:\n  p: "+tt.spec), "p")
			if len(p.Limits()) != 1 {
				t.Fatalf("%d limits, want 1", len(p.Limits()))
			}
			if l := p.Limits()[0]; l.Strategy != tt.want || l.Unit != sluice.UnitCost || l.Name != "" {
				t.Errorf("limit = %+v, want %+v counting cost", l, tt.want)
			}
		})
	}
}

func TestComposite(t *testing.T) {
	c := mustParse(t, `
policies:
  gpt-4o:
    failMode: closed
    limits:
      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}
      - {name: tokens, unit: cost, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}
      - {strategy: fixedWindow, limit: 100000, window: 24h}
`)
	p := policy(t, c, "gpt-4o")
	want := []sluice.Limit{
		{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.SlidingWindow{Limit: 2, WindowMs: 60_000, Buckets: 60}},
		{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}},
		{Strategy: sluice.FixedWindow{Limit: 100_000, WindowMs: 86_400_000}},
	}
	if !reflect.DeepEqual(p.Limits(), want) {
		t.Errorf("limits\n got %+v\nwant %+v", p.Limits(), want)
	}
	if p.FailMode != config.FailClosed || c.FailMode != config.FailOpen {
		t.Errorf("fail modes: policy %q file %q, want closed and open", p.FailMode, c.FailMode)
	}
	// The request limit does not bound the cost.
	if p.MaxCost() != 1000 {
		t.Errorf("MaxCost = %d, want 1000", p.MaxCost())
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		path       string // config.Error.Path
		reason     string // contained in the reason
	}{
		{"http not host:port", "http: nope", "http", `must be host:port, got "nope"`},
		{"grpc not host:port", "grpc: '8081'", "grpc", "must be host:port"},
		{"failMode", "failMode: maybe", "failMode", `must be open or closed, got "maybe"`},
		{"storeTimeout without a unit", "storeTimeout: 50", "storeTimeout", `must be a positive duration such as 50ms, got "50"`},
		{"storeTimeout negative", "storeTimeout: -1s", "storeTimeout", "positive duration"},
		{"storeTimeout zero", "storeTimeout: 0s", "storeTimeout", "positive duration"},
		{"overrides refresh without a unit", "overrides: {refresh: 30}", "overrides.refresh", `at least 1s such as 30s, got "30"`},
		{"overrides refresh too short", "overrides: {refresh: 10ms}", "overrides.refresh", "at least 1s"},
		{"overrides unknown field", "overrides: {files: a}", `overrides."files"`, `did you mean "file"?`},
		{"console enabled not a bool", "console: {enabled: yes please}", "console.enabled", `must be true or false, got "yes please"`},
		{"console topKeys not a bool", "console: {topKeys: [1]}", "console.topKeys", "must be true or false"},
		{"console unknown field", "console: {topkeys: false}", `console."topkeys"`, `did you mean "topKeys"?`},
		{"policy failMode", "policies:\n  a: {failMode: sometimes, strategy: fixedWindow, limit: 1, window: 1s}", "policies.a.failMode", `got "sometimes"`},
		{"refillPerSec of a composite", "policies:\n  gpt-4o:\n    limits:\n      - {strategy: fixedWindow, limit: 2, window: 1m}\n      - {strategy: tokenBucket, capacity: 1000, refillPerSec: -1}",
			"policies.gpt-4o.limits[1].refillPerSec", "must be above 0"},
		{"missing parameter of a composite", "policies:\n  m:\n    limits:\n      - {strategy: tokenBucket, capacity: 1000}",
			"policies.m.limits[0].refillPerSec", "is missing"},
		{"period and periodMs", "policies:\n  a: {strategy: gcra, limit: 1, period: 1m, periodMs: 60000, burst: 1}", "policies.a.period", "set period or periodMs, not both"},
		{"window and windowMs", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1m, windowMs: 60000}", "policies.a.window", "not both"},
		{"bad duration", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: soon}", "policies.a.window", `got "soon"`},
		{"zero duration", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 0s}", "policies.a.window", "positive duration"},
		{"duration below 1 ms", "policies:\n  a: {strategy: gcra, limit: 1, period: 500us, burst: 1}", "policies.a.period", "must be from 1"},
		{"milliseconds below 1", "policies:\n  a: {strategy: gcra, limit: 1, periodMs: 0.5, burst: 1}", "policies.a.periodMs", "must be from 1"},
		{"unknown strategy", "policies:\n  a: {strategy: leakyBucket, limit: 1}", "policies.a.strategy", `got "leakyBucket"`},
		{"unknown time zone", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: day, timezone: Europe/Atlantis}", "policies.a.timezone", "IANA time zone"},
		{"time zone without a calendar", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1h, timezone: UTC}", "policies.a.timezone", "only to calendar windows"},
		{"calendar and windowMs", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: day, windowMs: 1000}", "policies.a.window", "not both"},
		{"calendar window of another strategy", "policies:\n  a: {strategy: slidingWindow, limit: 1, window: day, buckets: 4}", "policies.a.window", `got "day"`},
		{"time zone of another strategy", "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1, timezone: UTC}", "policies.a.timezone", "is not a parameter of gcra"},
		{"no strategy", "policies:\n  a: {limit: 1, window: 1s}", "policies.a.strategy", `got ""`},
		{"parameter of another strategy", "policies:\n  a: {strategy: tokenBucket, capacity: 1, refillPerSec: 1, burst: 2}", "policies.a.burst", "is not a parameter of tokenBucket"},
		{"duration of another strategy", "policies:\n  a: {strategy: tokenBucket, capacity: 1, refillPerSec: 1, window: 1s}", "policies.a.window", "is not a parameter of tokenBucket"},
		{"missing parameter", "policies:\n  a: {strategy: gcra, limit: 1, burst: 1}", "policies.a.period", "is missing"},
		{"missing buckets", "policies:\n  a: {strategy: slidingWindow, limit: 1, window: 1s}", "policies.a.buckets", "is missing"},
		{"buckets out of range", "policies:\n  a: {strategy: slidingWindow, limit: 1, window: 1s, buckets: 0}", "policies.a.buckets", "from 1 to 4096"},
		{"fractional log limit", "policies:\n  a: {strategy: slidingWindowLog, limit: 1.5, window: 1s}", "policies.a.limit", "whole number"},
		{"infinite capacity", "policies:\n  a: {strategy: tokenBucket, capacity: .inf, refillPerSec: 1}", "policies.a.capacity", "+Inf"},
		{"NaN capacity", "policies:\n  a: {strategy: tokenBucket, capacity: .nan, refillPerSec: 1}", "policies.a.capacity", "NaN"},
		{"unknown unit", "policies:\n  a: {unit: bytes, strategy: fixedWindow, limit: 1, window: 1s}", "policies.a.unit", `must be cost or request, got "bytes"`},
		{"no limits", "policies:\n  a: {failMode: closed}", "policies.a", "needs a strategy or limits"},
		{"nearCache alone", "policies:\n  a: {nearCache: true}", "policies.a", "needs a strategy or limits"},
		{"nearCache yes", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s, nearCache: yes}", "policies.a.nearCache", `must be true or false, got "yes"`},
		{"nearCache quoted", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s, nearCache: 'true'}", "policies.a.nearCache", `got "true"`},
		{"nearCache a list", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s, nearCache: [true]}", "policies.a.nearCache", "got a seq"},
		{"empty policy", "policies:\n  a:", "policies.a", "needs a strategy or limits"},
		{"inline and limits", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s, limits: [{strategy: fixedWindow, limit: 1, window: 1s}]}", "policies.a", "not both"},
		{"bad policy name", "policies:\n  'bad name': {strategy: fixedWindow, limit: 1, window: 1s}", "policies.bad name (the name)", "may hold only"},
		{"bad envoy glob", "envoy: [/etc/ok/*.yaml, '/etc/[bad']", "envoy[1]", "syntax error in pattern"},
		{"empty envoy path", "envoy: ['']", "envoy[0]", "is empty"},
		// yaml.v3 reports unknown fields and type errors with a line, not a path.
		{"unknown top-level field", "store: memory\nbogus: 1", `"bogus"`, "unknown field (line 2)"},
		{"unknown policy field", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s, bogus: 2}", `policies.a."bogus"`, "unknown field (line 2)"},
		{"failMode on a limit", "policies:\n  a:\n    limits:\n      - {strategy: fixedWindow, limit: 1, window: 1s, failMode: open}", `policies.a.limits[0]."failMode"`, "unknown field (line 4)"},
		{"nearCache on a limit", "policies:\n  a:\n    limits:\n      - {strategy: fixedWindow, limit: 1, window: 1s, nearCache: true}", `policies.a.limits[0]."nearCache"`, "unknown field (line 4)"},
		{"nearCache at the top", "nearCache: true", `"nearCache"`, "unknown field (line 1)"},
		{"a field set twice", "http: 127.0.0.1:1\nhttp: 127.0.0.1:2", "http", "set twice (line 2)"},
		{"a field in the wrong case", "storetimeout: 1s", `"storetimeout"`, `unknown field (line 1); did you mean "storeTimeout"?`},
		{"a policy field misspelt", "policies:\n  a: {strategy: fixedWindow, limt: 1, window: 1s}", `policies.a."limt"`, `did you mean "limit"?`},
		{"a stream field misspelt", "streams:\n  queries:\n    q: {stream: s, windw: 1s}", `streams.queries.q."windw"`, `did you mean "window"?`},
		{"requireStore not a bool", "requireStore: yes please", "requireStore", `must be true or false, got "yes please"`},
		{"two documents", "store: memory\n---\nstore: memory", "(file)", "more than one YAML document"},
		{"limit of another type", "policies:\n  a: {strategy: fixedWindow, limit: many, window: 1s}", "(file)", "cannot unmarshal"},
		{"not a mapping", "- store", "(file)", "cannot unmarshal"},
		{"not YAML", "policies: {", "(file)", ""},
		{"duplicate policy", "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s}\n  a: {strategy: fixedWindow, limit: 2, window: 1s}", "(file)", "already defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml))
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %+v, %v; want a *config.Error", c, err)
			}
			if !errors.Is(err, config.ErrConfig) {
				t.Errorf("errors.Is(%v, ErrConfig) = false", err)
			}
			if ce.Path != tt.path || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("error %q (path %q), want path %q and a reason containing %q", err, ce.Path, tt.path, tt.reason)
			}
			if want := "config: " + ce.Path + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want it to start with %q", err, want)
			}
		})
	}
}

// An unknown field far from every known one gets no suggestion: a wrong guess misleads.
func TestUnknownFieldNoSuggestion(t *testing.T) {
	for _, tt := range []struct{ name, yaml string }{
		{"far from all", "bogus: 1"},
		{"short", "xy: 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			if err == nil || strings.Contains(err.Error(), "did you mean") {
				t.Errorf("Parse: %v, want an unknown field without a suggestion", err)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	const pol = "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1, lease: true, nearCache: true}\n  b: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n"
	tests := []struct {
		name, yaml, store string // store overrides the file's, as --store does
		want              []string
	}{
		{name: "lease and nearCache on memory", yaml: pol, want: []string{
			"policies.a.nearCache: does nothing on the embedded store", "policies.a.lease: does nothing on the embedded store"}},
		{name: "lease and nearCache on redis", yaml: pol, store: "redis://127.0.0.1:6379"},
		{name: "maxKeys on redis", yaml: "store: redis://u:pw@h:6379\nmaxKeys: 10\n", want: []string{
			"maxKeys: does nothing on store redis://u:xxxxx@h:6379"}},
		{name: "maxKeys on memory", yaml: "maxKeys: 10\n"},
		{name: "overrides file on postgres", yaml: "store: postgres://h/db\noverrides: {file: o.json}\n", want: []string{
			"overrides.file: does nothing on store postgres://h/db"}},
		{name: "overrides file on memory", yaml: "overrides: {file: o.json, refresh: 1m}\n"},
		{name: "nothing set", yaml: "store: memory://\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if tt.store != "" {
				c.Store = tt.store
			}
			got := c.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("Warnings = %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %d %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}

func TestNearCache(t *testing.T) {
	tests := []struct {
		name, spec string
		want       bool
	}{
		{"left out", "{strategy: fixedWindow, limit: 1, window: 1s}", false},
		{"true", "{strategy: fixedWindow, limit: 1, window: 1s, nearCache: true}", true},
		{"false", "{strategy: fixedWindow, limit: 1, window: 1s, nearCache: false}", false},
		{"null", "{strategy: fixedWindow, limit: 1, window: 1s, nearCache: ~}", false},
		{"empty", "{strategy: fixedWindow, limit: 1, window: 1s, nearCache: }", false},
		{"capitalized", "{strategy: fixedWindow, limit: 1, window: 1s, nearCache: True}", true},
		{"composite", "{nearCache: true, limits: [{strategy: fixedWindow, limit: 1, window: 1s}]}", true},
		{"block style", "\n    nearCache: true\n    strategy: gcra\n    limit: 1\n    period: 1s\n    burst: 1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, "policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s}\n  p: "+tt.spec+"\n  z: {strategy: fixedWindow, limit: 1, window: 1s, nearCache: true}")
			if got := c.NearCache("p"); got != tt.want || policy(t, c, "p").NearCache != tt.want {
				t.Errorf("NearCache(p) = %v, want %v", got, tt.want)
			}
			if c.NearCache("a") || !c.NearCache("z") || c.NearCache("nope") {
				t.Error("NearCache of the other policies is wrong")
			}
		})
	}
}

func TestCheck(t *testing.T) {
	base := func() *config.Config { return mustParse(t, "") }
	tests := []struct {
		name   string
		change func(*config.Config)
		path   string // "" for valid
	}{
		{"valid", func(*config.Config) {}, ""},
		{"http flag", func(c *config.Config) { c.HTTP = ":80" }, ""},
		{"bad http flag", func(c *config.Config) { c.HTTP = "localhost" }, "http"},
		{"bad grpc flag", func(c *config.Config) { c.GRPC = "" }, "grpc"},
		{"bad fail mode", func(c *config.Config) { c.FailMode = "ajar" }, "failMode"},
		{"the store's timeout", func(c *config.Config) { c.StoreTimeout = 0 }, ""},
		{"negative store timeout", func(c *config.Config) { c.StoreTimeout = -time.Second }, "storeTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.change(c)
			err := c.Check()
			var ce *config.Error
			switch {
			case tt.path == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tt.path != "" && (!errors.As(err, &ce) || ce.Path != tt.path):
				t.Errorf("Check = %v, want an error at %q", err, tt.path)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("policies:\n  a: {strategy: fixedWindow, limit: 1, window: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil || len(c.Policies) != 1 {
		t.Errorf("Load = %+v, %v; want one policy", c, err)
	}
	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want os.ErrNotExist", err)
	}
}

// FuzzParse: Parse never panics, and every configuration it accepts is complete and valid: its
// policies load into a sluice.Limiter, in name order, each with a fail mode; a policy's plans each
// load, under the policy's name, and its default plan is the policy.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"store: memory\nhttp: 127.0.0.1:8080\ngrpc: 127.0.0.1:8081\nfailMode: open\nstoreTimeout: 50ms\nenvoy: [/etc/*.yaml]",
		"policies:\n  api: {strategy: gcra, limit: 100, period: 1m, burst: 20}",
		"policies:\n  p: {strategy: tokenBucket, capacity: 100, refillPerSec: 1.6666666666666667, failMode: closed, nearCache: true}",
		"policies:\n  w: {strategy: fixedWindow, limit: 50, windowMs: 900000}",
		"policies:\n  s: {strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}",
		"policies:\n  l: {strategy: slidingWindowLog, limit: 10, window: 1s}",
		"policies:\n  m:\n    limits:\n      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}\n      - {name: tokens, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}",
		"policies:\n  a: {strategy: gcra, limit: 1, period: 1m, periodMs: 60000, burst: 1}",
		"envoy: ['[']",
		// Plans: single and composite, a default, the policy's fields beside them; and bad ones.
		"policies:\n  api:\n    plans:\n      free: {strategy: gcra, limit: 100, period: 1m, burst: 10}\n      enterprise:\n        limits:\n          - {name: requests, unit: request, strategy: gcra, limit: 10000, period: 1m, burst: 1000}\n          - {name: tokens, strategy: tokenBucket, capacity: 1000000, refillPerSec: 1000}\n    plan: enterprise\n    failMode: closed\n    lease: true",
		"policies:\n  p: {plan: a, plans: {a: {strategy: fixedWindow, limit: 1, window: day, timezone: UTC}, b: {strategy: slidingWindowLog, limit: 2, windowMs: 10}}}",
		"policies:\n  p: {plan: b, plans: {a: {strategy: fixedWindow, limit: 1, window: 1s}}}",
		"policies:\n  p: {plans: {a: {strategy: fixedWindow, limit: 1, window: 1s}}}",
		"policies:\n  p: {plan: a, plans: {}}",
		"policies:\n  p: {plan: a, strategy: gcra, plans: {a: {strategy: fixedWindow, limit: 1, window: 1s}}}",
		"policies:\n  p: {plan: a, plans: {a: {strategy: fixedWindow, limit: -1, window: 1s}}}",
		"policies:\n  p: {plan: 'a b', plans: {'a b': {strategy: fixedWindow, limit: 1, window: 1s}}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path == "" || !errors.Is(err, config.ErrConfig) {
				t.Fatalf("Parse error %v is not a *config.Error with a path", err)
			}
			return
		}
		if err := c.Check(); err != nil {
			t.Fatalf("accepted config fails Check: %v", err)
		}
		if _, err := sluice.New(nil, c.SluicePolicies()...); err != nil {
			t.Fatalf("accepted policies do not load: %v", err)
		}
		for i, p := range c.Policies {
			if p.Policy == nil || len(p.Limits()) == 0 {
				t.Fatalf("policy %d is empty", i)
			}
			if p.FailMode != config.FailOpen && p.FailMode != config.FailClosed {
				t.Fatalf("policy %q has fail mode %q", p.Name(), p.FailMode)
			}
			if c.NearCache(p.Name()) != p.NearCache {
				t.Fatalf("NearCache(%q) = %v, the policy says %v", p.Name(), c.NearCache(p.Name()), p.NearCache)
			}
			if (p.Plans == nil) != (p.Plan == "") || (p.Plans != nil && p.Plans[p.Plan] != p.Policy) {
				t.Fatalf("policy %q: default plan %q is not the policy among plans %v", p.Name(), p.Plan, p.Plans)
			}
			for name, plan := range p.Plans {
				if _, err := sluice.NewPolicy(name, sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1}}); err != nil {
					t.Fatalf("policy %q: accepted plan name %q: %v", p.Name(), name, err)
				}
				if plan == nil || len(plan.Limits()) == 0 || plan.Name() != p.Name() {
					t.Fatalf("policy %q: plan %q is empty or named otherwise: %v", p.Name(), name, plan)
				}
				if _, err := sluice.New(nil, plan); err != nil {
					t.Fatalf("policy %q: plan %q does not load: %v", p.Name(), name, err)
				}
			}
			if i > 0 && c.Policies[i-1].Name() >= p.Name() {
				t.Fatalf("policies out of name order: %q before %q", c.Policies[i-1].Name(), p.Name())
			}
		}
		for _, e := range c.Envoy {
			if _, err := filepath.Match(e, ""); err != nil || e == "" {
				t.Fatalf("accepted envoy path %q: %v", e, err)
			}
		}
	})
}

func ExampleParse() {
	c, err := config.Parse([]byte(`
failMode: closed
policies:
  api: {strategy: gcra, limit: 100, period: 1m, burst: 20}
  gpt-4o:
    failMode: open
    limits:
      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}
      - {name: tokens, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("http", c.HTTP, "storeTimeout", c.StoreTimeout)
	for _, p := range c.Policies {
		fmt.Printf("%s (fail %s):", p.Name(), p.FailMode)
		for _, l := range p.Limits() {
			fmt.Printf(" %s %+v per %s;", l.Strategy.Kind(), l.Strategy, l.Unit)
		}
		fmt.Println()
	}

	_, err = config.Parse([]byte("policies:\n  gpt-4o:\n    limits:\n      - {strategy: tokenBucket, capacity: 1000, refillPerSec: 0}\n"))
	fmt.Println(err)
	// Output:
	// http 127.0.0.1:8080 storeTimeout 0s
	// api (fail closed): gcra {Limit:100 PeriodMs:60000 Burst:20} per cost;
	// gpt-4o (fail open): slidingWindow {Limit:2 WindowMs:60000 Buckets:60} per request; tokenBucket {Capacity:1000 RefillPerSec:16.666666666666668} per cost;
	// config: policies.gpt-4o.limits[0].refillPerSec: must be above 0 and at most 2^53, got 0
}

func TestStreams(t *testing.T) {
	c := mustParse(t, `
store: redis://cache:6379/0
streams:
  store: postgres://u@db:5432/events
  queries:
    q2: {stream: s, windowMs: 1000}
    q1:
      stream: api-requests
      window: 2s
      grace: 100ms
      idleFlush: 500ms
      quota: 5
`)
	want := &config.Streams{Store: "postgres://u@db:5432/events", Queries: []stream.Query{
		{Name: "q1", Stream: "api-requests", WindowMs: 2000, GraceMs: 100, IdleFlushMs: 500, Quota: 5},
		{Name: "q2", Stream: "s", WindowMs: 1000},
	}}
	if !reflect.DeepEqual(c.Streams, want) {
		t.Errorf("Streams = %+v, want %+v", c.Streams, want)
	}
	if c.Store != "redis://cache:6379/0" {
		t.Errorf("Store = %q", c.Store)
	}
	if c := mustParse(t, "streams:\n"); !reflect.DeepEqual(c.Streams, &config.Streams{Store: "memory"}) {
		t.Errorf("empty streams section = %+v", c.Streams)
	}
	if c := mustParse(t, "store: memory\n"); c.Streams != nil {
		t.Errorf("no streams section = %+v, want nil", c.Streams)
	}
}

func TestStreamsErrors(t *testing.T) {
	for _, tt := range []struct{ yaml, path string }{
		{"streams: {bogus: 1}", `streams."bogus"`},
		{"streams: {store: redis://x:1}", "streams.store"},
		{"streams: {queries: {q1: {stream: s, window: 1s, colour: red}}}", `streams.queries.q1."colour"`},
		{"streams: {queries: {q1: {stream: s}}}", "streams.queries.q1.window"},
		{"streams: {queries: {q1: {stream: s, window: 0s}}}", "streams.queries.q1.window"},
		{"streams: {queries: {q1: {stream: s, window: soon}}}", "streams.queries.q1.window"},
		{"streams: {queries: {q1: {stream: s, window: 1s, windowMs: 1000}}}", "streams.queries.q1.window"},
		{"streams: {queries: {q1: {stream: s, windowMs: 0.5}}}", "streams.queries.q1.windowMs"},
		{"streams: {queries: {q1: {stream: s, window: 1s, grace: -1s}}}", "streams.queries.q1.grace"},
		{"streams: {queries: {q1: {stream: s, window: 1s, idleFlushMs: -1}}}", "streams.queries.q1.idleFlushMs"},
		{"streams: {queries: {q1: {stream: s, window: 1s, quota: -1}}}", "streams.queries.q1.quota"},
		{"streams: {queries: {q1: {stream: s, window: 1s, quota: 2.5}}}", "streams.queries.q1.quota"},
		{"streams: {queries: {q1: {window: 1s}}}", "streams.queries.q1.stream"},
		{"streams: {queries: {q1: {stream: s, window: 1s, window: 2s}}}", "streams.queries.q1.window"},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrConfig) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if ce.Path != tt.path {
				t.Errorf("path %q (%v), want %q", ce.Path, err, tt.path)
			}
		})
	}
}

// TestBounds: the ceilings default when absent, take the file's values, and name their field when
// out of range.
func TestBounds(t *testing.T) {
	cases := []struct {
		name, yaml, path string
		want             config.Config // only the ceilings are compared
	}{
		{name: "defaults", yaml: "", want: config.Config{MaxKeys: config.DefaultMaxKeys, MaxSlotTTL: config.DefaultMaxSlotTTL,
			MaxSlotLimit: config.DefaultMaxSlotLimit, MaxSettle: config.DefaultMaxSettle}},
		{name: "set", yaml: "maxKeys: 10\nmaxSlotTtl: 30s\nmaxSlotLimit: 5\nmaxSettle: 1000",
			want: config.Config{MaxKeys: 10, MaxSlotTTL: 30 * time.Second, MaxSlotLimit: 5, MaxSettle: 1000}},
		{name: "maxKeys zero", yaml: "maxKeys: 0", path: "maxKeys"},
		{name: "maxSlotTtl bad", yaml: "maxSlotTtl: forever", path: "maxSlotTtl"},
		{name: "maxSlotTtl negative", yaml: "maxSlotTtl: -1s", path: "maxSlotTtl"},
		{name: "maxSlotLimit zero", yaml: "maxSlotLimit: 0", path: "maxSlotLimit"},
		{name: "maxSettle above 2^53", yaml: "maxSettle: 9007199254740993", path: "maxSettle"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(c.yaml))
			if c.path != "" {
				var ce *config.Error
				if !errors.As(err, &ce) || ce.Path != c.path {
					t.Fatalf("Parse(%q) = %v, want an error at %s", c.yaml, err, c.path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := config.Config{MaxKeys: cfg.MaxKeys, MaxSlotTTL: cfg.MaxSlotTTL, MaxSlotLimit: cfg.MaxSlotLimit, MaxSettle: cfg.MaxSettle}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("ceilings %+v, want %+v", got, c.want)
			}
		})
	}
}

// plansYAML is a policy with plans: two single-limit plans and a composite one.
const plansYAML = `
policies:
  api:
    plans:
      free: {strategy: gcra, limit: 100, period: 1m, burst: 10}
      pro: {strategy: gcra, limit: 1000, period: 1m, burst: 100}
      enterprise:
        limits:
          - {name: requests, strategy: gcra, limit: 10000, period: 1m, burst: 1000, unit: request}
          - {name: tokens, strategy: tokenBucket, capacity: 1000000, refillPerSec: 1000}
    plan: %s
    failMode: closed
    nearCache: true
    lease: true
  plain: {strategy: fixedWindow, limit: 5, window: 1s}
`

func TestPlans(t *testing.T) {
	free := []sluice.Limit{{Strategy: sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 10}}}
	pro := []sluice.Limit{{Strategy: sluice.GCRA{Limit: 1000, PeriodMs: 60_000, Burst: 100}}}
	enterprise := []sluice.Limit{
		{Name: "requests", Unit: sluice.UnitRequest, Strategy: sluice.GCRA{Limit: 10_000, PeriodMs: 60_000, Burst: 1000}},
		{Name: "tokens", Strategy: sluice.TokenBucket{Capacity: 1_000_000, RefillPerSec: 1000}},
	}
	all := map[string][]sluice.Limit{"free": free, "pro": pro, "enterprise": enterprise}
	tests := []struct {
		name, yaml, plan string
		want             map[string][]sluice.Limit // each plan's limits
	}{
		{"single-limit default", fmt.Sprintf(plansYAML, "free"), "free", all},
		{"another single-limit default", fmt.Sprintf(plansYAML, "pro"), "pro", all},
		{"composite default", fmt.Sprintf(plansYAML, "enterprise"), "enterprise", all},
		{"one plan", "policies:\n  api:\n    plan: only\n    plans: {only: {strategy: fixedWindow, limit: 5, window: 1s}}",
			"only", map[string][]sluice.Limit{"only": {{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 1000}}}}},
		{"block style, names with punctuation", "policies:\n  api:\n    plan: team/eu:v2\n    plans:\n      team/eu:v2:\n        strategy: slidingWindowLog\n        limit: 3\n        windowMs: 1000\n      pro_2.1:\n        limits:\n          - strategy: fixedWindow\n            limit: 4\n            window: day\n",
			"team/eu:v2", map[string][]sluice.Limit{
				"team/eu:v2": {{Strategy: sluice.SlidingWindowLog{Limit: 3, WindowMs: 1000}}},
				"pro_2.1":    {{Strategy: sluice.FixedWindow{Limit: 4, Calendar: sluice.Day}}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.yaml)
			p := policy(t, c, "api")
			if p.Plan != tt.plan {
				t.Errorf("Plan = %q, want %q", p.Plan, tt.plan)
			}
			if len(p.Plans) != len(tt.want) {
				t.Fatalf("%d plans, want %d", len(p.Plans), len(tt.want))
			}
			for name, want := range tt.want {
				got := p.Plans[name]
				if got == nil {
					t.Fatalf("no plan %q", name)
				}
				// Under the policy's name, so that a key's state is the same whatever its plan.
				if got.Name() != "api" {
					t.Errorf("plan %q is named %q, want the policy's name, api", name, got.Name())
				}
				if !reflect.DeepEqual(got.Limits(), want) {
					t.Errorf("plan %q limits\n got %+v\nwant %+v", name, got.Limits(), want)
				}
				if _, err := sluice.New(nil, got); err != nil {
					t.Errorf("plan %q does not load: %v", name, err)
				}
			}
			// The default plan is the policy.
			if p.Policy != p.Plans[tt.plan] {
				t.Errorf("Policy = %v, want the default plan %q's", p.Policy, tt.plan)
			}
			if i := slices.IndexFunc(c.SluicePolicies(), func(sp *sluice.Policy) bool { return sp.Name() == "api" }); i < 0 || c.SluicePolicies()[i] != p.Plans[tt.plan] {
				t.Errorf("SluicePolicies does not hold the default plan")
			}
		})
	}

	t.Run("the policy's fields apply to every plan", func(t *testing.T) {
		c := mustParse(t, fmt.Sprintf(plansYAML, "free"))
		p := policy(t, c, "api")
		if p.FailMode != config.FailClosed || !p.NearCache || !p.Lease || !c.NearCache("api") || !c.Lease("api") || c.FailModeOf("api") != config.FailClosed {
			t.Errorf("policy fields: %+v", p)
		}
		if w := c.Warnings(); len(w) != 2 {
			t.Errorf("Warnings = %q, want nearCache's and lease's, once each", w)
		}
	})
	t.Run("a policy without plans", func(t *testing.T) {
		p := policy(t, mustParse(t, fmt.Sprintf(plansYAML, "free")), "plain")
		if p.Plans != nil || p.Plan != "" || len(p.Limits()) != 1 {
			t.Errorf("plain: Plans %v, Plan %q, limits %v; want none, \"\" and its own one", p.Plans, p.Plan, p.Limits())
		}
	})
	t.Run("null plans is no plans", func(t *testing.T) {
		p := policy(t, mustParse(t, "policies:\n  api: {plans: ~, strategy: fixedWindow, limit: 5, window: 1s}"), "api")
		if p.Plans != nil || p.Plan != "" {
			t.Errorf("Plans %v, Plan %q; want none", p.Plans, p.Plan)
		}
	})
}

func TestPlanErrors(t *testing.T) {
	const free = "{strategy: gcra, limit: 100, period: 1m, burst: 10}"
	const pro = "{strategy: gcra, limit: 1000, period: 1m, burst: 100}"
	plans := "    plans:\n      free: " + free + "\n      pro: " + pro + "\n"
	tests := []struct {
		name, yaml string
		path       string // config.Error.Path
		reason     string // contained in the reason
	}{
		{"plan missing", "policies:\n  api:\n" + plans, "policies.api.plan", `is missing: a policy with plans names its default plan, one of "free", "pro"`},
		{"plan empty", "policies:\n  api:\n" + plans + "    plan: ''\n", "policies.api.plan", "is missing"},
		{"unknown plan", "policies:\n  api:\n" + plans + "    plan: gold\n", "policies.api.plan", `names no plan of this policy, got "gold" (the plans: "free", "pro")`},
		{"unknown plan close to one", "policies:\n  api:\n" + plans + "    plan: Free\n", "policies.api.plan", `got "Free" (the plans: "free", "pro"); did you mean "free"?`},
		{"unknown plan misspelt", "policies:\n  api:\n    plans: {enterprise: " + free + "}\n    plan: enterprize\n", "policies.api.plan", `did you mean "enterprise"?`},
		{"plans empty", "policies:\n  api: {plans: {}, plan: free}", "policies.api.plans", "is empty"},
		{"plan without plans", "policies:\n  api: {plan: free, strategy: fixedWindow, limit: 5, window: 1s}", "policies.api.plan", "names a default plan, but the policy has no plans"},
		{"negative limit in a plan", "policies:\n  api:\n    plans:\n      free: " + free + "\n      pro: {strategy: gcra, limit: -1000, period: 1m, burst: 100}\n    plan: free\n",
			"policies.api.plans.pro.limit", "must be above 0"},
		{"bad limit of a composite plan", "policies:\n  api:\n    plan: free\n    plans:\n      free: " + free + "\n      enterprise:\n        limits:\n          - " + pro + "\n          - {strategy: tokenBucket, capacity: 1000, refillPerSec: 0}\n",
			"policies.api.plans.enterprise.limits[1].refillPerSec", "must be above 0"},
		{"bad period in a plan", "policies:\n  api:\n    plan: free\n    plans: {free: {strategy: gcra, limit: 1, period: soon, burst: 1}}", "policies.api.plans.free.period", `got "soon"`},
		{"missing parameter in a plan", "policies:\n  api:\n    plan: free\n    plans: {free: {strategy: gcra, limit: 1, period: 1m}}", "policies.api.plans.free.burst", "is missing"},
		{"unknown strategy in the default plan", "policies:\n  api:\n    plan: free\n    plans: {free: {strategy: leakyBucket}}", "policies.api.plans.free.strategy", `got "leakyBucket"`},
		{"empty plan", "policies:\n  api:\n    plan: free\n    plans: {free: }", "policies.api.plans.free", "needs a strategy or limits"},
		{"plan inline and limits", "policies:\n  api:\n    plan: free\n    plans:\n      free: {strategy: fixedWindow, limit: 1, window: 1s, limits: [" + free + "]}", "policies.api.plans.free", "not both"},
		{"plans beside strategy", "policies:\n  api:\n    strategy: gcra\n" + plans + "    plan: free\n", "policies.api.strategy", "is set beside plans"},
		{"plans beside a parameter", "policies:\n  api:\n    capacity: 10\n" + plans + "    plan: free\n", "policies.api.capacity", "is set beside plans"},
		{"plans beside a whole limit", "policies:\n  api:\n    strategy: fixedWindow\n    limit: 1\n    window: 1s\n" + plans + "    plan: free\n", "policies.api.strategy", "is set beside plans"},
		{"plans beside limits", "policies:\n  api:\n    limits: [" + free + "]\n" + plans + "    plan: free\n", "policies.api.limits", "is set beside plans"},
		{"bad plan name", "policies:\n  api:\n    plan: free\n    plans:\n      free: " + free + "\n      'pro plan': " + pro + "\n", "policies.api.plans.pro plan (the name)", `name "pro plan" may hold only letters, digits and -_.:/`},
		{"empty plan name", "policies:\n  api:\n    plan: free\n    plans:\n      free: " + free + "\n      '': " + pro + "\n", "policies.api.plans. (the name)", "must be 1 to 128 bytes"},
		{"long plan name", "policies:\n  api:\n    plan: free\n    plans:\n      free: " + free + "\n      " + strings.Repeat("p", 129) + ": " + pro + "\n", "policies.api.plans." + strings.Repeat("p", 129) + " (the name)", "must be 1 to 128 bytes, got 129"},
		{"bad policy name with plans", "policies:\n  'bad name':\n" + plans + "    plan: free\n", "policies.bad name (the name)", "may hold only"},
		{"failMode on a plan", "policies:\n  api:\n    plan: free\n    plans:\n      free: {strategy: fixedWindow, limit: 1, window: 1s, failMode: open}", `policies.api.plans.free."failMode"`, "unknown field (line 5); failMode is the policy's: set it beside plans"},
		{"plans in a plan", "policies:\n  api:\n    plan: free\n    plans:\n      free: {plans: {}}", `policies.api.plans.free."plans"`, "is the policy's"},
		{"a plan field misspelt", "policies:\n  api:\n    plan: free\n    plans:\n      free: {strategy: fixedWindow, limt: 1, window: 1s}", `policies.api.plans.free."limt"`, `did you mean "limit"?`},
		{"a plan limit's field misspelt", "policies:\n  api:\n    plan: free\n    plans:\n      free: {limits: [{strategy: fixedWindow, limit: 1, windw: 1s}]}", `policies.api.plans.free.limits[0]."windw"`, `did you mean "window"?`},
		{"plan misspelt", "policies:\n  api:\n" + plans + "    plam: free\n", `policies.api."plam"`, `did you mean "plan"?`},
		{"plan set twice", "policies:\n  api:\n" + plans + "    plan: free\n    plan: pro\n", "policies.api.plan", "set twice (line 7)"},
		{"duplicate plan", "policies:\n  api:\n    plan: free\n    plans:\n      free: " + free + "\n      free: " + pro + "\n", "(file)", "already defined"},
		{"plans a list", "policies:\n  api:\n    plan: free\n    plans: [" + free + "]", "(file)", "cannot unmarshal"},
		{"plan a list", "policies:\n  api:\n" + plans + "    plan: [free]\n", "(file)", "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml))
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %+v, %v; want a *config.Error", c, err)
			}
			if !errors.Is(err, config.ErrConfig) {
				t.Errorf("errors.Is(%v, ErrConfig) = false", err)
			}
			if ce.Path != tt.path || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("error %q (path %q), want path %q and a reason containing %q", err, ce.Path, tt.path, tt.reason)
			}
		})
	}
}

func TestConsole(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want config.Console
	}{
		{"absent: on, with top keys", "", config.Console{}},
		{"empty section", "console: {}", config.Console{}},
		{"null values", "console: {enabled: null, topKeys: ~}", config.Console{}},
		{"both true", "console: {enabled: true, topKeys: true}", config.Console{}},
		{"off", "console: {enabled: false}", config.Console{Off: true}},
		{"top keys off", "console: {topKeys: false}", config.Console{NoTopKeys: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustParse(t, tc.yaml).Console; got != tc.want {
				t.Errorf("Console = %+v, want %+v", got, tc.want)
			}
		})
	}
}
