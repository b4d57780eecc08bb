// Command llm-proxy is an HTTP proxy in front of a chat completions API (OpenAI's shape) that gives
// every client key, per model, a budget of requests per minute and of tokens per minute, and
// settles each call's real token count from its answer: reserve the estimate, refund what the
// answer did not use, charge what it used beyond, which may put the key in debt.
//
//	go run ./examples/llm-proxy --fake-model                                  # a fake model server on 127.0.0.1:9000
//	go run ./examples/llm-proxy --upstream http://127.0.0.1:9000             # the proxy, on 127.0.0.1:8080
//	go run ./examples/llm-proxy --model small=60/10000 --model large=10/2000 --burst 2 --store redis://127.0.0.1:6379
//	go run ./examples/llm-proxy --demo                                        # both in process, a scripted check
//
// --demo prints "ok: ..." per check and "PASS: N checks", or "FAIL: reason" and exits 1.
// README.md explains the limits and the settling.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	pgstore "github.com/sluicehq/sluice/store/postgres"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the program; it returns the exit code. A server runs until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("llm-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "`address` to listen on (default 127.0.0.1:8080, or 127.0.0.1:9000 with --fake-model)")
	upstream := fs.String("upstream", "http://127.0.0.1:9000", "the model server's base `URL`, without /v1")
	storeURL := fs.String("store", "memory", "`store`: memory, redis://host:port[/db] (and every form sluice serve takes), postgres://user@host:port/db")
	var limits limitsFlag
	fs.Var(&limits, "model", "a model's limits per key as `NAME=RPM/TPM`, repeatable (default small=60/10000 and large=10/2000)")
	burst := fs.Float64("burst", 1, "tokens a key can spend at once, as a `multiple` of its tokens per minute")
	defaultMax := fs.Int64("default-max-tokens", 256, "completion `tokens` reserved for a request without max_tokens")
	timeout := fs.Duration("upstream-timeout", 2*time.Minute, "how long a call to the model server may take")
	fake := fs.Bool("fake-model", false, "run the fake model server instead of the proxy")
	demo := fs.Bool("demo", false, "start the fake model and the proxy in process, run a scripted check and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "llm-proxy: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger := log.New(stderr, "llm-proxy: ", log.LstdFlags)
	switch {
	case *demo:
		var other []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "demo" && f.Name != "store" {
				other = append(other, "--"+f.Name)
			}
		})
		if len(other) > 0 {
			fmt.Fprintf(stderr, "llm-proxy: --demo runs the built-in limits and takes only --store, not %s\n", strings.Join(other, " "))
			return 2
		}
		if err := runDemo(ctx, stdout, *storeURL, logger.Printf); err != nil {
			fmt.Fprintf(stdout, "\nFAIL: %v\n", err)
			return 1
		}
		return 0
	case *fake:
		return serve(ctx, orDefault(*listen, "127.0.0.1:9000"), (&fakeModel{}).Handler(), logger,
			"fake model server")
	}
	if err := checkUpstream(*upstream); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if len(limits) == 0 {
		limits = defaultLimits
	}
	store, closer, err := openStore(*storeURL)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer closer.Close()
	p, err := newProxy(store, proxyConfig{
		Limits: limits, Burst: *burst, Upstream: *upstream, DefaultMax: *defaultMax,
		// From the environment, not a flag, so that it does not show in the process list.
		UpstreamKey: os.Getenv("LLM_PROXY_UPSTREAM_KEY"),
		Client:      &http.Client{Timeout: *timeout},
		Logf:        logger.Printf,
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, l := range limits {
		logger.Printf("model %s: %d requests and %d tokens a minute per key, bursts of %d tokens", l.Name, l.RPM, l.TPM, p.models[l.Name].policy.MaxCost())
	}
	return serve(ctx, orDefault(*listen, "127.0.0.1:8080"), p.Handler(), logger,
		fmt.Sprintf("proxy (upstream %s, store %s)", *upstream, storeName(*storeURL)))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// serve serves h on addr until ctx is done, then lets requests under way finish.
func serve(ctx context.Context, addr string, h http.Handler, logger *log.Logger, what string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Print(err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: logger}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	logger.Printf("%s listening on http://%s", what, ln.Addr())
	select {
	case err := <-done:
		logger.Print(err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// checkUpstream rejects an upstream URL that cannot be called.
func checkUpstream(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("llm-proxy: --upstream must be an http:// or https:// URL, got %q", s)
	}
	return nil
}

// openStore opens the store url names, as sluice serve does (cmd/sluice/stores.go, which is in
// package main and cannot be imported); the closer releases it.
func openStore(url string) (sluice.Store, io.Closer, error) {
	switch {
	case url == "memory" || url == "memory://":
		s := memory.New(memory.Config{})
		return s, s, nil
	case strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://") ||
		strings.HasPrefix(url, "redis-") || strings.HasPrefix(url, "rediss-"):
		s, err := redisstore.Open(url)
		if err != nil {
			return nil, nil, fmt.Errorf("llm-proxy: store %s: %w", storeName(url), err)
		}
		return s, s, nil
	case strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"):
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := pgstore.Open(ctx, url)
		if err != nil {
			return nil, nil, fmt.Errorf("llm-proxy: store %s: %w", storeName(url), err)
		}
		return s, s, nil
	}
	return nil, nil, fmt.Errorf("llm-proxy: unsupported store %s; use memory, a redis:// or a postgres:// URL", storeName(url))
}

// storeName names a store URL by its scheme only: the rest may hold a password.
func storeName(url string) string {
	if scheme, _, ok := strings.Cut(url, "://"); ok {
		return scheme + "://…"
	}
	return url
}

// limitsFlag is the repeatable --model NAME=RPM/TPM.
type limitsFlag []modelLimits

func (f *limitsFlag) String() string {
	var parts []string
	for _, l := range *f {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", l.Name, l.RPM, l.TPM))
	}
	return strings.Join(parts, " ")
}

func (f *limitsFlag) Set(s string) error {
	l, err := parseLimits(s)
	if err != nil {
		return err
	}
	for _, have := range *f {
		if have.Name == l.Name {
			return fmt.Errorf("model %q is given twice", l.Name)
		}
	}
	*f = append(*f, l)
	return nil
}

// parseLimits reads NAME=RPM/TPM, such as small=60/10000.
func parseLimits(s string) (modelLimits, error) {
	name, rates, ok := strings.Cut(s, "=")
	rpm, tpm, ok2 := strings.Cut(rates, "/")
	if !ok || !ok2 || name == "" {
		return modelLimits{}, fmt.Errorf("want NAME=RPM/TPM, such as small=60/10000, got %q", s)
	}
	l := modelLimits{Name: name}
	for _, v := range []struct {
		dst  *int64
		s    string
		what string
	}{{&l.RPM, rpm, "requests"}, {&l.TPM, tpm, "tokens"}} {
		n, err := strconv.ParseInt(v.s, 10, 64)
		if err != nil || n < 1 || n > 1<<40 {
			return modelLimits{}, fmt.Errorf("%s per minute must be a whole number from 1 to 2^40, got %q", v.what, v.s)
		}
		*v.dst = n
	}
	if _, err := l.policy(1); err != nil {
		if inv, ok := errors.AsType[*sluice.InvalidError](err); ok && inv.Field == "policy" {
			return modelLimits{}, fmt.Errorf("model name %q may hold only letters, digits and -_.:/", name)
		}
		return modelLimits{}, err
	}
	return l, nil
}
