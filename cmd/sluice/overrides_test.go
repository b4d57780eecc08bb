package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// overridesServer is sluice serve in process with plans (tiers: free by default, pro) and the
// tokens check:c1 and admin:a1; it returns the HTTP API's URL and the server.
func overridesServer(t *testing.T) (string, *server.Server) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
policies:
  tiers:
    plans:
      free: {strategy: gcra, limit: 60, period: 1m, burst: 5}
      pro: {strategy: gcra, limit: 600, period: 1m, burst: 50}
    plan: free
`))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(cfg, store, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	tokens, err := bearer.Parse([]byte("check:c1\nadmin:a1\n"))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpapi.New(srv, httpapi.Options{Tokens: bearer.NewLive(tokens)}))
	t.Cleanup(ts.Close)
	return ts.URL, srv
}

type cliStep struct {
	name   string
	args   []string // after "overrides"
	env    string   // SLUICE_TOKEN
	code   int
	stdout []string // substrings of stdout
	stderr []string // substrings of stderr
	lines  int      // lines of stdout, when stdout is set
}

func runSteps(t *testing.T, steps []cliStep) {
	t.Helper()
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			t.Setenv("SLUICE_TOKEN", st.env)
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"overrides"}, st.args...), &stdout, &stderr)
			if code != st.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, st.code, &stdout, &stderr)
			}
			assertContains(t, "stdout", stdout.String(), st.stdout)
			assertContains(t, "stderr", stderr.String(), st.stderr)
			if st.stdout != nil {
				lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
				if len(lines) != st.lines {
					t.Errorf("%d lines of stdout, want %d:\n%s", len(lines), st.lines, &stdout)
				}
				if strings.HasPrefix(lines[0], "{\"policy\"") {
					for _, l := range lines {
						if _, err := overrides.DecodeOverride([]byte(l)); err != nil {
							t.Errorf("line %q: %v", l, err)
						}
					}
				}
			}
		})
	}
}

// TestOverridesCommand runs each subcommand in order against one server: a set is there to get,
// list and delete.
func TestOverridesCommand(t *testing.T) {
	url, srv := overridesServer(t)
	s := []string{"--server", url}
	admin := append([]string{"--token", "a1"}, s...)
	with := func(base []string, args ...string) []string { return append(append([]string(nil), base...), args...) }
	runSteps(t, []cliStep{
		{name: "set a plan, flags after the arguments", args: with([]string{"set", "tiers", "acme", "--plan", "pro", "--ttl", "72h", "--reason", "trial"}, admin...),
			stdout: []string{`"policy":"tiers"`, `"key":"acme"`, `"plan":"pro"`, `"expiresAt":`, `"reason":"trial"`, `"updatedAt":`}, lines: 1},
		{name: "set limits, token from the environment", args: with(with([]string{"set"}, s...), "tiers", "org/scraper", "--limits", `[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1}]`),
			env: "a1", stdout: []string{`"key":"org/scraper"`, `"limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1}]`}, lines: 1},
		{name: "set a third", args: with([]string{"set", "tiers", "acme2", "--plan", "free"}, admin...), stdout: []string{`"plan":"free"`}, lines: 1},
		{name: "get", args: with([]string{"get", "tiers", "acme"}, admin...), stdout: []string{`"plan":"pro"`, `"reason":"trial"`}, lines: 1},
		{name: "get a key with a slash", args: with([]string{"get", "tiers", "org/scraper"}, admin...), stdout: []string{`"key":"org/scraper"`}, lines: 1},
		{name: "list", args: with([]string{"list", "--policy", "tiers"}, admin...), stdout: []string{`"key":"acme"`, `"key":"acme2"`, `"key":"org/scraper"`}, lines: 3},
		{name: "list a prefix", args: with([]string{"list", "--policy", "tiers", "--prefix", "acme"}, admin...), stdout: []string{`"key":"acme"`, `"key":"acme2"`}, lines: 2},
		{name: "list a page", args: with([]string{"list", "--policy", "tiers", "--limit", "2"}, admin...),
			stdout: []string{`"key":"acme"`, `"key":"acme2"`}, lines: 2, stderr: []string{"more: --page-token "}},
		{name: "list all pages", args: with([]string{"list", "--policy", "tiers", "--limit", "1", "--all"}, admin...),
			stdout: []string{`"key":"acme"`, `"key":"acme2"`, `"key":"org/scraper"`}, lines: 3},
		{name: "delete", args: with([]string{"delete", "tiers", "acme"}, admin...), stdout: []string{`{"deleted":true}`}, lines: 1},
		{name: "delete again", args: with([]string{"delete", "tiers", "acme"}, admin...), stdout: []string{`{"deleted":false}`}, lines: 1},
		{name: "get of none", args: with([]string{"get", "tiers", "acme"}, admin...), code: 1, stderr: []string{"sluice overrides get:", "404", "no override"}},
		{name: "unknown plan", args: with([]string{"set", "tiers", "k", "--plan", "gold"}, admin...), code: 1, stderr: []string{"sluice overrides set:", "plan", `no plan "gold"`}},
		{name: "bad limit", args: with([]string{"set", "tiers", "k", "--limits", `[{"strategy":"tokenBucket","capacity":-1,"refillPerSec":1}]`}, admin...), code: 1, stderr: []string{"limits[0]"}},
		{name: "check token", args: with([]string{"get", "tiers", "acme2", "--token", "c1"}, s...), code: 1, stderr: []string{"403", "scope admin"}},
		{name: "no token", args: with([]string{"list", "--policy", "tiers"}, s...), code: 1, stderr: []string{"401"}},
	})
	if n := srv.Overrides().Len(); n != 2 {
		t.Errorf("the server holds %d overrides, want 2 (acme2, org/scraper)", n)
	}
}

func TestOverridesUsage(t *testing.T) {
	s := []string{"--server", "http://127.0.0.1:1"} // nothing is asked of it
	with := func(args ...string) []string { return append(args, s...) }
	runSteps(t, []cliStep{
		{name: "no subcommand", code: 2, stderr: []string{"usage:", "sluice overrides set"}},
		{name: "help", args: []string{"-h"}, stderr: []string{"sluice overrides list"}},
		{name: "subcommand help", args: []string{"set", "-h"}, stderr: []string{"-plan", "-ttl"}},
		{name: "unknown subcommand", args: []string{"show"}, code: 2, stderr: []string{`unknown subcommand "show"`}},
		{name: "no server", args: []string{"get", "tiers", "k"}, code: 2, stderr: []string{"--server is required"}},
		{name: "bad server", args: []string{"get", "tiers", "k", "--server", "ftp://x"}, code: 2, stderr: []string{"--server"}},
		{name: "get without key", args: with("get", "tiers"), code: 2, stderr: []string{"want POLICY KEY"}},
		{name: "delete with three", args: with("delete", "a", "b", "c"), code: 2, stderr: []string{"want POLICY KEY"}},
		{name: "set without plan or limits", args: with("set", "tiers", "k"), code: 2, stderr: []string{"--plan", "--limits"}},
		{name: "set with plan and limits", args: with("set", "tiers", "k", "--plan", "pro", "--limits", "[]"), code: 2, stderr: []string{"--plan", "--limits"}},
		{name: "set with bad limits JSON", args: with("set", "tiers", "k", "--limits", `{"strategy":"gcra"}`), code: 2, stderr: []string{"--limits"}},
		{name: "set with an unknown limit field", args: with("set", "tiers", "k", "--limits", `[{"strategy":"gcra","rate":1}]`), code: 2, stderr: []string{"--limits", "rate"}},
		{name: "set with trailing limits", args: with("set", "tiers", "k", "--limits", `[] []`), code: 2, stderr: []string{"--limits"}},
		{name: "negative ttl", args: with("set", "tiers", "k", "--plan", "pro", "--ttl", "-1h"), code: 2, stderr: []string{"--ttl"}},
		{name: "bad ttl", args: with("set", "tiers", "k", "--plan", "pro", "--ttl", "soon"), code: 2, stderr: []string{"-ttl"}},
		{name: "unknown flag", args: with("get", "tiers", "k", "--plan", "pro"), code: 2, stderr: []string{"-plan"}},
		{name: "list without policy", args: with("list"), code: 2, stderr: []string{"--policy is required"}},
		{name: "list with arguments", args: with("list", "tiers"), code: 2, stderr: []string{"--policy"}},
		{name: "list limit too big", args: with("list", "--policy", "tiers", "--limit", "1001"), code: 2, stderr: []string{"--limit"}},
	})
}

// TestOverridesCommandJSON: set prints the override as package overrides writes it.
func TestOverridesCommandJSON(t *testing.T) {
	url, _ := overridesServer(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"overrides", "set", "--server", url, "--token", "a1", "tiers", "a<b", "--plan", "pro"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, &stderr)
	}
	o, err := overrides.DecodeOverride(bytes.TrimSpace(stdout.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := overrides.EncodeOverride(o)
	if got := strings.TrimSpace(stdout.String()); got != string(want) || o.Key != "a<b" {
		t.Errorf("printed %s, want %s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal(want, &m); err != nil || m["plan"] != "pro" {
		t.Errorf("printed %s (%v)", want, err)
	}
}
