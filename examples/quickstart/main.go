// Quickstart runs sluice embedded, on the default in-memory store: an API limit with a burst, a
// per-model LLM policy that counts requests and tokens together, and a login check guarded by two
// rules at once. Run it with: go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

func main() {
	store := memory.New(memory.Config{})
	defer store.Close()

	lim, err := sluice.New(store,
		// 10 requests a second per API key, with bursts of up to 5.
		sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5}}),
		// Per model: 3 requests a minute and 1,000 tokens a minute, checked together.
		sluice.MustPolicy("gpt-4o",
			sluice.Limit{Name: "requests", Unit: sluice.UnitRequest,
				Strategy: sluice.SlidingWindow{Limit: 3, WindowMs: 60_000, Buckets: 60}},
			sluice.Limit{Name: "tokens",
				Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}},
		),
		// Logins: 50 per IP and 5 per account every 15 minutes.
		sluice.MustPolicy("login-ip", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 50, WindowMs: 900_000}}),
		sluice.MustPolicy("login-account", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, WindowMs: 900_000}}),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	fmt.Println("== api: a burst of 7 requests from one key")
	for i := 1; i <= 7; i++ {
		d, err := lim.Check(ctx, "api", "key-42", 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d: allowed=%-5v remaining=%d retryAfter=%v\n", i, d.Allowed, d.Remaining, d.RetryAfter())
	}

	fmt.Println("\n== gpt-4o: reserve an estimate of tokens, then settle with what the call used")
	for _, estimate := range []int64{400, 400, 400} {
		d, err := lim.Check(ctx, "gpt-4o", "team-a", estimate)
		if err != nil {
			log.Fatal(err)
		}
		if !d.Allowed {
			fmt.Printf("reserve %d tokens: denied by %q, retry after %v\n", estimate, limitName(lim, "gpt-4o", d), d.RetryAfter())
			continue
		}
		used := estimate / 4
		if err := lim.Refund(ctx, "gpt-4o", "team-a", estimate-used); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("reserve %d tokens: allowed, used %d, refunded %d\n", estimate, used, estimate-used)
	}
	d, err := lim.Check(ctx, "gpt-4o", "team-a", 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a fourth request: allowed=%v, denied by %q\n", d.Allowed, limitName(lim, "gpt-4o", d))

	fmt.Println("\n== login: per-IP and per-account rules checked together")
	for i := 1; i <= 7; i++ {
		d, err := lim.CheckAll(ctx,
			sluice.Item{Policy: "login-ip", Key: "203.0.113.9", Cost: 1},
			sluice.Item{Policy: "login-account", Key: "asha", Cost: 1},
		)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: allowed=%v\n", i, d.Allowed)
	}
	ip, err := lim.Peek(ctx, "login-ip", "203.0.113.9")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the IP has %d of 50 attempts left: denied attempts spent none of them\n", ip.Remaining)

	for _, name := range []string{"api", "gpt-4o", "login-ip"} {
		st, _ := lim.Stats(name)
		fmt.Printf("stats %-9s allowed=%d denied=%d\n", name, st.Allowed, st.Denied)
	}
}

// limitName names the limit of policy that denied d.
func limitName(lim *sluice.Limiter, policy string, d sluice.Decision) string {
	p, _ := lim.Policy(policy)
	return p.Limits()[d.DeniedBy].Name
}
