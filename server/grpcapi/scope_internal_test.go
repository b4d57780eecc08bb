package grpcapi

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// The names in checkMethods are strings where importing their packages is not worth it: a
// rename must not quietly close them to check tokens.
func TestCheckMethodNames(t *testing.T) {
	for _, m := range []string{
		rlsv3.RateLimitService_ShouldRateLimit_FullMethodName,
		reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName,
		reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName,
	} {
		if !checkMethods[m] {
			t.Errorf("%s needs admin, want check", m)
		}
	}
}
