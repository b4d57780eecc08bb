package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
)

// TestServerFailMode runs the client against a real server whose store cannot answer: the
// decisions its fail-open policy allows come back with FailOpen, and its fail-closed policy's
// refusal as an *Error with FailMode "closed".
func TestServerFailMode(t *testing.T) {
	cfg, err := config.Parse([]byte(`
policies:
  open:   {strategy: fixedWindow, limit: 5, window: 1m}
  closed: {strategy: fixedWindow, limit: 5, window: 1m, failMode: closed}
`))
	if err != nil {
		t.Fatal(err)
	}
	down := memory.New(memory.Config{SweepInterval: -1})
	down.Close() // every call fails, as an unreachable store's does
	srv, err := server.New(cfg, down, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(httpapi.New(srv, httpapi.Options{}))
	t.Cleanup(ts.Close)
	// The client's own FailOpen stays off: what comes back is the server's.
	c := newClient(t, ts.URL, client.Options{})
	ctx := context.Background()
	open := sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}

	t.Run("Check", func(t *testing.T) {
		d, err := c.Check(ctx, "open", "k", 1)
		if err != nil || !reflect.DeepEqual(d, open) {
			t.Errorf("%+v, %v; want %+v", d, err, open)
		}
	})
	t.Run("CheckMany", func(t *testing.T) {
		ds, err := c.CheckMany(ctx, "open", []string{"a", "b"}, 1)
		if want := []sluice.Decision{open, open}; err != nil || !reflect.DeepEqual(ds, want) {
			t.Errorf("%+v, %v; want %+v", ds, err, want)
		}
	})
	t.Run("CheckAll", func(t *testing.T) {
		d, err := c.CheckAll(ctx, sluice.Item{Policy: "open", Key: "a", Cost: 1}, sluice.Item{Policy: "open", Key: "b", Cost: 1})
		want := open
		want.Parts = []sluice.Decision{open, open}
		if err != nil || !reflect.DeepEqual(d, want) {
			t.Errorf("%+v, %v; want %+v", d, err, want)
		}
	})
	tests := []struct {
		name     string
		call     func() error
		failMode string
	}{
		{"Check, fail closed", func() error { _, err := c.Check(ctx, "closed", "k", 1); return err }, "closed"},
		{"CheckAll, an item fails closed", func() error {
			_, err := c.CheckAll(ctx, sluice.Item{Policy: "open", Key: "a", Cost: 1}, sluice.Item{Policy: "closed", Key: "a", Cost: 1})
			return err
		}, "closed"},
		{"Peek has no fail mode", func() error { _, err := c.Peek(ctx, "open", "k"); return err }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ce *client.Error
			if !errors.Is(err, sluice.ErrUnavailable) || !errors.As(err, &ce) || ce.FailMode != tt.failMode {
				t.Errorf("%#v; want an *Error matching ErrUnavailable with FailMode %q", err, tt.failMode)
			}
		})
	}
}
