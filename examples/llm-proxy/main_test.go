package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

func expectDemoPass(t *testing.T, args ...string) {
	t.Helper()
	var out, logs bytes.Buffer
	code := run(context.Background(), append([]string{"--demo"}, args...), &out, &logs)
	if code != 0 || !strings.Contains(out.String(), "\nPASS: 10 checks\n") || strings.Count(out.String(), "  ok: ") != 10 {
		t.Fatalf("exit %d:\n%s\nlog:\n%s", code, out.String(), logs.String())
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	expectDemoPass(t)
	expectDemoPass(t, "--store", "memory://")
}

// TestDemoSharedStores runs the demo over Redis and PostgreSQL, each when it is reachable (SLUICE_REDIS_URL, SLUICE_POSTGRES_URL, else the local
// defaults); an unreachable store skips, or fails under CI=true.
func TestDemoSharedStores(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := envOr("SLUICE_REDIS_URL", "redis://127.0.0.1:6379")
		s, err := redisstore.Open(url)
		if err == nil {
			_, err = s.Peek(context.Background(), 0, sluice.MustPolicy("probe", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}}), "probe")
			s.Close()
		}
		if err != nil {
			unreachable(t, "Redis", url, err)
		}
		expectDemoPass(t, "--store", url)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := envOr("SLUICE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, url)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			unreachable(t, "PostgreSQL", url, err)
		}
		t.Cleanup(pool.Close)
		schema := fmt.Sprintf("llm_proxy_demo_%d", os.Getpid())
		t.Cleanup(func() {
			if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				t.Error(err)
			}
		})
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		expectDemoPass(t, "--store", url+sep+"sluice_schema="+schema)
	})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func unreachable(t *testing.T, what, url string, err error) {
	t.Helper()
	msg := fmt.Sprintf("no %s at %s: %v", what, url, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--demo", "--burst", "2"}, 2, "--demo runs the built-in limits and takes only --store, not --burst"},
		{[]string{"--upstream", "127.0.0.1:9000"}, 2, "--upstream must be an http:// or https:// URL"},
		{[]string{"--model", "small=60"}, 2, "want NAME=RPM/TPM"},
		{[]string{"--model", "a=1/1", "--model", "a=2/2"}, 2, `model "a" is given twice`},
		{[]string{"--default-max-tokens", "0"}, 2, "llm-proxy: the default max tokens must be from 1"},
		{[]string{"--store", "mysql://u:secret@h/db"}, 1, "llm-proxy: unsupported store mysql://…"},
		{[]string{"extra"}, 2, `llm-proxy: unexpected argument "extra"`},
		{[]string{"--demo", "--store", "nonsense"}, 1, "FAIL: llm-proxy: unsupported store nonsense"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		code := run(context.Background(), tt.args, &out, &out)
		if code != tt.code || !strings.Contains(out.String(), tt.want) || strings.Contains(out.String(), "secret") {
			t.Errorf("%q: exit %d, %q; want exit %d and %q", tt.args, code, out.String(), tt.code, tt.want)
		}
	}
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want modelLimits
		err  string
	}{
		{"small=60/10000", modelLimits{"small", 60, 10_000}, ""},
		{"gpt-4o-mini=500/200000", modelLimits{"gpt-4o-mini", 500, 200_000}, ""},
		{"meta/llama-3.1:8b=1/1", modelLimits{"meta/llama-3.1:8b", 1, 1}, ""},
		{"small", modelLimits{}, "want NAME=RPM/TPM"},
		{"=1/1", modelLimits{}, "want NAME=RPM/TPM"},
		{"small=60", modelLimits{}, "want NAME=RPM/TPM"},
		{"small=0/10", modelLimits{}, "requests per minute must be"},
		{"small=10/-1", modelLimits{}, "tokens per minute must be"},
		{"small=10/1.5", modelLimits{}, "tokens per minute must be"},
		{"small=10/1099511627777", modelLimits{}, "tokens per minute must be"},
		{"two words=1/1", modelLimits{}, "may hold only letters, digits and -_.:/"},
	}
	for _, tt := range tests {
		got, err := parseLimits(tt.in)
		if tt.err == "" && (err != nil || got != tt.want) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("parseLimits(%q) = %+v, %v; want %+v, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// lineWriter hands on each line a logger writes (one per Write).
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// start runs the program with args until the test ends, and returns the URL it listens on.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := make(lineWriter, 100)
	done := make(chan int, 1)
	go func() { done <- run(ctx, append(args, "--listen", "127.0.0.1:0"), io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("%q exited %d", args, code)
		}
	})
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	for {
		select {
		case line := <-logs:
			if m := listening.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case code := <-done:
			t.Fatalf("%q exited %d", args, code)
		case <-time.After(30 * time.Second):
			t.Fatalf("%q did not listen", args)
		}
	}
}

// TestServe runs the fake model and the proxy as a user would, and sends a call through.
func TestServe(t *testing.T) {
	t.Parallel()
	fake := start(t, "--fake-model")
	proxy := start(t, "--upstream", fake, "--model", "tiny=1/100", "--burst", "2", "--default-max-tokens", "10")
	call := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, proxy+"/v1/chat/completions", strings.NewReader(chatBody("tiny", "please answer with 4 tokens", 0)))
		req.Header.Set("X-Api-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := call()
	var answer struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != 200 || answer.Usage.TotalTokens != 9 {
		t.Fatalf("status %d, usage %+v, %v", resp.StatusCode, answer.Usage, err)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"tiny#requests";q=1;w=60, "tiny#tokens";q=200;w=120`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if resp := call(); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second call in a minute at 1 RPM: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	st := readStats(t, proxy)["tiny"]
	if st.Allowed != 1 || st.Throttled != 1 || st.ThrottledBy["requests"] != 1 || st.TokensRefunded != 15-9 || st.TokenBurst != 200 {
		t.Errorf("stats %+v", st)
	}
}
