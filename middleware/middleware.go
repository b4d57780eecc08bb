// Package middleware rate-limits net/http handlers with sluice: the embedded *sluice.Limiter or a
// *client.Client of a sluice server, whichever Options.Checker holds.
//
// Every response carries the RateLimit and RateLimit-Policy header fields of
// draft-ietf-httpapi-ratelimit-headers, as package header formats them; a denied request is
// answered 429 Too Many Requests with Retry-After and an RFC 9457 application/problem+json body,
// and never reaches the handler.
//
// A decision with FailOpen set (a sluice server's fail mode allowed it because its store could not
// answer, or a client.Client's own FailOpen did) consulted no limit: the request goes through with
// the header Sluice-Fail-Mode: open and no RateLimit fields. A check that fails with
// sluice.ErrUnavailable is answered 503 by DefaultOnError, with Sluice-Fail-Mode: closed.
//
// The gRPC interceptor is in package grpcmw, so that net/http users do not import gRPC.
package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
)

// Checker decides one check. *sluice.Limiter and *client.Client satisfy it.
type Checker interface {
	Check(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error)
}

// PolicySource is what a Checker may also offer, as *sluice.Limiter does, to let the middleware
// describe every limit of the policy in the header fields, each with its own window.
type PolicySource interface {
	Policy(name string) (*sluice.Policy, bool)
}

// FailModeHeader names the response header that says a request was let through (open) or turned
// away (closed) without a limit consulted, because the limiter could not answer.
const FailModeHeader = "Sluice-Fail-Mode"

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
	// Window is the w parameter of RateLimit-Policy. 0 means: when the Checker is a PolicySource
	// that knows the policy, the fields header.Set gives (one item per limit, each with its own
	// window, see header.Window); else one item named Policy, with the decision's figures and no w
	// parameter. A Window above 0 always gives that one item, with w = Window.
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
		if d.FailOpen && d.Allowed {
			// No limit was consulted: there is nothing to report of one, least of all r=0.
			w.Header().Set(FailModeHeader, "open")
			next.ServeHTTP(w, r)
			return
		}
		now := time.Now()
		if ms := sluice.NowFrom(r.Context()); ms != 0 {
			now = time.UnixMilli(ms)
		}
		if p, ok := policyOf(src, opts); ok {
			header.Set(w.Header(), p, d, now)
		} else {
			SetHeaders(w.Header(), opts.Policy, opts.Window, d, now)
		}
		if !d.Allowed {
			writeDenied(w, opts.Policy, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// policyOf is the policy whose shape the header fields describe, when src knows it and no Window
// overrides it.
func policyOf(src PolicySource, opts Options) (*sluice.Policy, bool) {
	if src == nil || opts.Window != 0 {
		return nil, false
	}
	return src.Policy(opts.Policy)
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
		Detail:       fmt.Sprintf("rate limit %q exceeded; retry in %s s", policy, header.RetryAfter(d)),
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
// lacks what identifies it), 503 with Retry-After 1 and Sluice-Fail-Mode: closed when the limiter
// is unavailable (the check may pass soon), and 500 for anything else, bad input and unknown policy included (the server's
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
		w.Header().Set(FailModeHeader, "closed")
	default:
		p.Status, p.Detail = http.StatusInternalServerError, "the rate limit could not be checked"
	}
	p.Title = http.StatusText(p.Status)
	writeProblem(w, p)
}

// SetHeaders sets the header fields of draft-ietf-httpapi-ratelimit-headers for decision d of the
// named policy, taken at now, as one item named policy (see header.Item and header.SetItems):
//
//	RateLimit-Policy: "<policy>";q=<limit>;w=<window in seconds, rounded to the nearest, at least 1>
//	RateLimit: "<policy>";r=<remaining>;t=<seconds until resetAt, rounded up>
//
// w is left out when window is 0 or less. A denied decision also gets Retry-After: its retry in
// seconds, rounded up, at least 1. A decision that knows no limit (Limit 0, such as a client's
// fail-open answer) sets nothing. When the *sluice.Policy is at hand, header.Set describes every
// limit of it.
func SetHeaders(h http.Header, policy string, window time.Duration, d sluice.Decision, now time.Time) {
	if d.Limit <= 0 {
		return
	}
	header.SetItems(h, d, header.Item{
		Name:      policy,
		Quota:     d.Limit,
		Window:    window,
		Remaining: d.Remaining,
		Reset:     time.Duration(d.ResetAt-now.UnixMilli()) * time.Millisecond,
	})
}

// WindowOf is the window (see header.Window) of the limit of p that bound decision d: for a
// composite policy, the part that denied, or else the one with the least remaining.
//
// Deprecated: header.Set describes every limit of a policy, each with its header.Window.
func WindowOf(p *sluice.Policy, d sluice.Decision) time.Duration {
	limits := p.Limits()
	i := 0
	if len(d.Parts) == len(limits) && len(limits) > 1 {
		i = bindingPart(d)
	}
	if i < 0 || i >= len(limits) {
		return 0
	}
	return header.Window(limits[i])
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
