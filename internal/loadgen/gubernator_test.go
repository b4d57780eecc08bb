package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// msg builds a protobuf message from fields appended in order, for hand-built expected bytes.
type msg []byte

func (m msg) varint(num protowire.Number, v int64) msg {
	m = protowire.AppendTag(m, num, protowire.VarintType)
	return protowire.AppendVarint(m, uint64(v))
}

func (m msg) bytes(num protowire.Number, v []byte) msg {
	m = protowire.AppendTag(m, num, protowire.BytesType)
	return protowire.AppendBytes(m, v)
}

func (m msg) str(num protowire.Number, v string) msg { return m.bytes(num, []byte(v)) }

func TestGubernatorReqEncoding(t *testing.T) {
	tests := []struct {
		name               string
		policy             string
		keys               []string
		hits, limit, durMs int64
		want               []byte
	}{
		{
			// Written out byte by byte: 0a = field 1 bytes; 12 = field 2 bytes; 18/20/28 = fields 3/4/5 varint.
			name: "literal", policy: "p", keys: []string{"k"}, hits: 1, limit: 5, durMs: 1000,
			want: []byte{0x0a, 0x0d, 0x0a, 0x01, 'p', 0x12, 0x01, 'k', 0x18, 0x01, 0x20, 0x05, 0x28, 0xe8, 0x07},
		},
		{
			name: "unary", policy: "bench", keys: []string{"bench-7"}, hits: 1, limit: 1000000, durMs: 1000,
			want: msg(nil).bytes(1, msg(nil).str(1, "bench").str(2, "bench-7").varint(3, 1).varint(4, 1000000).varint(5, 1000)),
		},
		{
			name: "batch", policy: "api", keys: []string{"a", "bb", "a"}, hits: 3, limit: 10, durMs: 60000,
			want: msg(nil).
				bytes(1, msg(nil).str(1, "api").str(2, "a").varint(3, 3).varint(4, 10).varint(5, 60000)).
				bytes(1, msg(nil).str(1, "api").str(2, "bb").varint(3, 3).varint(4, 10).varint(5, 60000)).
				bytes(1, msg(nil).str(1, "api").str(2, "a").varint(3, 3).varint(4, 10).varint(5, 60000)),
		},
		{
			name: "zero fields left out", policy: "p", keys: []string{""}, hits: 0, limit: 7, durMs: 0,
			want: msg(nil).bytes(1, msg(nil).str(1, "p").varint(4, 7)),
		},
		{
			name: "long key, two-byte length", policy: "p", keys: []string{strings.Repeat("x", 200)}, hits: 1, limit: 1, durMs: 1,
			want: msg(nil).bytes(1, msg(nil).str(1, "p").str(2, strings.Repeat("x", 200)).varint(3, 1).varint(4, 1).varint(5, 1)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newGubernatorReq(tt.policy, tt.hits, tt.limit, tt.durMs)
			got := r.append([]byte("junk")[:0], tt.keys)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("encoded\n %x\nwant\n %x", got, tt.want)
			}
			// And back, as the fake server reads it.
			reqs, err := parseGetRateLimitsReq(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != len(tt.keys) {
				t.Fatalf("decoded %d requests, want %d", len(reqs), len(tt.keys))
			}
			for i, q := range reqs {
				want := fakeReq{tt.policy, tt.keys[i], tt.hits, tt.limit, tt.durMs, 0}
				if q != want {
					t.Errorf("request %d = %+v, want %+v", i, q, want)
				}
			}
		})
	}
}

func TestParseGetRateLimitsResp(t *testing.T) {
	metadata := msg(nil).str(1, "owner").str(2, "127.0.0.1:19051") // a map entry
	tests := []struct {
		name string
		in   []byte
		want []rateLimitResp
		err  string
	}{
		{name: "empty", in: nil, want: []rateLimitResp{}},
		{
			// 0a 00: one RateLimitResp with every field at its default: UNDER_LIMIT.
			name: "literal default", in: []byte{0x0a, 0x00}, want: []rateLimitResp{{}},
		},
		{
			name: "under and over",
			in: msg(nil).
				bytes(1, msg(nil).varint(2, 100).varint(3, 99).varint(4, 1700000000123)).
				bytes(1, msg(nil).varint(1, 1).varint(2, 100).varint(4, 1700000000456)),
			want: []rateLimitResp{
				{Status: 0, Limit: 100, Remaining: 99, ResetTime: 1700000000123},
				{Status: 1, Limit: 100, Remaining: 0, ResetTime: 1700000000456},
			},
		},
		{
			name: "error, metadata and unknown fields skipped",
			in: msg(nil).
				varint(7, 42).
				bytes(1, msg(nil).str(5, "field 'unique_key' cannot be empty").bytes(6, metadata).varint(99, 1)).
				str(8, "later"),
			want: []rateLimitResp{{Error: "field 'unique_key' cannot be empty"}},
		},
		{name: "truncated outer", in: []byte{0x0a, 0x05, 0x08}, err: "GetRateLimitsResp.responses"},
		{name: "truncated inner", in: msg(nil).bytes(1, []byte{0x10}), err: "RateLimitResp field 2"},
		{name: "bad tag", in: []byte{0x00}, err: "GetRateLimitsResp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseGetRateLimitsResp(tt.in, make([]rateLimitResp, 3))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("decoded %+v, want %+v", got, tt.want)
			}
			// And back, as the fake server writes it, then decoded again.
			again, err := parseGetRateLimitsResp(appendGetRateLimitsResp(nil, got), nil)
			if err != nil || fmt.Sprint(again) != fmt.Sprint(tt.want) {
				t.Fatalf("round trip = %+v, %v; want %+v", again, err, tt.want)
			}
		})
	}
}

func TestRawCodec(t *testing.T) {
	c := rawCodec{}
	b := []byte{1, 2, 3}
	out, err := c.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 9 // the caller may reuse its buffer once Marshal returns
	var got []byte
	if err := c.Unmarshal(out, &got); err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("Unmarshal = %x, %v", got, err)
	}
	out.Free()
	if _, err := c.Marshal("s"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := c.Unmarshal(nil, &b[0]); err == nil {
		t.Error("Unmarshal into a *byte: no error")
	}
}

// fakeReq is one decoded RateLimitReq, as the fake server sees it.
type fakeReq struct {
	Name, Key               string
	Hits, Limit, DurationMs int64
	Algorithm               int64
}

// parseGetRateLimitsReq decodes what the generator sends: the fake server's half of the wire format.
func parseGetRateLimitsReq(b []byte) ([]fakeReq, error) {
	var out []fakeReq
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, fmt.Errorf("GetRateLimitsReq: field %d type %d", num, typ)
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		b = b[n+m:]
		var q fakeReq
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			v = v[n:]
			if typ == protowire.BytesType {
				s, n := protowire.ConsumeString(v)
				if n < 0 {
					return nil, protowire.ParseError(n)
				}
				switch num {
				case 1:
					q.Name = s
				case 2:
					q.Key = s
				default:
					return nil, fmt.Errorf("RateLimitReq: unexpected field %d", num)
				}
				v = v[n:]
				continue
			}
			x, n := protowire.ConsumeVarint(v)
			if n < 0 || typ != protowire.VarintType {
				return nil, fmt.Errorf("RateLimitReq field %d: type %d", num, typ)
			}
			switch num {
			case 3:
				q.Hits = int64(x)
			case 4:
				q.Limit = int64(x)
			case 5:
				q.DurationMs = int64(x)
			case 6:
				q.Algorithm = int64(x)
			default:
				return nil, fmt.Errorf("RateLimitReq: unexpected field %d", num)
			}
			v = v[n:]
		}
		out = append(out, q)
	}
	return out, nil
}

func appendGetRateLimitsResp(b []byte, rs []rateLimitResp) []byte {
	for _, r := range rs {
		var m msg
		if r.Status != 0 {
			m = m.varint(1, int64(r.Status))
		}
		if r.Limit != 0 {
			m = m.varint(2, r.Limit)
		}
		if r.Remaining != 0 {
			m = m.varint(3, r.Remaining)
		}
		if r.ResetTime != 0 {
			m = m.varint(4, r.ResetTime)
		}
		if r.Error != "" {
			m = m.str(5, r.Error)
		}
		b = msg(b).bytes(1, m)
	}
	return b
}

// fakeGubernator answers pb.gubernator.V1/GetRateLimits like a single gubernator node, with a
// count per name and key that never resets: enough to check the generator's encoding, not
// gubernator's algorithms. A key starting with "err" gets a response with an error.
type fakeGubernator struct {
	mu    sync.Mutex
	used  map[string]int64
	first fakeReq // the first request seen
	calls int
}

func (f *fakeGubernator) getRateLimits(body []byte) ([]byte, error) {
	reqs, err := parseGetRateLimitsReq(body)
	if err != nil {
		return nil, err
	}
	if len(reqs) > gubernatorMaxBatch {
		return nil, errors.New("list too large")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == 0 && len(reqs) > 0 {
		f.first = reqs[0]
	}
	f.calls++
	rs := make([]rateLimitResp, len(reqs))
	for i, q := range reqs {
		if strings.HasPrefix(q.Key, "err") {
			rs[i].Error = "fake error for " + q.Key
			continue
		}
		k := q.Name + "_" + q.Key
		rs[i] = rateLimitResp{Status: 1, Limit: q.Limit}
		if f.used[k]+q.Hits <= q.Limit {
			f.used[k] += q.Hits
			rs[i] = rateLimitResp{Status: 0, Limit: q.Limit, Remaining: q.Limit - f.used[k]}
		}
	}
	return appendGetRateLimitsResp(nil, rs), nil
}

func startFakeGubernator(t *testing.T) (*fakeGubernator, string) {
	t.Helper()
	f := &fakeGubernator{used: map[string]int64{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "pb.gubernator.V1",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "GetRateLimits",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var body []byte
				if err := dec(&body); err != nil {
					return nil, err
				}
				return f.getRateLimits(body)
			},
		}},
	}, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func TestRunGubernator(t *testing.T) {
	f, addr := startFakeGubernator(t)
	tests := []struct {
		name        string
		policy      string
		batch       int
		limit       int64
		keys        int
		wantAllowed func(s *Summary) bool
	}{
		{"unary", "u", 0, 1 << 40, 50, func(s *Summary) bool { return s.Allowed == s.Checks }},
		{"batch", "b", 100, 1 << 40, 50, func(s *Summary) bool { return s.Allowed == s.Checks }},
		// 3 keys × limit 4, the first call's included: 12 allowed in all.
		{"denials", "d", 10, 4, 3, func(s *Summary) bool { return s.Allowed == 12 && s.Denied > 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Run(context.Background(), Config{Target: addr, Proto: Gubernator, Policy: tt.policy,
				Keys: tt.keys, Concurrency: 4, Conns: 2, Duration: 300 * time.Millisecond, Batch: tt.batch,
				Limit: tt.limit, Period: 90 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			batch := int64(max(tt.batch, 1))
			switch {
			case s.Calls == 0 || s.Errors != 0:
				t.Errorf("calls %d errors %d (%s)", s.Calls, s.Errors, s.FirstError)
			case s.Checks != s.Calls*batch:
				t.Errorf("checks %d, want calls %d × %d", s.Checks, s.Calls, batch)
			case s.Allowed+s.Denied != s.Checks || !tt.wantAllowed(s):
				t.Errorf("allowed %d denied %d of %d checks", s.Allowed, s.Denied, s.Checks)
			case s.Limit != tt.limit || s.PeriodMs != 90000:
				t.Errorf("summary limit %d period %d ms", s.Limit, s.PeriodMs)
			}
			f.mu.Lock()
			first := f.first
			f.calls = 0
			f.mu.Unlock()
			want := fakeReq{Name: tt.policy, Key: "bench-0", Hits: 1, Limit: tt.limit, DurationMs: 90000}
			if first != want {
				t.Errorf("first request %+v, want %+v", first, want)
			}
		})
	}
}

func TestRunGubernatorErrors(t *testing.T) {
	_, addr := startFakeGubernator(t)
	cfg := Config{Target: addr, Proto: Gubernator, Policy: "p", Keys: 1, Concurrency: 1, Conns: 1,
		Duration: time.Second, Limit: 1, Period: time.Second}

	// A response carrying an error fails the whole call.
	tr, err := newGubernator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	call := tr.caller(0)
	if _, err := call.call(context.Background(), []string{"ok", "err-1"}); err == nil ||
		!strings.Contains(err.Error(), "fake error for err-1") {
		t.Errorf("call with an error response = %v", err)
	}
	if o, err := call.call(context.Background(), []string{"ok2"}); err != nil || o.allowed != 1 {
		t.Errorf("call after it = %+v, %v", o, err)
	}
}
