package grpcapi

import (
	"context"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/internal/grpcstatus"
)

// concurrency serves sluice.v1.Concurrency: concurrency limits of the server's store.
type concurrency struct {
	sluicev1.UnimplementedConcurrencyServer
	srv *server.Server
}

func (c *concurrency) Admit(ctx context.Context, req *sluicev1.AdmitRequest) (*sluicev1.Admission, error) {
	a, err := c.srv.Admit(ctx, req.GetNow(), req.GetName(), req.GetKey(), req.GetHolder(), req.GetLimit(), req.GetTtlMs())
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.Admission{Allowed: a.Allowed, InFlight: a.InFlight, Limit: a.Limit, RetryAfterMs: a.RetryAfterMs}, nil
}

func (c *concurrency) Heartbeat(ctx context.Context, req *sluicev1.HeartbeatRequest) (*sluicev1.HeartbeatResponse, error) {
	if err := c.srv.Heartbeat(ctx, req.GetNow(), req.GetName(), req.GetKey(), req.GetHolder(), req.GetTtlMs()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.HeartbeatResponse{}, nil
}

func (c *concurrency) Release(ctx context.Context, req *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	if err := c.srv.Release(ctx, req.GetName(), req.GetKey(), req.GetHolder()); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.ReleaseResponse{}, nil
}
