package memory_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

func ExampleNew() {
	store := memory.New(memory.Config{}) // the process clock, a sweep every 10 s, no key cap
	defer store.Close()

	lim, err := sluice.New(store, sluice.MustPolicy("api",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 60_000}}))
	if err != nil {
		panic(err)
	}
	for range 3 {
		d, _ := lim.Check(context.Background(), "api", "client-1", 1)
		fmt.Println(d.Allowed, d.Remaining)
	}
	fmt.Println("keys held:", store.Len())
	// Output:
	// true 1
	// true 0
	// false 0
	// keys held: 1
}

// A fixed clock makes decisions reproducible in tests.
func ExampleConfig_now() {
	now := int64(1_700_000_000_000)
	store := memory.New(memory.Config{Now: func() int64 { return now }, SweepInterval: -1})
	defer store.Close()
	lim, _ := sluice.New(store, sluice.MustPolicy("api",
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1, RefillPerSec: 2}}))

	d, _ := lim.Check(context.Background(), "api", "k", 1)
	fmt.Println(d.Allowed)
	d, _ = lim.Check(context.Background(), "api", "k", 1)
	fmt.Println(d.Allowed, d.RetryAfterMs)
	now += 500
	d, _ = lim.Check(context.Background(), "api", "k", 1)
	fmt.Println(d.Allowed)
	// Output:
	// true
	// false 500
	// true
}
