package header_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
)

// Set formats a decision for any handler that checks on its own: here a denial of a token bucket
// of 100 that refills in a minute.
func ExampleSet() {
	p := sluice.MustPolicy("partner-api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 100, RefillPerSec: 100.0 / 60}})
	d := sluice.Decision{Allowed: false, Limit: 100, Remaining: 0, ResetAt: t0 + 59_500, RetryAfterMs: 600, DeniedBy: 0}
	h := http.Header{}
	header.Set(h, p, d, time.UnixMilli(t0))
	fmt.Println(h.Get("RateLimit-Policy"))
	fmt.Println(h.Get("RateLimit"))
	fmt.Println(h.Get("Retry-After"))
	// Output:
	// "partner-api";q=100;w=60
	// "partner-api";r=0;t=60
	// 1
}
