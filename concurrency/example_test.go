package concurrency_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/store/memory"
)

// Two exports at a time per tenant: a third waits until one is released or its lease runs out.
func ExampleLimiter_Admit() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim := concurrency.New(store)
	ctx := sluice.WithNow(context.Background(), 1_700_000_000_000)

	for _, job := range []string{"job-1", "job-2", "job-3"} {
		a, err := lim.Admit(ctx, "exports", "tenant-7", job, 2, 30_000)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: allowed %v, %d in flight, retry in %v\n", job, a.Allowed, a.InFlight, a.RetryAfter())
	}
	if err := lim.Release(ctx, "exports", "tenant-7", "job-1"); err != nil {
		fmt.Println(err)
		return
	}
	a, _ := lim.Admit(ctx, "exports", "tenant-7", "job-3", 2, 30_000)
	fmt.Printf("job-3 after job-1 ended: allowed %v\n", a.Allowed)
	// Output:
	// job-1: allowed true, 1 in flight, retry in 0s
	// job-2: allowed true, 2 in flight, retry in 0s
	// job-3: allowed false, 2 in flight, retry in 30s
	// job-3 after job-1 ended: allowed true
}
