// Package middleware rate-limits net/http handlers with sluice: the embedded *sluice.Limiter or a
// *client.Client of a sluice server, whichever Options.Checker holds.
//
// Every response carries the RateLimit and RateLimit-Policy header fields of
// draft-ietf-httpapi-ratelimit-headers; a denied request is answered 429 Too Many Requests with
// Retry-After and an RFC 9457 application/problem+json body, and never reaches the handler.
//
// The gRPC interceptor is in package grpcmw, so that net/http users do not import gRPC.
package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Checker decides one check. *sluice.Limiter and *client.Client satisfy it.
type Checker interface {
	Check(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error)
}

// PolicySource is what a Checker may also offer, as *sluice.Limiter does, to let the middleware
// derive the window of the RateLimit-Policy field from the policy's parameters.
type PolicySource interface {
	Policy(name string) (*sluice.Policy, bool)
}

// ErrNoKey means a request carries nothing to key it by: no usable client address, or no value in
// the header KeyByHeader reads. The default OnError answers it 400.
var ErrNoKey = errors.New("middleware: no key for the request")

// Options configure Limit.
type Options struct {
	// Checker decides; required.
	Checker Checker
	// Policy is the name of the policy every request is checked under; required.
	Policy string
	// Key names the budget a request spends from. Nil means KeyByIP() (the direct peer's address).
	Key func(*http.Request) (string, error)
	// Cost is what a request costs. Nil means 1.
	Cost func(*http.Request) int64
	// Window is the w parameter of RateLimit-Policy. 0 means the window of the binding limit when
	// the Checker is a PolicySource (gcra: periodMs/limit×burst; tokenBucket: capacity/refillPerSec;
	// the window strategies: windowMs), else no w parameter.
	Window time.Duration
	// OnError answers a request whose check failed (or whose key could not be found). Nil means
	// DefaultOnError.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// Limit returns a handler that checks every request under opts.Policy before next sees it. It
// panics if opts.Checker or opts.Policy is missing, as http.Handle does on a nil handler: that is a
// programming error, not a request's.
//
// The instant of the check is sluice.NowFrom(r.Context()) when a caller pinned one, else the
// clock; the header fields are computed for the same instant.
func Limit(next http.Handler, opts Options) http.Handler {
	if opts.Checker == nil || opts.Policy == "" {
		panic("middleware: Limit needs a Checker and a Policy")
	}
	if opts.Key == nil {
		opts.Key = KeyByIP()
	}
	if opts.OnError == nil {
		opts.OnError = DefaultOnError
	}
	src, _ := opts.Checker.(PolicySource)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := opts.Key(r)
		if err != nil {
			opts.OnError(w, r, err)
			return
		}
		cost := int64(1)
		if opts.Cost != nil {
			cost = opts.Cost(r)
		}
		d, err := opts.Checker.Check(r.Context(), opts.Policy, key, cost)
		if err != nil {
			opts.OnError(w, r, err)
			return
		}
		now := time.Now()
		if ms := sluice.NowFrom(r.Context()); ms != 0 {
			now = time.UnixMilli(ms)
		}
		window := opts.Window
		if window == 0 && src != nil {
			if p, ok := src.Policy(opts.Policy); ok {
				window = WindowOf(p, d)
			}
		}
		SetHeaders(w.Header(), opts.Policy, window, d, now)
		if !d.Allowed {
			writeDenied(w, opts.Policy, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Problem is the RFC 9457 body of a 429.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// RetryAfterMs is the decision's, in milliseconds: finer than the Retry-After field.
	RetryAfterMs int64 `json:"retryAfterMs"`
}

func writeDenied(w http.ResponseWriter, policy string, d sluice.Decision) {
	writeProblem(w, Problem{
		Type:         "about:blank", // the status says it all; retryAfterMs adds precision
		Title:        http.StatusText(http.StatusTooManyRequests),
		Status:       http.StatusTooManyRequests,
		Detail:       fmt.Sprintf("rate limit %q exceeded; retry in %d s", policy, retryAfterSeconds(d.RetryAfterMs)),
		RetryAfterMs: d.RetryAfterMs,
	})
}

func writeProblem(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// DefaultOnError answers a failed check with a problem+json body: 400 for ErrNoKey (the request
// lacks what identifies it), 503 with Retry-After 1 when the limiter is unavailable (the check may
// pass soon), and 500 for anything else, bad input and unknown policy included (the server's
// configuration is at fault, not the request). The body never carries err's text, which may
// describe the deployment.
func DefaultOnError(w http.ResponseWriter, r *http.Request, err error) {
	p := Problem{Type: "about:blank"}
	switch {
	case errors.Is(err, ErrNoKey):
		p.Status, p.Detail = http.StatusBadRequest, "the request carries nothing to rate-limit it by"
	case errors.Is(err, sluice.ErrUnavailable):
		p.Status, p.Detail = http.StatusServiceUnavailable, "the rate limiter is unavailable"
		w.Header().Set("Retry-After", "1")
	default:
		p.Status, p.Detail = http.StatusInternalServerError, "the rate limit could not be checked"
	}
	p.Title = http.StatusText(p.Status)
	writeProblem(w, p)
}

// SetHeaders sets the header fields of draft-ietf-httpapi-ratelimit-headers for decision d of the
// named policy, taken at now:
//
//	RateLimit-Policy: "<policy>";q=<limit>;w=<window in seconds, rounded to the nearest, at least 1>
//	RateLimit: "<policy>";r=<remaining>;t=<seconds until resetAt, rounded up>
//
// w is left out when window is 0 or less. A denied decision also gets Retry-After: its retry in
// seconds, rounded up, at least 1. A decision that knows no limit (Limit 0, such as a client's
// fail-open answer) sets nothing.
func SetHeaders(h http.Header, policy string, window time.Duration, d sluice.Decision, now time.Time) {
	if d.Limit <= 0 {
		return
	}
	name := sfString(policy)
	pol := name + ";q=" + strconv.FormatInt(d.Limit, 10)
	if window > 0 {
		// Rounded to the nearest second, at least 1, as the forward-auth gate of sluice serve does.
		pol += ";w=" + strconv.FormatInt(max(int64((window+time.Second/2)/time.Second), 1), 10)
	}
	h.Set("RateLimit-Policy", pol)
	reset := max(ceilDiv(d.ResetAt-now.UnixMilli(), 1000), 0)
	h.Set("RateLimit", name+";r="+strconv.FormatInt(max(d.Remaining, 0), 10)+";t="+strconv.FormatInt(reset, 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(d.RetryAfterMs), 10))
	}
}

func retryAfterSeconds(ms int64) int64 { return max(ceilDiv(ms, 1000), 1) }

// ceilDiv is ⌈a/b⌉ for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// sfString quotes s as a Structured Field String (RFC 9651): printable ASCII only, with '"' and
// '\' escaped. Policy names are safe already; anything else is replaced rather than sent raw.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// WindowOf is the window of the limit of p that bound decision d (for a composite policy, the part
// that denied, or else the one with the least remaining): the time one limit takes to replenish
// fully from empty. gcra: periodMs/limit×burst; tokenBucket: capacity/refillPerSec seconds; the
// window strategies: windowMs.
func WindowOf(p *sluice.Policy, d sluice.Decision) time.Duration {
	limits := p.Limits()
	i := 0
	if len(d.Parts) == len(limits) && len(limits) > 1 {
		i = bindingPart(d)
	}
	if i < 0 || i >= len(limits) {
		return 0
	}
	var ms float64
	switch s := limits[i].Strategy.(type) {
	case sluice.GCRA:
		ms = s.PeriodMs / s.Limit * s.Burst
	case sluice.TokenBucket:
		ms = s.Capacity / s.RefillPerSec * 1000
	case sluice.FixedWindow:
		ms = s.WindowMs
	case sluice.SlidingWindow:
		ms = s.WindowMs
	case sluice.SlidingWindowLog:
		ms = s.WindowMs
	}
	if !(ms > 0) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0
	}
	return time.Duration(math.Ceil(ms * float64(time.Millisecond)))
}

// bindingPart is the index of the part whose figures d reports, as sluice.Combine chose it.
func bindingPart(d sluice.Decision) int {
	if d.DeniedBy >= 0 {
		return d.DeniedBy
	}
	best := 0
	for i, p := range d.Parts {
		if p.Remaining < d.Parts[best].Remaining {
			best = i
		}
	}
	return best
}
