package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server/httpapi"
)

// exampleServer stands in for `sluice serve --allow-client-time` with the fake of the tests.
func exampleServer() *httptest.Server {
	lim, _ := frozenLimiter() // its store runs no sweep, so it needs no Close
	return httptest.NewServer(&fake{lim: lim, release: make(chan struct{})})
}

// Three checks a second per key, as a token bucket of 3 ("api" on the server): a burst of 3
// passes, and the fourth is told when to retry.
func ExampleClient_Check() {
	srv := exampleServer()
	defer srv.Close()

	c, err := client.New(srv.URL, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	// A pinned instant makes the run reproducible; without it the server's clock decides.
	ctx := sluice.WithNow(context.Background(), t0)
	for range 4 {
		d, err := c.Check(ctx, "api", "user:42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter())
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 1s
}

// Errors match the library's, so one errors.Is serves the embedded Limiter and the service.
func ExampleClient_Check_errors() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.Options{})
	defer c.Close()

	_, err := c.Check(context.Background(), "no-such-policy", "k", 1)
	fmt.Println(errors.Is(err, sluice.ErrUnknownPolicy))

	_, err = c.Check(context.Background(), "api", "k", 0)
	var ie *sluice.InvalidError
	fmt.Println(errors.Is(err, sluice.ErrInvalid), errors.As(err, &ie) && ie.Field == "cost")
	// Output:
	// true
	// true true
}

// The login rule over the service: a request the account limit denies spends nothing of
// the address's budget.
func ExampleClient_CheckAll() {
	srv := exampleServer()
	defer srv.Close()
	c, _ := client.New(srv.URL, client.Options{})
	defer c.Close()
	ctx := sluice.WithNow(context.Background(), t0)

	_, _ = c.Check(ctx, "login-account", "asha", 5) // asha has used her 5 attempts
	d, err := c.CheckAll(ctx,
		sluice.Item{Policy: "login-ip", Key: "1.2.3.4", Cost: 1},
		sluice.Item{Policy: "login-account", Key: "asha", Cost: 1},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Allowed, d.DeniedBy, len(d.Parts))
	p, _ := c.Peek(ctx, "login-ip", "1.2.3.4")
	fmt.Println("left for 1.2.3.4:", p.Remaining)
	// Output:
	// false 1 2
	// left for 1.2.3.4: 50
}

// With FailOpen, an unreachable service admits (and OnFailure hears of it); without, the check
// fails with an error matching sluice.ErrUnavailable.
func ExampleOptions_failOpen() {
	srv := exampleServer()
	srv.Close() // nobody listens any more

	open, _ := client.New(srv.URL, client.Options{
		FailOpen:  true,
		OnFailure: func(err error) { fmt.Println("unavailable:", errors.Is(err, sluice.ErrUnavailable)) },
	})
	d, err := open.Check(context.Background(), "api", "k", 1)
	fmt.Println(d.Allowed, err)

	closed, _ := client.New(srv.URL, client.Options{})
	_, err = closed.Check(context.Background(), "api", "k", 1)
	fmt.Println(errors.Is(err, sluice.ErrUnavailable))
	// Output:
	// unavailable: true
	// true <nil>
	// true
}

// Move a customer to the pro plan for a week (the server needs an admin token when it has
// tokens): its checks then say so, and other keys keep the default plan.
func ExampleClient_SetOverride() {
	url, stop, err := plansServer(httpapi.Options{}) // tiers: plans free (the default) and pro
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, _ := client.New(url, client.Options{})
	defer c.Close()
	ctx := context.Background()

	o, err := c.SetOverride(ctx, overrides.Override{Policy: "tiers", Key: "acme", Plan: "pro", Reason: "trial"}, 7*24*time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The server sets ExpiresAt from the ttl and UpdatedAt a moment later, as it stores the override.
	fmt.Println(o.Plan, o.Reason, (time.Duration(o.ExpiresAt-o.UpdatedAt) * time.Millisecond).Round(time.Hour))
	for _, key := range []string{"acme", "bob"} {
		d, _ := c.Check(ctx, "tiers", key, 1)
		fmt.Println(key, d.Plan, d.Override, d.Limit)
	}
	_, err = c.SetOverride(ctx, overrides.Override{Policy: "tiers", Key: "acme", Plan: "gold"}, 0)
	fmt.Println(errors.Is(err, sluice.ErrInvalid))
	// Output:
	// pro trial 168h0m0s
	// acme pro true 50
	// bob free false 5
	// true
}
