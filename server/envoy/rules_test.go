package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the error's text after "envoy: f.yaml: "
	}{
		{"empty file", "", "domain: config file cannot have empty domain"},
		{"no domain", "descriptors: []\n", "domain (line 1): config file cannot have empty domain"},
		{"unknown top key", "domain: d\nfoo: 1\n", "foo (line 2): unknown key (want domain or descriptors)"},
		{"not a mapping", "- a\n", "(line 1): must be a mapping"},
		{"bad yaml", "domain: [\n", "did not find expected node content"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key (line 3): descriptor has empty key"},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: k\n    limit: 1\n", "descriptors[0].limit (line 4): unknown key"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			"descriptors[0].rate_limit.unit (line 4): invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)"},
		{"negative requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`descriptors[0].rate_limit.requests_per_unit (line 4): must be a whole number from 0 to 4294967295, got "-1"`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			"descriptors[0].rate_limit.unit (line 4): should not specify rate limit unit when unlimited"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
			"descriptors[0].rate_limit.replaces (line 4): replaces should not contain name of same descriptor"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
			"descriptors[0].rate_limit.replaces[0] (line 4): should not have an empty replaces entry"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			"descriptors[1] (line 5): duplicate descriptor composite key 'd.k_v'"},
		{"nested duplicate", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
			"descriptors[0].descriptors[1] (line 6): duplicate descriptor composite key 'd.a.b'"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			"descriptors[0].share_threshold (line 3): applies only to a value with a * wildcard"},
		{"quota mode", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			"descriptors[0].quota_mode (line 4): quota_mode is not supported by sluice"},
		{"policy and unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {policy: api, unit: second}\n",
			"descriptors[0].rate_limit.policy (line 4): a rate_limit names a policy or sets unit and requests_per_unit or unlimited, not several"},
		{"reserved policy", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {policy: 'envoy:second:1'}\n",
			"descriptors[0].rate_limit.policy (line 4): names starting with envoy: are reserved"},
		{"bad bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", "descriptors[0].shadow_mode (line 4): must be true or false"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", "descriptors (line 2): must be a list of descriptors"},
		{"key set twice", "domain: d\ndomain: e\n", "domain (line 2): is set twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.yaml))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, config.ErrConfig) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if got := strings.TrimPrefix(err.Error(), "envoy: f.yaml: "); !strings.Contains(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// envoyproxy/ratelimit's own example files load unchanged.
func TestParseEnvoyproxyExamples(t *testing.T) {
	tests := []struct {
		name, yaml string
	}{
		{"nested and unlimited", `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: to_number
    value: "2061111111"
    descriptors:
      - key: from_number
        rate_limit:
          unlimited: true
`},
		{"shadow, replaces and metrics", `
domain: example
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
    shadow_mode: true
    detailed_metric: true
    value_to_metric: true
  - key: category
    value: account
    rate_limit:
      name: account
      unit: minute
      requests_per_unit: 30
  - key: endpoint
    value: get
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: account
    metadata: {owner: team-a}
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.name, []byte(tc.yaml)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	write("b.yaml", "domain: two\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: j\n    rate_limit: {policy: api}\n")
	dup := write("dup.yml", "domain: one\n")
	tests := []struct {
		name     string
		patterns []string
		domains  string
		err      string
	}{
		{name: "glob", patterns: []string{filepath.Join(dir, "*.yaml")}, domains: "one two"},
		{name: "same file twice", patterns: []string{a, filepath.Join(dir, "a.*")}, domains: "one"},
		{name: "glob matching nothing", patterns: []string{filepath.Join(dir, "*.json")}, domains: ""},
		{name: "missing file", patterns: []string{filepath.Join(dir, "none.yaml")}, err: "none.yaml: no such file"},
		{name: "duplicate domain", patterns: []string{a, dup}, err: `dup.yml: domain: domain "one" is already defined in ` + a},
		{name: "bad glob", patterns: []string{"["}, err: "envoy[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(tc.patterns)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(r.Domains(), " "); got != tc.domains {
				t.Errorf("domains %q, want %q", got, tc.domains)
			}
			if tc.domains != "" && (len(r.Policies()) != 1 || r.Policies()[0].Name() != "envoy:minute:5") {
				t.Errorf("policies %v, want one envoy:minute:5", r.Policies())
			}
		})
	}
}

func TestValidate(t *testing.T) {
	rules, err := Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {policy: api}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, config, err string
	}{
		{"present", "policies:\n  api: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n", ""},
		{"missing", "policies:\n  web: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n",
			`envoy: r.yaml: descriptors[0].rate_limit.policy: no policy "api" in the sluice config`},
		{"reserved name", "policies:\n  api: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n  'envoy:x': {strategy: gcra, limit: 1, period: 1s, burst: 1}\n",
			"policies.envoy:x: names starting with envoy: are reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			err = rules.Validate(cfg)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("got %v, want %q", err, tc.err)
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		name, pattern, value string
		want                 bool
	}{
		{"trailing", "/api/*", "/api/x", true},
		{"trailing empty rest", "/api/*", "/api/", true},
		{"trailing no match", "/api/*", "/ap", false},
		{"star alone", "*", "", true},
		{"middle", "a*c", "abbbc", true},
		{"middle overlap", "ab*bc", "abc", false},
		{"several", "a*b*c", "axxbyyc", true},
		{"several out of order", "a*b*c", "acb", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := globMatch(strings.Split(tc.pattern, "*"), tc.value); got != tc.want {
				t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.value, got)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
		"domain: d\ndescriptors:\n  - key: a\n    value: x*\n    share_threshold: true\n    descriptors:\n      - key: b\n        rate_limit: {unlimited: true}\n",
		"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {policy: api, name: n, replaces: [{name: m}]}\n",
		"domain: &a d\ndescriptors: &l\n  - key: *a\n    descriptors: *l\n",
		"a: &a [*a]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
		// Whitelisting descriptors (no rate_limit, no descriptors), exact and wildcard, at two levels.
		"domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: a\n    value: x*\n    descriptors:\n      - key: b\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("fuzz.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz.yaml" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		if len(r.Domains()) != 1 {
			t.Fatalf("domains %v, want one", r.Domains())
		}
		// Whatever was parsed can be matched against.
		for _, d := range r.Domains() {
			r.match(d, desc("k=v", "a=xyz", "b=").GetEntries())
		}
		for _, p := range r.Policies() {
			if !strings.HasPrefix(p.Name(), GeneratedPrefix) {
				t.Fatalf("generated policy %q lacks the prefix", p.Name())
			}
		}
	})
}
