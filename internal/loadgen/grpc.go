package loadgen

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

// grpcTransport spreads the workers over Conns client connections, each its own HTTP/2 connection.
type grpcTransport struct {
	cfg   Config
	conns []*grpc.ClientConn
}

func newGRPC(cfg Config) (*grpcTransport, error) {
	t := &grpcTransport{cfg: cfg}
	for range cfg.Conns {
		conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.close()
			return nil, fmt.Errorf("grpc: %w", err)
		}
		t.conns = append(t.conns, conn)
	}
	return t, nil
}

func (t *grpcTransport) close() {
	for _, c := range t.conns {
		c.Close()
	}
}

func (t *grpcTransport) caller(worker int) caller {
	c := &grpcCaller{
		client: sluicev1.NewRateLimiterClient(t.conns[worker%len(t.conns)]),
		auth:   authContext{token: t.cfg.Token},
		one:    &sluicev1.CheckRequest{Policy: t.cfg.Policy, Cost: t.cfg.Cost},
		many:   &sluicev1.CheckManyRequest{Policy: t.cfg.Policy, Cost: t.cfg.Cost},
		batch:  t.cfg.Batch > 1,
	}
	return c
}

type grpcCaller struct {
	client sluicev1.RateLimiterClient
	auth   authContext
	one    *sluicev1.CheckRequest
	many   *sluicev1.CheckManyRequest
	batch  bool
}

func (c *grpcCaller) call(ctx context.Context, keys []string) (outcome, error) {
	ctx = c.auth.of(ctx)
	if !c.batch {
		c.one.Key = keys[0]
		d, err := c.client.Check(ctx, c.one)
		if err != nil {
			return outcome{}, err
		}
		return grpcOutcome(d), nil
	}
	c.many.Keys = keys
	r, err := c.client.CheckMany(ctx, c.many)
	if err != nil {
		return outcome{}, err
	}
	if len(r.GetDecisions()) != len(keys) {
		return outcome{}, fmt.Errorf("CheckMany of %d keys answered %d decisions", len(keys), len(r.GetDecisions()))
	}
	var o outcome
	for _, d := range r.GetDecisions() {
		o.add(grpcOutcome(d))
	}
	return o, nil
}

func grpcOutcome(d *sluicev1.Decision) outcome {
	var o outcome
	if d.GetAllowed() {
		o.allowed = 1
	}
	if d.GetFailOpen() {
		o.failOpen = 1
	}
	return o
}

// authContext attaches a bearer token to the run's context, once per run rather than per call.
type authContext struct {
	token       string
	parent, ctx context.Context
}

func (a *authContext) of(ctx context.Context) context.Context {
	if ctx != a.parent {
		a.parent, a.ctx = ctx, ctx
		if a.token != "" {
			a.ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.token)
		}
	}
	return a.ctx
}
