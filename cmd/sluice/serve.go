package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/console"
	"github.com/sluicehq/sluice/server/envoy"
	"github.com/sluicehq/sluice/server/grpcapi"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/server/topkeys"
	"github.com/sluicehq/sluice/stream"
	"github.com/sluicehq/sluice/stream/pgstream"
)

// serveFlags are sluice serve's command line; the ones naming a config field override the file.
type serveFlags struct {
	config, http, grpc, store string
	allowClientTime           bool
	authTokenFile             string
	tokens                    *bearer.Set // the token file read at start; nil without one
	tlsCert, tlsKey, tlsCA    string
	gateKeyHeader             string
	reloadEvery               time.Duration
	resetQueries              []string
	maxKeys                   int
	requireStore              bool
	pprof                     string // the profiling listener's address; "" for none
}

func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "config `FILE` (YAML); without one, the defaults and no policies")
	fs.StringVar(&f.http, "http", "", "HTTP listen `address`, overriding the config (default "+config.DefaultHTTP+")")
	fs.StringVar(&f.grpc, "grpc", "", "gRPC listen `address`, overriding the config (default "+config.DefaultGRPC+")")
	fs.StringVar(&f.store, "store", "", "store `URL`, overriding the config: "+supportedStores)
	fs.BoolVar(&f.allowClientTime, "allow-client-time", false, "let requests carry their own instant (now), for replay and tests")
	fs.StringVar(&f.authTokenFile, "auth-token-file", "", "`FILE` of bearer tokens, one a line (TOKEN, check:TOKEN or admin:TOKEN), that requests to /v1/* and gRPC must carry; reloaded with the config")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate `FILE` for both ports")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS key `FILE` for both ports")
	fs.StringVar(&f.tlsCA, "tls-client-ca", "", "CA `FILE` that client certificates must chain to (mutual TLS)")
	fs.StringVar(&f.gateKeyHeader, "gate-key-header", "", "request `header` the forward-auth gate takes the key from when ?key= is absent")
	fs.Func("reset-query", "forget the stored offset and open windows of stream query `NAME` before registering it, as a changed definition needs (repeatable; its emitted windows and decisions stay)", func(name string) error {
		if name == "" {
			return errors.New("empty query name")
		}
		f.resetQueries = append(f.resetQueries, name)
		return nil
	})
	fs.DurationVar(&f.reloadEvery, "reload-every", time.Second, "how often to look for a changed config file (SIGHUP reloads at once)")
	fs.BoolVar(&f.requireStore, "require-store", false, "exit non-zero when the store cannot answer at start, instead of serving (not ready) until it does; as requireStore: true in the config")
	fs.StringVar(&f.pprof, "pprof", "", "serve Go's profiles (net/http/pprof, /debug/pprof/) on `address`, a listener of its own with no auth: keep it on loopback; off by default")
	fs.IntVar(&f.maxKeys, "max-keys", 0, "keys the embedded store may hold, overriding the config's maxKeys (default 1000000)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Checked before anything listens: time.NewTicker panics on a period of 0 or less.
	if f.reloadEvery <= 0 {
		return nil, fmt.Errorf("--reload-every must be a positive duration such as 1s, got %v", f.reloadEvery)
	}
	if f.maxKeys < 0 {
		return nil, fmt.Errorf("--max-keys must be at least 1, got %d", f.maxKeys)
	}
	// A malformed token file stops the start like a bad flag (exit 2): serving with fewer tokens
	// than meant would lock clients out, or with none, open everything.
	if f.authTokenFile != "" {
		var err error
		if f.tokens, err = bearer.ReadFile(f.authTokenFile); err != nil {
			return nil, fmt.Errorf("--auth-token-file: %w", err)
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, nil
}

// load reads the config file (or the defaults) and applies the flags over it.
func (f *serveFlags) load() (*config.Config, error) {
	var cfg *config.Config
	var err error
	if f.config == "" {
		cfg, err = config.Parse(nil)
	} else {
		cfg, err = config.Load(f.config)
	}
	if err != nil {
		return nil, err
	}
	for _, o := range []struct {
		flag  string
		field *string
	}{{f.http, &cfg.HTTP}, {f.grpc, &cfg.GRPC}, {f.store, &cfg.Store}} {
		if o.flag != "" {
			*o.field = o.flag
		}
	}
	if f.maxKeys > 0 {
		cfg.MaxKeys = f.maxKeys
	}
	if f.requireStore {
		cfg.RequireStore = true
	}
	return cfg, cfg.Check()
}

// warnings are the config's options that do nothing where they are set (config.Warnings), and
// the flags' likewise.
func (f *serveFlags) warnings(cfg *config.Config) []string {
	w := cfg.Warnings()
	if f.maxKeys > 0 && !config.Embedded(cfg.Store) {
		w = append(w, fmt.Sprintf("--max-keys: does nothing on store %s; it caps the embedded store (memory) only", config.RedactURL(cfg.Store)))
	}
	return w
}

// startProbe bounds the store's first answer at start, longer than a call's store timeout: a
// first connection may take a few round trips.
const startProbe = 5 * time.Second

// streamWorkers is how many gRPC calls run at once on workers: enough for the concurrent callers a
// service of this machine sees, each worker a goroutine of a few KB waiting when idle.
const streamWorkers = 256

// probeEvery is how often serve asks a store that has not answered since start, to log when it does.
const probeEvery = time.Second

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config `FILE` to check")
	storeURL := fs.String("store", "", "store `URL` serve will be given, overriding the config's, for the checks that depend on it")
	connect := fs.Bool("connect", false, "also connect to streams.store and check its stored query definitions, as serve does at start (changes nothing)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice validate: pass --config FILE")
		return 2
	}
	cfg, err := config.Load(*path)
	if err == nil {
		if *storeURL != "" {
			cfg.Store = *storeURL
		}
		if _, err = loadRules(cfg); err == nil {
			err = checkStoreURL(cfg.Store)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice validate: %s: %v\n", *path, err)
		return 1
	}
	// Warnings, not errors: the same file may be meant for another store (see config.Warnings).
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "sluice validate: %s: warning: %s\n", *path, w)
	}
	fmt.Fprintf(stdout, "%s: ok, %d policies", *path, len(cfg.Policies))
	if cfg.Streams != nil {
		names := make([]string, len(cfg.Streams.Queries))
		for i, q := range cfg.Streams.Queries {
			names[i] = q.Name
		}
		fmt.Fprintf(stdout, ", %d stream queries %q", len(names), names)
	}
	fmt.Fprintln(stdout)
	// The one check serve makes that needs the stream store: a query stored there under another
	// definition is refused until reset. The embedded stream store keeps nothing across starts.
	if cfg.Streams == nil || len(cfg.Streams.Queries) == 0 || config.Embedded(cfg.Streams.Store) {
		return 0
	}
	store := config.RedactURL(cfg.Streams.Store)
	if !*connect {
		fmt.Fprintf(stdout, "%s: not checked without --connect: whether streams.store %s holds a query under another definition, which serve refuses until started once with --reset-query NAME\n",
			*path, store)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	switch err := pgstream.CheckQueries(ctx, cfg.Streams.Store, cfg.Streams.Queries); {
	case errors.Is(err, stream.ErrQueryChanged):
		fmt.Fprintf(stderr, "sluice validate: %s: streams.store %s: %v; serve refuses it until started once with --reset-query NAME\n", *path, store, err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "sluice validate: %s: streams.store %s: %v\n", *path, store, redactedError{err, cfg.Streams.Store})
		return 1
	}
	fmt.Fprintf(stdout, "%s: the stream queries agree with streams.store %s\n", *path, store)
	return 0
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseServeFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	startGCFloor()
	if err := serve(ctx, f, log); err != nil {
		log.Error("sluice serve: " + err.Error())
		return 1
	}
	return 0
}

// serve runs the service until ctx ends, then shuts down gracefully: it stops accepting, lets
// requests under way finish, and closes the store.
func serve(ctx context.Context, f *serveFlags, log *slog.Logger) error {
	// The files' versions are noted before the config is read, so that a change made at any time
	// after, even before the servers listen, is seen by the watch below.
	seen, seenTokens := stamp(f.config), stamp(f.authTokenFile)
	cfg, err := f.load()
	if err != nil {
		return err
	}
	rules, err := loadRules(cfg)
	if err != nil {
		return err
	}
	store, closer, err := openStoreWith(cfg.Store, cfg.MaxKeys, f.allowClientTime)
	if err != nil {
		return err
	}
	defer closer.Close()
	backend, err := overridesOf(store)
	if err != nil {
		return err
	}
	opts := server.Options{AllowClientTime: f.allowClientTime, Logger: log, Local: storeKind(cfg.Store) == "memory", Overrides: backend}
	var keys *topkeys.Tracker // the console's top keys; nil when off
	if !cfg.Console.Off && !cfg.Console.NoTopKeys {
		if keys, err = topkeys.New(topkeys.Config{}); err != nil {
			return err
		}
		defer keys.Close()
		opts.Keys = keys
	}
	srv, err := server.New(cfg, store, opts)
	if err != nil {
		return err
	}
	// Leases give back what they did not spend, before the store closes (deferred earlier).
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			log.Warn("sluice serve: returning unspent leases", "err", err)
		}
	}()
	for _, w := range f.warnings(cfg) {
		log.Warn("sluice serve: option has no effect", "option", w)
	}
	// A store that cannot answer at start is most likely misnamed: say so loudly, and stay
	// unready (server.Ready) until it answers, or exit when asked to.
	probeCtx, cancelProbe := context.WithTimeout(ctx, startProbe)
	err = srv.Probe(probeCtx)
	cancelProbe()
	if err != nil {
		err = fmt.Errorf("store %s cannot answer: %w", config.RedactURL(cfg.Store), redactedError{err, cfg.Store})
		if cfg.RequireStore {
			return fmt.Errorf("%w (--require-store)", err)
		}
		log.Error("sluice serve: "+err.Error()+"; not ready until it answers", "store", config.RedactURL(cfg.Store))
		stopProbing := probeUntilAnswered(srv, log, cfg.Store)
		defer stopProbing()
	} else {
		// The store answers: serve once its overrides are loaded, so that the first checks apply
		// them (a slow load goes on in the background; /readyz waits for it).
		select {
		case <-srv.Overrides().Loaded():
		case <-time.After(startProbe):
			log.Warn("sluice serve: overrides not loaded yet; serving, not ready until they are")
		}
	}
	var tokens *bearer.Live // nil: auth off
	if f.tokens != nil {
		tokens = bearer.NewLive(f.tokens)
	}
	tlsConf, err := tlsConfig(f.tlsCert, f.tlsKey, f.tlsCA)
	if err != nil {
		return err
	}
	// Stream mode, when configured: read at start only; a reload leaves it as it is.
	var streams stream.Backend
	if cfg.Streams != nil {
		if streams, err = openStreams(cfg.Streams, f.resetQueries, log); err != nil {
			return err
		}
		defer streams.Close()
		runner := startStreamRunner(streams, cfg.Streams.Queries, log)
		defer runner.stop() // before the deferred Close: the runner may be mid-Process
		if err := srv.RegisterMetrics(streamCollector{b: streams, queries: cfg.Streams.Queries}); err != nil {
			return err
		}
		log.Info("sluice serve: streams", "store", config.RedactURL(cfg.Streams.Store), "queries", len(cfg.Streams.Queries))
	}

	var ui *console.Console // nil when off
	if !cfg.Console.Off {
		cc := console.Config{Server: srv, Keys: keys, Store: storeKind(cfg.Store), Streams: streams}
		if cfg.Streams != nil {
			cc.Queries = cfg.Streams.Queries
		}
		if ui, err = console.New(cc); err != nil {
			return err
		}
		defer ui.Close()
	}

	grpcOpts := []grpc.ServerOption{
		// Idle connections close, pings faster than a client may need are refused, and one
		// connection carries a bounded number of calls.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.GRPCMaxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(cfg.GRPCMaxConcurrentStreams),
		// Calls run on long-lived workers rather than a new goroutine each, whose stack would
		// grow anew for every call (docs/benchmarks.md, "Service path"). Calls beyond the
		// workers, all waiting on the store, still get a goroutine of their own.
		grpc.NumStreamWorkers(streamWorkers),
	}
	if tokens != nil {
		grpcOpts = append(grpcOpts, grpc.UnaryInterceptor(grpcapi.UnaryScopes(tokens)), grpc.StreamInterceptor(grpcapi.StreamScopes(tokens)))
	}
	if tlsConf != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	gs := grpc.NewServer(grpcOpts...)
	grpcapi.Register(gs, srv)
	endWatches := func() {}
	if streams != nil {
		endWatches = grpcapi.RegisterUsage(gs, streams)
	}
	rls, err := envoy.New(srv, rules)
	if err != nil {
		return err
	}
	rls.Register(gs)
	// Requests' contexts end at shutdown, so that long-lived ones (decision watches) finish.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	hs := &http.Server{
		Handler: httpapi.New(srv, httpapi.Options{Tokens: tokens, GateKeyHeader: f.gateKeyHeader, Streams: streams,
			AllowedHosts: cfg.AllowedHosts, TrustedProxies: cfg.TrustedProxies, Console: mountable(ui)}),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: min(5*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		TLSConfig:         tlsConf,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	httpLn, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return err
	}
	httpLn = netutil.LimitListener(httpLn, cfg.MaxConnections)
	grpcLn, err := net.Listen("tcp", cfg.GRPC)
	if err != nil {
		httpLn.Close()
		return err
	}
	log.Info("sluice serve: listening", "http", httpLn.Addr().String(), "grpc", grpcLn.Addr().String(),
		"store", config.RedactURL(cfg.Store), "storeTimeout", srv.StoreTimeout(), "policies", len(cfg.Policies), "tls", tlsConf != nil)

	errc := make(chan error, 2)
	go func() {
		if tlsConf != nil {
			errc <- hs.ServeTLS(httpLn, "", "")
		} else {
			errc <- hs.Serve(httpLn)
		}
	}()
	go func() { errc <- gs.Serve(grpcLn) }()
	if f.pprof != "" {
		stop, err := servePprof(f.pprof, log)
		if err != nil {
			hs.Close()
			gs.Stop()
			return err
		}
		defer stop()
	}

	reload := func() {
		next, err := f.load()
		if err == nil && len(next.Policies) == 0 && len(next.Envoy) == 0 {
			// Most likely a file caught half-written or emptied by mistake: every check would
			// answer 404. An empty config is allowed at start only.
			err = errors.New("the config holds no policies and no envoy rules; keeping the one in force")
		}
		if err == nil {
			for _, w := range f.warnings(next) {
				log.Warn("sluice serve: option has no effect", "option", w)
			}
			var r *envoy.Rules
			if r, err = loadRules(next); err == nil {
				// The new rules' policies go in first: the new config may name them.
				if err = rls.SetRules(r); err == nil {
					err = srv.Reload(next)
				}
			}
		}
		if err != nil {
			srv.ReloadFailed(err)
		}
	}
	// The token file is swapped whole, or not at all: a malformed one leaves the old tokens
	// serving, and so does an empty one, which most likely was caught half-written.
	reloadTokens := func() {
		if tokens == nil {
			return
		}
		next, err := bearer.ReadFile(f.authTokenFile)
		if err != nil {
			log.Error("sluice serve: token file rejected; the previous tokens keep serving", "err", err)
			return
		}
		tokens.Store(next)
		log.Info("sluice serve: token file reloaded", "tokens", next.Len())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watch := time.NewTicker(f.reloadEvery)
	defer watch.Stop()

	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			serveErr = err
			break loop
		case <-hup:
			seen, seenTokens = stamp(f.config), stamp(f.authTokenFile)
			reload()
			reloadTokens()
		case <-watch.C:
			if now := stamp(f.config); now != seen {
				seen = now
				reload()
			}
			if now := stamp(f.authTokenFile); now != seenTokens {
				seenTokens = now
				reloadTokens()
			}
		}
	}

	log.Info("sluice serve: shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs.RegisterOnShutdown(endRequests)
	if err := hs.Shutdown(shutdown); err != nil {
		hs.Close()
	}
	endWatches() // GracefulStop waits for open streams
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutdown.Done():
		gs.Stop()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// probeUntilAnswered asks the store every probeEvery until it answers, then logs that it does;
// the returned func stops it.
func probeUntilAnswered(srv *server.Server, log *slog.Logger, store string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, startProbe)
			err := srv.Probe(pctx)
			pcancel()
			if err == nil {
				log.Info("sluice serve: store answering", "store", config.RedactURL(store))
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// mountable is ui for httpapi.Options.Console: nil (not a nil *Console) when the console is off.
func mountable(ui *console.Console) httpapi.Console {
	if ui == nil {
		return nil
	}
	return ui
}

// openStreams opens stream mode's backend and registers its queries, resetting those named in
// reset first. A query stored with another definition is refused, naming the flag that resets it.
func openStreams(cfg *config.Streams, reset []string, log *slog.Logger) (stream.Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	var b stream.Backend
	if cfg.Store == config.DefaultStore {
		b = stream.NewMemory()
	} else {
		e, err := pgstream.Open(ctx, cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("streams.store %s: %w", config.RedactURL(cfg.Store), redactedError{err, cfg.Store})
		}
		b = e
	}
	for _, name := range reset {
		if !slices.ContainsFunc(cfg.Queries, func(q stream.Query) bool { return q.Name == name }) {
			b.Close()
			return nil, fmt.Errorf("--reset-query %s: no such query in streams.queries", name)
		}
		if err := b.Reset(ctx, name); err != nil {
			b.Close()
			return nil, fmt.Errorf("--reset-query %s: %w", name, err)
		}
		log.Warn("sluice serve: stream query reset", "query", name)
	}
	for _, q := range cfg.Queries {
		if err := b.Register(ctx, q); err != nil {
			b.Close()
			if errors.Is(err, stream.ErrQueryChanged) {
				return nil, fmt.Errorf("streams.queries.%s: %w; start once with --reset-query %s to forget its offset and open windows and count afresh under the new definition", q.Name, err, q.Name)
			}
			return nil, fmt.Errorf("streams.queries.%s: %w", q.Name, err)
		}
	}
	return b, nil
}

// Stream runner's pace: a pass over every query takes up to streamBatch events of each; after a
// pass that found nothing it sleeps streamIdle, after one that failed streamRetry.
const (
	streamBatch = 10_000
	streamIdle  = 20 * time.Millisecond
	streamRetry = time.Second
)

// streamRunner is the one goroutine that runs Process for every configured query.
type streamRunner struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startStreamRunner(b stream.Backend, queries []stream.Query, log *slog.Logger) *streamRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &streamRunner{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			processed, failed := 0, false
			for _, q := range queries {
				n, err := b.Process(ctx, q, time.Now().UnixMilli(), streamBatch)
				if err != nil && ctx.Err() == nil {
					log.Error("sluice serve: stream query", "query", q.Name, "err", err)
					failed = true
				}
				processed += n
			}
			pause := time.Duration(0)
			switch {
			case failed:
				pause = streamRetry
			case processed == 0:
				pause = streamIdle
			}
			if pause > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}
	}()
	return r
}

// stop ends the runner and waits for it; it may be called any number of times.
func (r *streamRunner) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

// loadRules reads the Envoy rate-limit files cfg names and checks them against cfg's policies.
func loadRules(cfg *config.Config) (*envoy.Rules, error) {
	rules, err := envoy.Load(cfg.Envoy)
	if err != nil {
		return nil, err
	}
	return rules, rules.Validate(cfg)
}

// stamp identifies a version of the file at path: its size and modification time.
func stamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}

// tlsConfig builds the servers' TLS from the flags: nil without a certificate; mutual TLS with a
// client CA.
func tlsConfig(cert, key, clientCA string) (*tls.Config, error) {
	if cert == "" && key == "" && clientCA == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// servePprof serves net/http/pprof's handlers on addr, apart from the API's listeners (so that no
// token or host check applies and none is needed: bind it to loopback). stop closes it.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ps := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go ps.Serve(ln)
	log.Info("sluice serve: profiles", "pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { ps.Close() }, nil
}
