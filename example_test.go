package sluice_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// exampleNow is the instant the examples decide at: 2023-11-14T22:13:20Z in epoch ms.
const exampleNow int64 = 1_700_000_000_000

// A hundred requests a minute per user, in bursts of up to 20: the 21st request at one instant is
// denied and told when to come back.
func Example() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, err := sluice.New(store, sluice.MustPolicy("api", sluice.Limit{
		Strategy: sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20},
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := sluice.WithNow(context.Background(), exampleNow)
	for i := 1; i <= 21; i++ {
		d, err := lim.Check(ctx, "api", "user:42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if !d.Allowed {
			fmt.Printf("request %d denied, retry after %v\n", i, d.RetryAfter())
		} else if i == 20 {
			fmt.Printf("request %d allowed, %d left\n", i, d.Remaining)
		}
	}
	// Output:
	// request 20 allowed, 0 left
	// request 21 denied, retry after 600ms
}

// A per-model policy: at most 500 requests a minute, each counted as 1, and 30000 tokens a minute
// with a burst of two minutes' worth.
func ExampleNewPolicy() {
	p, err := sluice.NewPolicy("model:gpt-4o",
		sluice.Limit{
			Name:     "requests",
			Strategy: sluice.SlidingWindow{Limit: 500, WindowMs: 60_000, Buckets: 60},
			Unit:     sluice.UnitRequest,
		},
		sluice.Limit{
			Name:     "tokens",
			Strategy: sluice.TokenBucket{Capacity: 2 * 30_000, RefillPerSec: 30_000 / 60},
		},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range p.Limits() {
		fmt.Printf("%s: %s counting %s, ceiling %v\n", l.Name, l.Strategy.Kind(), l.Unit, l.Strategy.Ceiling())
	}
	fmt.Println("max cost:", p.MaxCost())

	_, err = sluice.NewPolicy("model:gpt-4o", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 0}})
	var ie *sluice.InvalidError
	fmt.Println(errors.Is(err, sluice.ErrInvalid), errors.As(err, &ie) && ie.Field == "limits[0].refillPerSec")
	// Output:
	// requests: slidingWindow counting request, ceiling 500
	// tokens: tokenBucket counting cost, ceiling 60000
	// max cost: 60000
	// true true
}

// Three requests a second per key, as a token bucket: a burst of 3 passes, the fourth is told
// when to retry.
func ExampleLimiter_Check() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, err := sluice.New(store, sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 3, RefillPerSec: 3}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := sluice.WithNow(context.Background(), exampleNow)
	for i := 0; i < 4; i++ {
		d, err := lim.Check(ctx, "api", "user:42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d retryAfter=%v\n", d.Allowed, d.Remaining, d.RetryAfter())
	}
	d, _ := lim.Check(sluice.WithNow(context.Background(), exampleNow+334), "api", "user:42", 1)
	fmt.Printf("334ms later: allowed=%v\n", d.Allowed)

	_, err = lim.Check(ctx, "nope", "user:42", 1)
	fmt.Println(errors.Is(err, sluice.ErrUnknownPolicy))
	// Output:
	// allowed=true remaining=2 retryAfter=0s
	// allowed=true remaining=1 retryAfter=0s
	// allowed=true remaining=0 retryAfter=0s
	// allowed=false remaining=0 retryAfter=334ms
	// 334ms later: allowed=true
	// true
}

// CheckVerdict is Check for a hot path that needs only allowed, remaining, resetAt and retryAfter:
// a smaller answer, returned in registers.
func ExampleLimiter_CheckVerdict() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, err := sluice.New(store, sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, WindowMs: 1000}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := sluice.WithNow(context.Background(), exampleNow)
	for i := 0; i < 3; i++ {
		v, err := lim.CheckVerdict(ctx, "api", "user:42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d resetAt=+%dms retryAfterMs=%d\n", v.Allowed, v.Remaining, v.ResetAt-exampleNow, v.RetryAfterMs)
	}
	// Output:
	// allowed=true remaining=1 resetAt=+1000ms retryAfterMs=0
	// allowed=true remaining=0 resetAt=+1000ms retryAfterMs=0
	// allowed=false remaining=0 resetAt=+1000ms retryAfterMs=1000
}

// Login throttling with two rules, 50 attempts per IP and 5 per account over 15 minutes, checked
// together: an attempt the account rule denies spends nothing of the IP's budget.
func ExampleLimiter_CheckAll() {
	store := memory.New(memory.Config{})
	defer store.Close()
	window := sluice.SlidingWindowLog{WindowMs: 15 * 60_000}
	ipRule, accountRule := window, window
	ipRule.Limit, accountRule.Limit = 50, 5
	lim, _ := sluice.New(store,
		sluice.MustPolicy("login-ip", sluice.Limit{Strategy: ipRule}),
		sluice.MustPolicy("login-account", sluice.Limit{Strategy: accountRule}),
	)
	ctx := sluice.WithNow(context.Background(), exampleNow)
	login := func(ip, account string) (sluice.Decision, error) {
		return lim.CheckAll(ctx,
			sluice.Item{Policy: "login-ip", Key: ip, Cost: 1},
			sluice.Item{Policy: "login-account", Key: account, Cost: 1},
		)
	}
	for i := 0; i < 5; i++ {
		login("10.0.0.1", "asha")
	}
	d, err := login("1.2.3.4", "asha")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("allowed=%v deniedBy=%d retryAfter=%v\n", d.Allowed, d.DeniedBy, d.RetryAfter())
	ip, _ := lim.Peek(ctx, "login-ip", "1.2.3.4")
	fmt.Println("1.2.3.4 remaining:", ip.Remaining)
	// Output:
	// allowed=false deniedBy=1 retryAfter=15m0s
	// 1.2.3.4 remaining: 50
}

// Peek reports a key without consuming: whether a check of cost 1 would pass, and what is left.
func ExampleLimiter_Peek() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, _ := sluice.New(store, sluice.MustPolicy("hourly", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 3_600_000}}))
	ctx := sluice.WithNow(context.Background(), exampleNow)

	lim.Check(ctx, "hourly", "k", 9)
	for i := 0; i < 2; i++ {
		d, _ := lim.Peek(ctx, "hourly", "k")
		fmt.Printf("peek: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	}
	lim.Check(ctx, "hourly", "k", 1)
	d, _ := lim.Peek(ctx, "hourly", "k")
	fmt.Printf("peek: allowed=%v remaining=%d reset=%s\n", d.Allowed, d.Remaining, d.Reset().UTC().Format("15:04"))
	// Output:
	// peek: allowed=true remaining=1
	// peek: allowed=true remaining=1
	// peek: allowed=false remaining=0 reset=23:00
}

// Forecast tells a batch job how much it can send now and when capacity returns.
func ExampleLimiter_Forecast() {
	store := memory.New(memory.Config{})
	defer store.Close()
	// 100 tokens, refilled at 250 a second (one every 4 ms).
	lim, _ := sluice.New(store, sluice.MustPolicy("batch", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 250}}))
	ctx := sluice.WithNow(context.Background(), exampleNow)

	lim.Check(ctx, "batch", "job", 70)
	f, _ := lim.Forecast(ctx, "batch", "job", 8)
	fmt.Printf("batches of 8 now: %d\n", f.SpendableNow)
	fmt.Printf("next token in %d ms, full in %d ms\n", f.NextReplenishAt-exampleNow, f.FullAt-exampleNow)
	// Output:
	// batches of 8 now: 3
	// next token in 4 ms, full in 280 ms
}

// Reserve then settle: check an LLM call's estimated tokens up front, then refund what the call
// did not use.
func ExampleLimiter_Refund() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, _ := sluice.New(store, sluice.MustPolicy("tpm", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}}))
	ctx := sluice.WithNow(context.Background(), exampleNow)

	const estimate, used = 300, 120
	d, _ := lim.Check(ctx, "tpm", "tenant-a", estimate)
	fmt.Println("reserved, remaining:", d.Remaining)
	lim.Refund(ctx, "tpm", "tenant-a", estimate-used)
	p, _ := lim.Peek(ctx, "tpm", "tenant-a")
	fmt.Println("settled, remaining:", p.Remaining)
	// Output:
	// reserved, remaining: 700
	// settled, remaining: 880
}

// Settle ends a reservation with the real count: an answer longer than its estimate leaves the
// tenant in debt, and its next call waits until the tokens have refilled.
func ExampleLimiter_Settle() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, _ := sluice.New(store, sluice.MustPolicy("tpm", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 1000, RefillPerSec: 1000.0 / 60}}))
	ctx := sluice.WithNow(context.Background(), exampleNow)

	lim.Check(ctx, "tpm", "tenant-a", 300)         // reserve the estimate
	lim.Settle(ctx, "tpm", "tenant-a", 300, 1_200) // the answer took 1200 tokens
	d, _ := lim.Check(ctx, "tpm", "tenant-a", 100)
	fmt.Printf("allowed=%v retryAfter=%v\n", d.Allowed, d.RetryAfter())
	// Output:
	// allowed=false retryAfter=18s
}

// Combine folds the decisions of parts checked together: the longest wait binds.
func ExampleCombine() {
	d := sluice.Combine([]sluice.Decision{
		{Allowed: true, Limit: 500, Remaining: 499, DeniedBy: -1},
		{Allowed: false, Limit: 1000, Remaining: 40, RetryAfterMs: 3600},
		{Allowed: false, Limit: 50, Remaining: 0, RetryAfterMs: 1200},
	})
	fmt.Printf("allowed=%v deniedBy=%d limit=%d remaining=%d retryAfter=%v parts=%d\n",
		d.Allowed, d.DeniedBy, d.Limit, d.Remaining, d.RetryAfter(), len(d.Parts))
	// Output:
	// allowed=false deniedBy=1 limit=1000 remaining=40 retryAfter=3.6s parts=3
}

// WithNow pins the instant of a decision, for replays and tests.
func ExampleWithNow() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, _ := sluice.New(store, sluice.MustPolicy("per-second", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}}))
	for _, ms := range []int64{exampleNow, exampleNow + 500, exampleNow + 1000} {
		d, _ := lim.Check(sluice.WithNow(context.Background(), ms), "per-second", "k", 1)
		fmt.Printf("+%dms allowed=%v retryAfterMs=%d\n", ms-exampleNow, d.Allowed, d.RetryAfterMs)
	}
	// Output:
	// +0ms allowed=true retryAfterMs=0
	// +500ms allowed=false retryAfterMs=500
	// +1000ms allowed=true retryAfterMs=0
}

func ExampleVerdict_Decision() {
	v := sluice.Verdict{Remaining: 0, ResetAt: 1_700_000_060_000, RetryAfterMs: 250}
	d := v.Decision(5)
	fmt.Println(d.Allowed, d.Limit, d.DeniedBy, d.RetryAfter())
	// Output: false 5 0 250ms
}
