package overrides_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/store/memory"
)

// A policy of 2 requests at once per key, a plan "pro" of 10, and two overrides: acme moved to
// pro, and a scraper capped to 1 for an hour. A check asks the Table first; a key without an
// override gets the policy.
func Example() {
	api := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 2, PeriodMs: 1000, Burst: 2}})
	pro := sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 10}})
	plans := overrides.Plans{"api": {"": api, "pro": pro}}

	const now int64 = 1_700_000_000_000
	table, err := overrides.New(overrides.Config{Resolve: plans.Resolve, Now: func() int64 { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer table.Close()
	ctx := context.Background()
	if err := table.Set(ctx, overrides.Override{Policy: "api", Key: "acme", Plan: "pro", Reason: "moved to pro"}); err != nil {
		fmt.Println(err)
		return
	}
	hour, err := overrides.ExpiresIn(now, 3_600_000)
	if err != nil {
		fmt.Println(err)
		return
	}
	scraper := overrides.Override{Policy: "api", Key: "scraper", ExpiresAt: hour, Reason: "ticket 4711",
		Limits: []overrides.Limit{{Strategy: "gcra", Limit: 1, PeriodMs: 1000, Burst: 1}}}
	if err := table.Set(ctx, scraper); err != nil {
		fmt.Println(err)
		return
	}
	// Bad input names its field.
	fmt.Println(table.Set(ctx, overrides.Override{Policy: "api", Key: "bob", Plan: "gold"}))

	store := memory.New(memory.Config{})
	defer store.Close()
	lim, err := sluice.New(store, api)
	if err != nil {
		fmt.Println(err)
		return
	}
	check := func(key string) bool {
		if p, _ := table.Policy("api", key, now); p != nil {
			d, err := store.Check(ctx, now, p, key, 1)
			return err == nil && d.Allowed
		}
		d, err := lim.Check(sluice.WithNow(ctx, now), "api", key, 1)
		return err == nil && d.Allowed
	}
	for _, key := range []string{"bob", "acme", "scraper"} {
		allowed := 0
		for range 5 {
			if check(key) {
				allowed++
			}
		}
		fmt.Printf("%s: %d of 5 allowed\n", key, allowed)
	}
	// Output:
	// sluice: invalid plan: policy "api" has no plan "gold"
	// bob: 2 of 5 allowed
	// acme: 5 of 5 allowed
	// scraper: 1 of 5 allowed
}
