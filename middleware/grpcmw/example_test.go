package grpcmw_test

import (
	"context"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/middleware/grpcmw"
	"github.com/sluicehq/sluice/store/memory"
)

// One call a second per method, with the embedded limiter; the second call is refused with
// RESOURCE_EXHAUSTED and told when to retry. Install the interceptor with
// grpc.NewServer(grpc.UnaryInterceptor(limit)).
func ExampleUnaryServerInterceptor() {
	store := memory.New(memory.Config{Now: func() int64 { return t0 }})
	defer store.Close()
	lim, err := sluice.New(store, sluice.MustPolicy("rpc", sluice.Limit{Strategy: sluice.GCRA{Limit: 1, PeriodMs: 1000, Burst: 1}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	limit := grpcmw.UnaryServerInterceptor(grpcmw.Options{
		Checker: lim,
		Key: func(ctx context.Context, fullMethod string) (string, string, int64) {
			return "rpc", fullMethod, 1
		},
	})

	info := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Orders/Place"}
	handler := func(ctx context.Context, req any) (any, error) { return "placed", nil }
	for range 2 {
		resp, err := limit(context.Background(), nil, info, handler)
		if err != nil {
			st := status.Convert(err)
			retry := st.Details()[0].(*errdetails.RetryInfo)
			fmt.Println(st.Code(), retry.GetRetryDelay().AsDuration())
			continue
		}
		fmt.Println(resp)
	}
	// Output:
	// placed
	// ResourceExhausted 1s
}
