package grpcapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

// TestCostZeroMeansOne: proto3 cannot tell an unset cost from 0, so every RPC that takes a cost
// spends (or refunds) 1 for 0, as the HTTP API does for "cost": 0; a negative cost is
// INVALID_ARGUMENT naming its field.
func TestCostZeroMeansOne(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, c sluicev1.RateLimiterClient, cost int64) error
		// remaining is what key "k" of partner-api (capacity 100) has left after the call with
		// cost 0 or 1, refund after a check of 5.
		remaining int64
		refund    bool
		field     string // what a negative cost's error names
	}{
		{"check", func(ctx context.Context, c sluicev1.RateLimiterClient, cost int64) error {
			_, err := c.Check(ctx, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Cost: cost, Now: t0})
			return err
		}, 99, false, "cost"},
		{"check many", func(ctx context.Context, c sluicev1.RateLimiterClient, cost int64) error {
			_, err := c.CheckMany(ctx, &sluicev1.CheckManyRequest{Policy: "partner-api", Keys: []string{"k"}, Cost: cost, Now: t0})
			return err
		}, 99, false, "cost"},
		{"check all item", func(ctx context.Context, c sluicev1.RateLimiterClient, cost int64) error {
			_, err := c.CheckAll(ctx, &sluicev1.CheckAllRequest{Now: t0, Items: []*sluicev1.Item{{Policy: "partner-api", Key: "k", Cost: cost}}})
			return err
		}, 99, false, "items[0].cost"},
		{"refund", func(ctx context.Context, c sluicev1.RateLimiterClient, cost int64) error {
			_, err := c.Refund(ctx, &sluicev1.RefundRequest{Policy: "partner-api", Key: "k", Cost: cost, Now: t0})
			return err
		}, 96, true, "cost"},
	}
	for _, tt := range tests {
		for _, cost := range []int64{0, 1} {
			t.Run(fmt.Sprintf("%s/cost %d", tt.name, cost), func(t *testing.T) {
				c := client(t)
				if tt.refund {
					check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Cost: 5, Now: t0})
				}
				if err := tt.call(t.Context(), c, cost); err != nil {
					t.Fatal(err)
				}
				d, err := c.Peek(t.Context(), &sluicev1.PeekRequest{Policy: "partner-api", Key: "k", Now: t0})
				if err != nil {
					t.Fatal(err)
				}
				if d.GetRemaining() != tt.remaining {
					t.Errorf("remaining %d after the call, want %d", d.GetRemaining(), tt.remaining)
				}
			})
		}
		t.Run(tt.name+"/negative cost", func(t *testing.T) {
			err := tt.call(t.Context(), client(t), -1)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "invalid "+tt.field) {
				t.Errorf("got %v, want INVALID_ARGUMENT naming %s", err, tt.field)
			}
		})
	}

	t.Run("forecast", func(t *testing.T) {
		c := client(t)
		check(t, c, &sluicev1.CheckRequest{Policy: "partner-api", Key: "k", Cost: 40, Now: t0})
		one, err := c.Forecast(t.Context(), &sluicev1.ForecastRequest{Policy: "partner-api", Key: "k", Cost: 1, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		zero, err := c.Forecast(t.Context(), &sluicev1.ForecastRequest{Policy: "partner-api", Key: "k", Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if zero.GetSpendableNow() != one.GetSpendableNow() || zero.GetFullAt() != one.GetFullAt() || zero.GetNextReplenishAt() != one.GetNextReplenishAt() {
			t.Errorf("forecast of cost 0 %v, of cost 1 %v: want the same", zero, one)
		}
	})
}
