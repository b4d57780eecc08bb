package grpcapi_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

// rawCodec sends a message's bytes as given, so that a test can put on the wire what the Go
// protobuf encoder would refuse to.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

// A key that is not UTF-8 never reaches the limiter over gRPC: proto3 strings must be UTF-8, and
// the server refuses the request as it decodes it, so one key is one bucket whichever door.
func TestKeyNotUTF8(t *testing.T) {
	conn := serve(t, setup{})
	for _, key := range []string{"x\xffy", "x\xfey", "\xed\xb0\x80"} { // the last: a lone surrogate in UTF-8 form
		t.Run(key, func(t *testing.T) {
			var msg []byte
			msg = protowire.AppendTag(msg, 1, protowire.BytesType)
			msg = protowire.AppendString(msg, "partner-api")
			msg = protowire.AppendTag(msg, 2, protowire.BytesType)
			msg = protowire.AppendString(msg, key)
			var out sluicev1.Decision
			err := conn.Invoke(t.Context(), "/sluice.v1.RateLimiter/Check", msg, &out, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.Internal {
				t.Fatalf("Check of key %q: %v, want the server to refuse its decoding", key, err)
			}
		})
	}
	// The replacement character's bucket was not charged.
	d, err := sluicev1.NewRateLimiterClient(conn).Peek(t.Context(), &sluicev1.PeekRequest{Policy: "partner-api", Key: "x\ufffdy"})
	if err != nil || d.GetRemaining() != d.GetLimit() {
		t.Errorf("peek x\\ufffdy: %v %v, want untouched", d, err)
	}
}
