package server_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server"
)

// BenchmarkCheckOverrides is a Check through the Server, as a front end asks it, over the memory
// store: a policy with no overrides, and one with 100k checked on keys without one.
func BenchmarkCheckOverrides(b *testing.B) {
	const cfg = `
policies:
  none: {strategy: gcra, limit: 1000000, period: 1s, burst: 1000000}
  full: {strategy: gcra, limit: 1000000, period: 1s, burst: 1000000}
`
	srv, err := server.New(parse(b, cfg), memStore(b), server.Options{Local: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	ctx := context.Background()
	own := []overrides.Limit{{Strategy: "gcra", Limit: 20, PeriodMs: 1000, Burst: 20}}
	for i := range 100_000 {
		if err := srv.Overrides().Set(ctx, overrides.Override{Policy: "full", Key: fmt.Sprintf("o-%d", i), Limits: own}); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	for _, policy := range []string{"none", "full"} {
		b.Run("policy="+policy, func(b *testing.B) {
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := srv.Check(ctx, 0, policy, keys[i&4095], 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
