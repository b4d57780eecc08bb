package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memory"
)

// pingStore is a store whose Ping answers *err; its checks go to a memory store.
type pingStore struct {
	*memory.Store
	err *error
}

func (p pingStore) Ping(context.Context) error { return *p.err }

var errPing = errors.New("redis store: slots 0-5460 (master 10.0.0.1:7000): connection refused")

func TestReady(t *testing.T) {
	tests := []struct {
		name   string
		config string
		extra  bool  // a front end adds a policy (Envoy's rules take the file's fail mode)
		ping   error // what the store's Ping answers, after it answered once
		never  bool  // the store has not answered since start
		want   string
	}{
		{name: "store never answered, every policy fails open", ping: errPing, never: true, want: "has not answered since start",
			config: "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n"},
		{name: "store never answered, no policy", ping: errPing, never: true, want: "has not answered since start",
			config: "policies: {}\n"},
		{name: "store answers", ping: nil,
			config: "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: closed}\n"},
		{name: "store down, every policy fails open", ping: errPing,
			config: "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n  b: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: open}\n"},
		{name: "store down, a policy fails closed", ping: errPing, want: `policies ["b"] fail closed`,
			config: "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n  b: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: closed}\n"},
		{name: "store down, the file fails closed", ping: errPing, want: `policies ["a"] fail closed`,
			config: "failMode: closed\npolicies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n  b: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: open}\n"},
		{name: "store down, a front end's policy takes the file's closed mode", ping: errPing, extra: true, want: `policies ["envoy:x"] fail closed`,
			config: "failMode: closed\npolicies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: open}\n"},
		{name: "store down, a front end's policy takes the file's open mode", ping: errPing, extra: true,
			config: "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n"},
		{name: "store down, no policy", ping: errPing, config: "policies: {}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ping error
			srv, err := server.New(parse(t, tt.config), pingStore{memStore(t), &ping},
				server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.never {
				if err := srv.Probe(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			ping = tt.ping
			if tt.extra {
				x := sluice.MustPolicy("envoy:x", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 60_000}})
				if err := srv.SetExtraPolicies("envoy", []*sluice.Policy{x}); err != nil {
					t.Fatal(err)
				}
			}
			err = srv.Ready(context.Background())
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Ready: %v, want ready", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errPing)):
				t.Errorf("Ready: %v, want an error naming %s and wrapping the store's", err, tt.want)
			}
		})
	}
}

// TestReadyFollowsReload checks that readiness follows the fail modes in force: a reload that
// makes the last fail-closed policy fail open makes a Server whose store is down ready.
func TestReadyFollowsReload(t *testing.T) {
	closed := "policies:\n  a: {strategy: gcra, limit: 1, period: 1s, burst: 1, failMode: closed}\n"
	var ping error
	srv, err := server.New(parse(t, closed), pingStore{memStore(t), &ping},
		server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(context.Background()); err != nil {
		t.Fatalf("Ready with the store answering: %v", err)
	}
	ping = errPing
	if err := srv.Ready(context.Background()); err == nil {
		t.Fatal("ready with the store down and a policy failing closed")
	}
	if err := srv.Reload(parse(t, strings.Replace(closed, "closed", "open", 1))); err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(context.Background()); err != nil {
		t.Errorf("Ready after every policy was made to fail open: %v", err)
	}
}
