// Package grpcapi serves sluice's native gRPC API, sluice.v1.RateLimiter, over a server.Server,
// together with the standard gRPC health and reflection services.
//
// A denial is a normal response. Errors carry the gRPC code of server.CodeOf: bad input is
// INVALID_ARGUMENT (with a google.rpc.BadRequest detail naming the field), an unknown policy
// NOT_FOUND, a store that cannot answer under a fail-closed policy UNAVAILABLE, anything else
// INTERNAL.
//
// When the store cannot answer in time, a check is decided by its policy's fail mode: fail open,
// the decision has fail_open set (and every number zero); fail closed, the call is UNAVAILABLE.
// Either way the response header metadata carries sluice-fail-mode: open or closed.
package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/internal/grpcstatus"
)

// MaxBatch is the most keys of CheckMany, or items of CheckAll, that one call may carry: the same
// bound as the HTTP API's, so that one call cannot hold the store for long.
const MaxBatch = 1000

// Register registers on gs the RateLimiter and Concurrency services answered by srv, the
// standard health service (grpc.health.v1.Health: SERVING while srv.Ready succeeds, NOT_SERVING
// otherwise, for the whole server "" and for sluice.v1.RateLimiter) and server reflection.
func Register(gs *grpc.Server, srv *server.Server) {
	sluicev1.RegisterRateLimiterServer(gs, &service{srv: srv})
	sluicev1.RegisterConcurrencyServer(gs, &concurrency{srv: srv})
	healthgrpc.RegisterHealthServer(gs, newHealth(srv))
	reflection.Register(gs)
}

type service struct {
	sluicev1.UnimplementedRateLimiterServer
	srv *server.Server
}

// FailModeKey is the response header metadata key that marks a check decided by its policy's fail
// mode because the store could not answer: "open" or "closed".
const FailModeKey = "sluice-fail-mode"

// failMode sets FailModeKey to mode; the header is best effort, the decision or status says it too.
func failMode(ctx context.Context, mode string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(FailModeKey, mode))
}

// checkStatus is Status for the checks, which mark a fail-closed refusal.
func checkStatus(ctx context.Context, err error) error {
	if server.FailedClosed(err) {
		failMode(ctx, "closed")
	}
	return grpcstatus.Of(err)
}

// markOpen marks the call when any of ds was decided by the fail mode.
func markOpen(ctx context.Context, ds ...sluice.Decision) {
	for _, d := range ds {
		if d.FailOpen {
			failMode(ctx, "open")
			return
		}
	}
}

func (s *service) Check(ctx context.Context, req *sluicev1.CheckRequest) (*sluicev1.Decision, error) {
	d, err := s.srv.Check(ctx, req.GetNow(), req.GetPolicy(), req.GetKey(), cost(req.GetCost()))
	if err != nil {
		return nil, checkStatus(ctx, err)
	}
	markOpen(ctx, d)
	out := new(sluicev1.Decision)
	fill(out, d)
	return out, nil
}

func (s *service) CheckMany(ctx context.Context, req *sluicev1.CheckManyRequest) (*sluicev1.CheckManyResponse, error) {
	keys := req.GetKeys()
	if len(keys) > MaxBatch {
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "keys", Reason: fmt.Sprintf("%d keys, more than %d per call", len(keys), MaxBatch)})
	}
	ds, err := s.srv.CheckMany(ctx, req.GetNow(), req.GetPolicy(), keys, cost(req.GetCost()))
	if err != nil {
		return nil, checkStatus(ctx, err)
	}
	markOpen(ctx, ds...)
	// One allocation for all the messages: batches are the path that must be cheap per check.
	msgs := make([]sluicev1.Decision, len(ds))
	out := &sluicev1.CheckManyResponse{Decisions: make([]*sluicev1.Decision, len(ds))}
	for i, d := range ds {
		fill(&msgs[i], d)
		out.Decisions[i] = &msgs[i]
	}
	return out, nil
}

func (s *service) CheckAll(ctx context.Context, req *sluicev1.CheckAllRequest) (*sluicev1.Decision, error) {
	in := req.GetItems()
	if len(in) > MaxBatch {
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "items", Reason: fmt.Sprintf("%d items, more than %d per call", len(in), MaxBatch)})
	}
	items := make([]sluice.Item, len(in))
	for i, it := range in {
		items[i] = sluice.Item{Policy: it.GetPolicy(), Key: it.GetKey(), Cost: cost(it.GetCost())}
	}
	d, err := s.srv.CheckAll(ctx, req.GetNow(), items)
	if err != nil {
		return nil, checkStatus(ctx, err)
	}
	markOpen(ctx, d)
	out := new(sluicev1.Decision)
	fill(out, d)
	return out, nil
}

func (s *service) Peek(ctx context.Context, req *sluicev1.PeekRequest) (*sluicev1.Decision, error) {
	d, err := s.srv.Peek(ctx, req.GetNow(), req.GetPolicy(), req.GetKey())
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	out := new(sluicev1.Decision)
	fill(out, d)
	return out, nil
}

func (s *service) Forecast(ctx context.Context, req *sluicev1.ForecastRequest) (*sluicev1.Forecast, error) {
	f, err := s.srv.Forecast(ctx, req.GetNow(), req.GetPolicy(), req.GetKey(), cost(req.GetCost()))
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.Forecast{SpendableNow: f.SpendableNow, NextReplenishAt: f.NextReplenishAt, FullAt: f.FullAt}, nil
}

func (s *service) Reset(ctx context.Context, req *sluicev1.ResetRequest) (*sluicev1.ResetResponse, error) {
	if err := s.srv.Reset(ctx, req.GetPolicy(), req.GetKey()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.ResetResponse{}, nil
}

func (s *service) Settle(ctx context.Context, req *sluicev1.SettleRequest) (*sluicev1.SettleResponse, error) {
	if err := s.srv.Settle(ctx, req.GetNow(), req.GetPolicy(), req.GetKey(), req.GetReserved(), req.GetActual()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.SettleResponse{}, nil
}

func (s *service) Refund(ctx context.Context, req *sluicev1.RefundRequest) (*sluicev1.RefundResponse, error) {
	if err := s.srv.Refund(ctx, req.GetNow(), req.GetPolicy(), req.GetKey(), cost(req.GetCost())); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.RefundResponse{}, nil
}

// cost applies the wire default: proto3 cannot tell an unset cost from 0, so 0 means 1. A negative
// cost is passed on for the limiter to refuse.
func cost(c int64) int64 {
	if c == 0 {
		return 1
	}
	return c
}

// fill writes d into m, parts and all.
func fill(m *sluicev1.Decision, d sluice.Decision) {
	m.Allowed = d.Allowed
	m.Limit = d.Limit
	m.Remaining = d.Remaining
	m.ResetAt = d.ResetAt
	m.RetryAfterMs = d.RetryAfterMs
	m.DeniedBy = int32(d.DeniedBy) // an index among at most MaxBatch items or a policy's limits
	m.FailOpen = d.FailOpen
	m.Plan = d.Plan
	m.Override = d.Override
	if len(d.Parts) == 0 {
		return
	}
	parts := make([]sluicev1.Decision, len(d.Parts))
	m.Parts = make([]*sluicev1.Decision, len(d.Parts))
	for i, p := range d.Parts {
		fill(&parts[i], p)
		m.Parts[i] = &parts[i]
	}
}
