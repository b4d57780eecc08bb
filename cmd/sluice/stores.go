package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store/memory"
	pgstore "github.com/sluicehq/sluice/store/postgres"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

const supportedStores = "memory (or memory://), redis://host:port[/db], redis-sentinel://host:port,…?master=NAME, " +
	"redis-cluster://host:port,… (rediss… for TLS), postgres://user@host:port/db[?sluice_schema=NAME] (or postgresql://)"

// openTimeout bounds connecting to and migrating a database store at startup.
const openTimeout = 30 * time.Second

// openStore opens the store that url names; the closer releases it. Shared stores plug in here.
func openStore(url string) (sluice.Store, io.Closer, error) { return openStoreWith(url, 0, false) }

// storeKind names the store url is for: "memory", "redis" or "postgres"; "" for none supported.
func storeKind(url string) string {
	switch {
	case url == "memory" || url == "memory://":
		return "memory"
	case strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://") || strings.HasPrefix(url, "redis-") || strings.HasPrefix(url, "rediss-"):
		return "redis"
	case strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"):
		return "postgres"
	}
	return ""
}

// openStoreWith is openStore with the embedded store's key cap (0: none). With clientTime
// (--allow-client-time) the embedded store does not sweep: requests decide at instants of their
// own, often far from the clock the sweep would judge idleness by, and it would drop keys a replay
// is still using; the key cap still bounds it.
func openStoreWith(url string, maxKeys int, clientTime bool) (sluice.Store, io.Closer, error) {
	switch storeKind(url) {
	case "memory":
		cfg := memory.Config{MaxKeys: maxKeys}
		if clientTime {
			cfg.SweepInterval = -1
		}
		s := memory.New(cfg)
		return s, s, nil
	case "redis":
		s, err := redisstore.Open(url)
		if err != nil {
			return nil, nil, fmt.Errorf("store %s: %w", config.RedactURL(url), redactedError{err, url})
		}
		return s, s, nil
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		s, err := pgstore.Open(ctx, url)
		if err != nil {
			return nil, nil, fmt.Errorf("store %s: %w", config.RedactURL(url), redactedError{err, url})
		}
		return s, s, nil
	}
	return nil, nil, unsupportedStore(url)
}

// overridesOf is where a fleet on store keeps its overrides: in the store itself for Redis and
// PostgreSQL; nil (each process its own) for the embedded store.
func overridesOf(store sluice.Store) (overrides.Backend, error) {
	switch s := store.(type) {
	case *redisstore.Store:
		return s.Overrides(), nil
	case *pgstore.Store:
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		return s.Overrides(ctx)
	}
	return nil, nil
}

// checkStoreURL checks what openStoreWith would refuse of url without connecting: its scheme
// and, for Redis, its form.
func checkStoreURL(url string) error {
	switch storeKind(url) {
	case "":
		return unsupportedStore(url)
	case "redis":
		if _, err := redisstore.ParseURL(url); err != nil {
			return fmt.Errorf("store %s: %w", config.RedactURL(url), redactedError{err, url})
		}
	}
	return nil
}

func unsupportedStore(url string) error {
	return fmt.Errorf("unsupported store %q; supported: %s", config.RedactURL(url), supportedStores)
}

// redactedError is a store client's error, which may quote its URL, with the URL's password
// redacted from its text; errors.Is and As still see the error.
type redactedError struct {
	err error
	url string
}

func (e redactedError) Error() string { return config.RedactIn(e.err.Error(), e.url) }
func (e redactedError) Unwrap() error { return e.err }
