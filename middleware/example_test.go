package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/store/memory"
)

// Two requests a second per client address, with the embedded limiter: the third request in the
// same instant is answered 429, and every response says where the client stands.
func ExampleLimit() {
	store := memory.New(memory.Config{})
	defer store.Close()
	lim, err := sluice.New(store, sluice.MustPolicy("api", sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 2, RefillPerSec: 2}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := middleware.Limit(hello, middleware.Options{Checker: lim, Policy: "api"})

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		// Pinning the instant makes the example reproducible; a server leaves it to the clock.
		r = r.WithContext(sluice.WithNow(r.Context(), t0))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "api";r=1;t=1 []
	// 200 "api";r=0;t=1 []
	// 429 "api";r=0;t=1 [1]
}

// Behind a load balancer at 10.0.0.0/8, the client is the right-most address it did not write.
func ExampleKeyByIP() {
	key := middleware.KeyByIP(netip.MustParsePrefix("10.0.0.0/8"))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.5:43122"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 198.51.100.7") // the client may have sent the first
	k, _ := key(r)
	fmt.Println(k)

	r.RemoteAddr = "198.51.100.7:5000" // not a proxy of ours: its headers are ignored
	k, _ = key(r)
	fmt.Println(k)
	// Output:
	// 198.51.100.7
	// 198.51.100.7
}

// SetHeaders formats a decision for any handler that checks on its own and knows only the
// policy's name; with the *sluice.Policy at hand, header.Set describes every limit of it.
func ExampleSetHeaders() {
	d := sluice.Decision{Allowed: false, Limit: 100, Remaining: 0, ResetAt: t0 + 59_500, RetryAfterMs: 600, DeniedBy: 0}
	h := http.Header{}
	middleware.SetHeaders(h, "partner-api", time.Minute, d, time.UnixMilli(t0))
	fmt.Println(h.Get("RateLimit-Policy"))
	fmt.Println(h.Get("RateLimit"))
	fmt.Println(h.Get("Retry-After"))
	// Output:
	// "partner-api";q=100;w=60
	// "partner-api";r=0;t=60
	// 1
}

// A Checker that is not the Limiter, here one that knows a single verdict, works the same.
func ExampleChecker() {
	var deny checkerFunc = func(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error) {
		return sluice.Decision{Limit: 10, ResetAt: t0 + 30_000, RetryAfterMs: 2500}, nil
	}
	h := middleware.Limit(http.NotFoundHandler(), middleware.Options{Checker: deny, Policy: "uploads", Key: middleware.KeyByHeader("X-Api-Key")})
	r := httptest.NewRequest(http.MethodPut, "/files/1", nil)
	r.Header.Set("X-Api-Key", "k-123")
	r = r.WithContext(sluice.WithNow(r.Context(), t0))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("Retry-After"))
	fmt.Print(w.Body)
	// Output:
	// 429 application/problem+json 3
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit \"uploads\" exceeded; retry in 3 s","retryAfterMs":2500}
}

type checkerFunc func(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error)

func (f checkerFunc) Check(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error) {
	return f(ctx, policy, key, cost)
}
