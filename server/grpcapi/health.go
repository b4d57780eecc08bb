package grpcapi

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
)

// healthService is the standard health server whose statuses are refreshed from srv.Ready on every
// Check, List and new Watch: a probe sees the store's state at the moment it asks, with no poller
// to run. A Watch already open hears of a change when some probe next refreshes.
type healthService struct {
	*health.Server
	srv *server.Server
}

var _ healthpb.HealthServer = (*healthService)(nil)

func newHealth(srv *server.Server) *healthService {
	return &healthService{Server: health.NewServer(), srv: srv}
}

func (h *healthService) refresh(ctx context.Context) {
	// A probe waits no longer than a check would for the store.
	if d := h.srv.StoreTimeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	st := healthpb.HealthCheckResponse_SERVING
	if err := h.srv.Ready(ctx); err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	h.SetServingStatus("", st)
	h.SetServingStatus(sluicev1.RateLimiter_ServiceDesc.ServiceName, st)
}

func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.refresh(ctx)
	return h.Server.Check(ctx, req)
}

func (h *healthService) List(ctx context.Context, req *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	h.refresh(ctx)
	return h.Server.List(ctx, req)
}

func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	h.refresh(stream.Context())
	return h.Server.Watch(req, stream)
}
