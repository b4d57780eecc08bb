package loadgen

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// gubernator's V1 API (gubernator.proto, package pb.gubernator, v2.13.0), encoded by hand so that
// sluice needs none of its generated code:
//
//	GetRateLimitsReq  { repeated RateLimitReq requests = 1; }
//	RateLimitReq      { string name = 1; string unique_key = 2; int64 hits = 3; int64 limit = 4;
//	                    int64 duration = 5 (ms); Algorithm algorithm = 6 (0 TOKEN_BUCKET); … }
//	GetRateLimitsResp { repeated RateLimitResp responses = 1; }
//	RateLimitResp     { Status status = 1 (0 UNDER_LIMIT, 1 OVER_LIMIT); int64 limit = 2;
//	                    int64 remaining = 3; int64 reset_time = 4; string error = 5; … }
const gubernatorMethod = "/pb.gubernator.V1/GetRateLimits"

// gubernatorMaxBatch is gubernator's maxBatchSize: a call with more requests is refused.
const gubernatorMaxBatch = 1000

// rawCodec is a gRPC codec that sends and receives messages already in wire format: Marshal takes
// a []byte (or *[]byte), Unmarshal appends to a *[]byte. It is forced per call, never registered,
// and is named "proto" so that the content type is application/grpc+proto, which the server
// decodes with its generated types.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	var b []byte
	switch v := v.(type) {
	case []byte:
		b = v
	case *[]byte:
		b = *v
	default:
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	// A copy into a pooled buffer, which gRPC frees when written, so the caller may reuse b at once.
	return mem.BufferSlice{mem.Copy(b, mem.DefaultBufferPool())}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*p = (*p)[:0]
	for _, b := range data {
		*p = append(*p, b.ReadOnlyData()...)
	}
	return nil
}

// rateLimitResp is one decoded RateLimitResp.
type rateLimitResp struct {
	Status    int32 // 0 UNDER_LIMIT, 1 OVER_LIMIT
	Limit     int64
	Remaining int64
	ResetTime int64 // epoch ms
	Error     string
}

// gubernatorReq holds the fields every RateLimitReq of a run shares, already encoded: head is
// field 1 (name), tail fields 3 to 5 (hits, limit, duration). algorithm (6) stays 0, token bucket,
// which proto3 leaves out.
type gubernatorReq struct {
	head, tail []byte
}

func newGubernatorReq(name string, hits, limit, durationMs int64) gubernatorReq {
	var r gubernatorReq
	r.head = protowire.AppendTag(nil, 1, protowire.BytesType)
	r.head = protowire.AppendString(r.head, name)
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{3, hits}, {4, limit}, {5, durationMs}} {
		if f.v != 0 {
			r.tail = protowire.AppendTag(r.tail, f.num, protowire.VarintType)
			r.tail = protowire.AppendVarint(r.tail, uint64(f.v))
		}
	}
	return r
}

// appendGetRateLimitsReq appends a GetRateLimitsReq of one RateLimitReq per key to b.
func (r gubernatorReq) append(b []byte, keys []string) []byte {
	for _, k := range keys {
		key := protowire.SizeTag(2) + protowire.SizeBytes(len(k))
		if k == "" {
			key = 0 // proto3 leaves an empty string out
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(r.head)+key+len(r.tail)))
		b = append(b, r.head...)
		if k != "" {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendString(b, k)
		}
		b = append(b, r.tail...)
	}
	return b
}

// parseGetRateLimitsResp decodes a GetRateLimitsResp, appending its responses to out[:0]. Fields it
// does not know (metadata, or any added later) are skipped.
func parseGetRateLimitsResp(b []byte, out []rateLimitResp) ([]rateLimitResp, error) {
	out = out[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, fmt.Errorf("GetRateLimitsResp: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return out, fmt.Errorf("GetRateLimitsResp.responses: %w", protowire.ParseError(n))
			}
			r, err := parseRateLimitResp(v)
			if err != nil {
				return out, err
			}
			out = append(out, r)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return out, fmt.Errorf("GetRateLimitsResp field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return out, nil
}

func parseRateLimitResp(b []byte) (rateLimitResp, error) {
	var r rateLimitResp
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, fmt.Errorf("RateLimitResp: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num >= 1 && num <= 4 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return r, fmt.Errorf("RateLimitResp field %d: %w", num, protowire.ParseError(n))
			}
			switch num {
			case 1:
				r.Status = int32(v)
			case 2:
				r.Limit = int64(v)
			case 3:
				r.Remaining = int64(v)
			case 4:
				r.ResetTime = int64(v)
			}
			b = b[n:]
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return r, fmt.Errorf("RateLimitResp.error: %w", protowire.ParseError(n))
			}
			r.Error = string(v)
			b = b[n:]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return r, fmt.Errorf("RateLimitResp field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return r, nil
}

// gubernatorTransport drives gubernator's GetRateLimits over the same connections as the gRPC
// transport: Policy is the rate limit's name, each key its unique_key, Cost its hits, and
// Limit and Period its limit and duration.
type gubernatorTransport struct {
	*grpcTransport
	req gubernatorReq
}

func newGubernator(cfg Config) (*gubernatorTransport, error) {
	g, err := newGRPC(cfg)
	if err != nil {
		return nil, err
	}
	return &gubernatorTransport{grpcTransport: g,
		req: newGubernatorReq(cfg.Policy, cfg.Cost, cfg.Limit, cfg.Period.Milliseconds())}, nil
}

func (t *gubernatorTransport) caller(worker int) caller {
	return &gubernatorCaller{conn: t.conns[worker%len(t.conns)], auth: authContext{token: t.cfg.Token}, req: t.req,
		opts: []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}}
}

type gubernatorCaller struct {
	conn *grpc.ClientConn
	auth authContext
	req  gubernatorReq
	opts []grpc.CallOption
	body []byte
	resp []byte
	out  []rateLimitResp
}

func (c *gubernatorCaller) call(ctx context.Context, keys []string) (outcome, error) {
	ctx = c.auth.of(ctx)
	c.body = c.req.append(c.body[:0], keys)
	if err := c.conn.Invoke(ctx, gubernatorMethod, c.body, &c.resp, c.opts...); err != nil {
		return outcome{}, err
	}
	var err error
	c.out, err = parseGetRateLimitsResp(c.resp, c.out)
	if err != nil {
		return outcome{}, err
	}
	if len(c.out) != len(keys) {
		return outcome{}, fmt.Errorf("GetRateLimits of %d requests answered %d responses", len(keys), len(c.out))
	}
	var o outcome
	for i, r := range c.out {
		if r.Error != "" {
			return outcome{}, errors.New("GetRateLimits " + keys[i] + ": " + r.Error)
		}
		if r.Status == 0 {
			o.allowed++
		}
	}
	return o, nil
}
