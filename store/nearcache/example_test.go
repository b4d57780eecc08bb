package nearcache_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/nearcache"
)

func ExampleNew() {
	// In production the inner store is a shared one, such as Redis; the memory store stands in here.
	shared := memory.New(memory.Config{})
	defer shared.Close()
	near := nearcache.New(shared, nearcache.Config{
		Policies: func(name string) bool { return name == "login" }, // only this policy is cached
		OnLocal:  func(policy string) { /* count it, e.g. in a Prometheus counter */ },
	})
	lim, err := sluice.New(near, sluice.MustPolicy("login",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 60_000}}))
	if err != nil {
		panic(err)
	}

	// Fixed instants make the example reproducible; a server passes none (now = 0). The entry ends
	// 1 ms before the store's retry, for its rounding.
	start := int64(1_700_000_040_000) // the start of a minute
	for _, at := range []int64{0, 1_000, 2_000, 3_000, 59_998, 59_999, 60_000} {
		ctx := sluice.WithNow(context.Background(), start+at)
		before := near.Answered()
		d, _ := lim.Check(ctx, "login", "10.0.0.7", 1)
		by := "the store"
		if near.Answered() > before {
			by = "the near cache"
		}
		fmt.Printf("+%dms: allowed %v, retry %dms, by %s\n", at, d.Allowed, d.RetryAfterMs, by)
	}
	// Output:
	// +0ms: allowed true, retry 0ms, by the store
	// +1000ms: allowed true, retry 0ms, by the store
	// +2000ms: allowed false, retry 58000ms, by the store
	// +3000ms: allowed false, retry 57000ms, by the near cache
	// +59998ms: allowed false, retry 2ms, by the near cache
	// +59999ms: allowed false, retry 1ms, by the store
	// +60000ms: allowed true, retry 0ms, by the store
}
