package grpcapi_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

// Concurrency limits over gRPC: two slots, a third holder denied until one is released, a lease
// that runs out refused at its heartbeat, and bad input named.
func TestConcurrency(t *testing.T) {
	c := sluicev1.NewConcurrencyClient(serve(t, setup{allowClientTime: true}))
	ctx := context.Background()
	admit := func(holder string, now int64) *sluicev1.Admission {
		t.Helper()
		a, err := c.Admit(ctx, &sluicev1.AdmitRequest{Name: "jobs", Key: "tenant", Holder: holder, Limit: 2, TtlMs: 1000, Now: now})
		if err != nil {
			t.Fatalf("Admit(%s): %v", holder, err)
		}
		return a
	}
	if a := admit("a", t0); !a.Allowed || a.InFlight != 1 {
		t.Fatalf("first: %v", a)
	}
	if a := admit("b", t0+100); !a.Allowed || a.InFlight != 2 {
		t.Fatalf("second: %v", a)
	}
	if a := admit("c", t0+200); a.Allowed || a.InFlight != 2 || a.RetryAfterMs != 800 {
		t.Fatalf("third: %v, want denied with retry 800 (a's lease ends at t0+1000)", a)
	}
	if _, err := c.Release(ctx, &sluicev1.ReleaseRequest{Name: "jobs", Key: "tenant", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	if a := admit("c", t0+300); !a.Allowed {
		t.Fatalf("after a's release: %v", a)
	}
	if _, err := c.Heartbeat(ctx, &sluicev1.HeartbeatRequest{Name: "jobs", Key: "tenant", Holder: "b", TtlMs: 1000, Now: t0 + 1000}); err != nil {
		t.Fatalf("b's heartbeat within its lease: %v", err)
	}
	_, err := c.Heartbeat(ctx, &sluicev1.HeartbeatRequest{Name: "jobs", Key: "tenant", Holder: "c", TtlMs: 1000, Now: t0 + 5000})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("c's heartbeat after its lease ran out: %v, want FAILED_PRECONDITION", err)
	}
	_, err = c.Admit(ctx, &sluicev1.AdmitRequest{Name: "jobs", Key: "tenant", Holder: "d", Limit: 0, TtlMs: 1000})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || violationField(st) != "limit" {
		t.Fatalf("limit 0: %v, want INVALID_ARGUMENT naming limit", err)
	}
}
