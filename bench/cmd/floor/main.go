// Command floor serves Envoy's rate-limit API, envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit, answering OK for every descriptor without any work: the floor a rate-limit service
// on this gRPC stack can reach, against which scripts/servicepath.sh measures sluice serve and
// envoyproxy/ratelimit.
//
//	floor --listen 127.0.0.1:0
//
// It prints "listening ADDR" once its port is open, and serves until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// floor answers every request OK, one OK status per descriptor, as a rate limiter that never
// limits would.
type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (floor) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "gRPC listen `address` (port 0: any free port)")
	flag.Parse()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(2)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, floor{})
	fmt.Printf("listening %s\n", lis.Addr())
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		gs.Stop()
	}()
	if err := gs.Serve(lis); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}
