package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// newServer is the handler of `sluice serve` without policies, as server/httpapi's tests build it.
func newServer(t testing.TB, opts httpapi.Options) http.Handler {
	t.Helper()
	cfg, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(cfg, store, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.New(srv, opts)
}

// The client's concurrency calls against a real server over the memory store.
func TestConcurrency(t *testing.T) {
	srv := httptest.NewServer(newServer(t, httpapi.Options{}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.Options{})
	ctx := context.Background()
	admit := func(holder string) concurrency.Admission {
		t.Helper()
		a, err := c.Admit(ctx, "jobs", "tenant", holder, 2, 60_000)
		if err != nil {
			t.Fatalf("Admit(%s): %v", holder, err)
		}
		return a
	}
	if a := admit("a"); !a.Allowed || a.InFlight != 1 || a.Limit != 2 {
		t.Fatalf("first: %+v", a)
	}
	admit("b")
	if a := admit("c"); a.Allowed || a.InFlight != 2 || a.RetryAfterMs <= 0 {
		t.Fatalf("third: %+v, want denied with a retry", a)
	}
	if err := c.Release(ctx, "jobs", "tenant", "a"); err != nil {
		t.Fatal(err)
	}
	if a := admit("c"); !a.Allowed {
		t.Fatalf("after a's release: %+v", a)
	}
	if err := c.Heartbeat(ctx, "jobs", "tenant", "b", 60_000); err != nil {
		t.Fatalf("b's heartbeat: %v", err)
	}
	if err := c.Heartbeat(ctx, "jobs", "tenant", "a", 60_000); !errors.Is(err, concurrency.ErrNotHeld) {
		t.Fatalf("a's heartbeat after its release: %v, want ErrNotHeld", err)
	}
	_, err := c.Admit(ctx, "jobs", "tenant", "d", 0, 60_000)
	var ie *sluice.InvalidError
	if !errors.As(err, &ie) || ie.Field != "limit" {
		t.Fatalf("limit 0: %v, want an InvalidError naming limit", err)
	}
}
