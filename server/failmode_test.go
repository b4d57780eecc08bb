package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server"
)

const failModeConfig = `
storeTimeout: 20ms
policies:
  open-api:   {strategy: fixedWindow, limit: 3, window: 1m}
  closed-api: {strategy: fixedWindow, limit: 3, window: 1m, failMode: closed}
  leased:     {strategy: tokenBucket, capacity: 100, refillPerSec: 1, lease: true}
`

// TestFailOpenIsMarked checks that every decision a fail-open policy gives without the store says
// so, and that a fail-closed refusal is told apart from an operation with no fail mode failing.
func TestFailOpenIsMarked(t *testing.T) {
	srv, err := server.New(parse(t, failModeConfig), brokenStore{}, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	one := func(d sluice.Decision, err error) []sluice.Decision {
		if err != nil {
			t.Fatalf("fail-open check: %v", err)
		}
		return []sluice.Decision{d}
	}
	tests := []struct {
		name string
		call func() []sluice.Decision
	}{
		{"Check", func() []sluice.Decision { return one(srv.Check(ctx, 0, "open-api", "k", 1)) }},
		{"Check of a leased policy", func() []sluice.Decision { return one(srv.Check(ctx, 0, "leased", "k", 1)) }},
		{"CheckMany", func() []sluice.Decision {
			ds, err := srv.CheckMany(ctx, 0, "open-api", []string{"a", "b"}, 1)
			if err != nil || len(ds) != 2 {
				t.Fatalf("CheckMany: %+v, %v", ds, err)
			}
			return ds
		}},
		{"CheckAll", func() []sluice.Decision {
			d, err := srv.CheckAll(ctx, 0, []sluice.Item{{Policy: "open-api", Key: "a", Cost: 1}, {Policy: "leased", Key: "a", Cost: 1}})
			if err != nil || len(d.Parts) != 2 {
				t.Fatalf("CheckAll: %+v, %v", d, err)
			}
			return append([]sluice.Decision{d}, d.Parts...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, d := range tt.call() {
				if !d.Allowed || !d.FailOpen || d.Limit != 0 || d.Remaining != 0 || d.DeniedBy != -1 {
					t.Errorf("decision %d: %+v; want allowed, FailOpen, no numbers", i, d)
				}
			}
		})
	}

	closed := []struct {
		name       string
		err        error
		failClosed bool
	}{
		{"Check, fail closed", second(srv.Check(ctx, 0, "closed-api", "k", 1)), true},
		{"CheckMany, fail closed", second(srv.CheckMany(ctx, 0, "closed-api", []string{"a"}, 1)), true},
		{"CheckAll, one item fails closed", second(srv.CheckAll(ctx, 0, []sluice.Item{{Policy: "open-api", Key: "a", Cost: 1}, {Policy: "closed-api", Key: "a", Cost: 1}})), true},
		{"Peek has no fail mode", second(srv.Peek(ctx, 0, "closed-api", "k")), false},
	}
	for _, tt := range closed {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, sluice.ErrUnavailable) || server.FailedClosed(tt.err) != tt.failClosed {
				t.Errorf("%v: FailedClosed %v, want %v, and ErrUnavailable", tt.err, server.FailedClosed(tt.err), tt.failClosed)
			}
		})
	}
	if server.FailedClosed(errors.New("other")) || server.FailedClosed(nil) {
		t.Error("FailedClosed of an unrelated error")
	}

	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sluice_fail_mode_decisions_total{mode="open",policy="open-api"} 3`,
		`sluice_fail_mode_decisions_total{mode="closed",policy="closed-api"} 3`,
		`sluice_store_errors_total{kind="error"}`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func second[T any](_ T, err error) error { return err }
