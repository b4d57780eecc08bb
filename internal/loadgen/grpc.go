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
		token:  t.cfg.Token,
		one:    &sluicev1.CheckRequest{Policy: t.cfg.Policy, Cost: t.cfg.Cost},
		many:   &sluicev1.CheckManyRequest{Policy: t.cfg.Policy, Cost: t.cfg.Cost},
		batch:  t.cfg.Batch > 1,
	}
	return c
}

type grpcCaller struct {
	client sluicev1.RateLimiterClient
	token  string
	one    *sluicev1.CheckRequest
	many   *sluicev1.CheckManyRequest
	batch  bool
	ctx    context.Context // the run's context with the token attached, made on the first call
	parent context.Context
}

func (c *grpcCaller) call(ctx context.Context, keys []string) (int, error) {
	if ctx != c.parent {
		c.parent, c.ctx = ctx, ctx
		if c.token != "" {
			c.ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
		}
	}
	if !c.batch {
		c.one.Key = keys[0]
		d, err := c.client.Check(c.ctx, c.one)
		if err != nil {
			return 0, err
		}
		if d.GetAllowed() {
			return 1, nil
		}
		return 0, nil
	}
	c.many.Keys = keys
	r, err := c.client.CheckMany(c.ctx, c.many)
	if err != nil {
		return 0, err
	}
	if len(r.GetDecisions()) != len(keys) {
		return 0, fmt.Errorf("CheckMany of %d keys answered %d decisions", len(keys), len(r.GetDecisions()))
	}
	allowed := 0
	for _, d := range r.GetDecisions() {
		if d.GetAllowed() {
			allowed++
		}
	}
	return allowed, nil
}
