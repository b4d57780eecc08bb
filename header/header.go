// Package header formats the HTTP header fields of sluice's decisions, the RateLimit-Policy and
// RateLimit fields of draft-ietf-httpapi-ratelimit-headers and Retry-After, and finds the client
// address of a request behind trusted proxies. The HTTP API's forward-auth gate, the net/http
// middleware and the Envoy rate limit service share it, so that they all say the same.
//
// It imports the standard library and package sluice only.
package header

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Item is one limit in the fields:
//
//	RateLimit-Policy: "<Name>";q=<Quota>;w=<Window>
//	RateLimit: "<Name>";r=<Remaining>;t=<Reset>
type Item struct {
	// Name is sent as a structured-field string: '"' and '\' are escaped and any byte that is not
	// printable ASCII becomes '?'.
	Name string
	// Quota is q, the units the limit grants per Window.
	Quota int64
	// Window is w, in seconds rounded to the nearest and at least 1; 0 or less leaves w out.
	Window time.Duration
	// Remaining is r; below 0 is sent as 0.
	Remaining int64
	// Reset is t, the time until the limit is whole again, in seconds rounded up; below 0 is 0.
	Reset time.Duration
}

// Format gives the values of RateLimit-Policy and RateLimit for items, in their order, or "" for
// both when there are none.
func Format(items ...Item) (policy, ratelimit string) {
	var pol, cur strings.Builder
	for i, it := range items {
		if i > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		name := quote(it.Name)
		pol.WriteString(name)
		pol.WriteString(";q=")
		pol.WriteString(strconv.FormatInt(max(it.Quota, 0), 10))
		if it.Window > 0 {
			pol.WriteString(";w=")
			pol.WriteString(strconv.FormatInt(max(int64(it.Window.Round(time.Second)/time.Second), 1), 10))
		}
		cur.WriteString(name)
		cur.WriteString(";r=")
		cur.WriteString(strconv.FormatInt(max(it.Remaining, 0), 10))
		cur.WriteString(";t=")
		cur.WriteString(strconv.FormatInt(ceilSeconds(it.Reset), 10))
	}
	return pol.String(), cur.String()
}

// Fields gives the values of RateLimit-Policy and RateLimit for d, a decision of p taken at now.
//
// A single-limit policy is one item named after the policy:
//
//	RateLimit-Policy: "partner-api";q=100;w=60
//	RateLimit: "partner-api";r=0;t=60
//
// A composite policy lists one item per limit, named policy#name (policy#index for a limit without
// a printable ASCII name), in the policy's order, each with that limit's part of d (d.Parts).
//
// q is the limit's ceiling and w its Window: what it admits at once from full, and the time it
// takes to give that back, so that q per w is the rate it sustains. For GCRA, q is the burst (not
// the limit parameter) and w the time to refill it. r is the decision's remaining and t the time
// until its resetAt. A decision that carries no numbers, such as a fail-open answer given while the store
// was unavailable (Limit 0), or a composite's without its parts, gives no RateLimit value: nothing
// is known of what remains.
func Fields(p *sluice.Policy, d sluice.Decision, now time.Time) (policy, ratelimit string) {
	limits := p.Limits()
	items := make([]Item, len(limits))
	for i, l := range limits {
		part := d
		items[i] = Item{Name: p.Name(), Quota: int64(l.Strategy.Ceiling()), Window: Window(l)}
		if len(limits) > 1 {
			items[i].Name += "#" + label(l, i)
			if len(d.Parts) == len(limits) {
				part = d.Parts[i]
			}
		}
		items[i].Remaining = part.Remaining
		items[i].Reset = time.Duration(part.ResetAt-now.UnixMilli()) * time.Millisecond
	}
	policy, ratelimit = Format(items...)
	if d.Limit <= 0 || len(limits) > 1 && len(d.Parts) != len(limits) {
		ratelimit = ""
	}
	return policy, ratelimit
}

// Set sets RateLimit-Policy and RateLimit to the Fields of d, deleting a RateLimit that Fields
// leaves empty, and Retry-After when d is a denial (deleting it otherwise).
func Set(h http.Header, p *sluice.Policy, d sluice.Decision, now time.Time) {
	policy, ratelimit := Fields(p, d, now)
	set(h, policy, ratelimit, d)
}

// SetItems is Set for fields formatted from items, when the policy's shape is not known.
func SetItems(h http.Header, d sluice.Decision, items ...Item) {
	policy, ratelimit := Format(items...)
	set(h, policy, ratelimit, d)
}

func set(h http.Header, policy, ratelimit string, d sluice.Decision) {
	for _, f := range []struct{ name, value string }{
		{"RateLimit-Policy", policy}, {"RateLimit", ratelimit}, {"Retry-After", RetryAfter(d)},
	} {
		if f.value == "" || f.name == "Retry-After" && d.Allowed {
			h.Del(f.name)
		} else {
			h.Set(f.name, f.value)
		}
	}
}

// RetryAfter is the Retry-After value of a denial d: its RetryAfterMs in seconds, rounded up and
// at least 1, since a denied check never passes at once.
func RetryAfter(d sluice.Decision) string {
	return strconv.FormatInt(max(ceilSeconds(time.Duration(max(d.RetryAfterMs, 0))*time.Millisecond), 1), 10)
}

// Window is the time in which l gives back its whole ceiling: windowMs for the window strategies,
// capacity/refillPerSec for a token bucket, and periodMs/limit×burst for GCRA (burst cells at
// periodMs/limit each, so limit 100 per minute with burst 20 is 12 s). It is at most the longest
// Duration, and 0 for a strategy it does not know.
func Window(l sluice.Limit) time.Duration {
	var ms float64
	switch s := l.Strategy.(type) {
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
	switch ns := math.Ceil(ms * float64(time.Millisecond)); {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	default:
		return time.Duration(ns)
	}
}

// ceilSeconds is d in whole seconds, rounded up; 0 when d is not positive.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d > 0 && d%time.Second != 0 {
		s++
	}
	return max(s, 0)
}

// label names limit i of a composite: its name when that is printable ASCII, else its index.
func label(l sluice.Limit, i int) string {
	if l.Name == "" {
		return strconv.Itoa(i)
	}
	for _, c := range []byte(l.Name) {
		if c < 0x20 || c > 0x7e {
			return strconv.Itoa(i)
		}
	}
	return l.Name
}

// quote writes s as a structured-field string (RFC 8941 §3.3.3), which holds printable ASCII only:
// '"' and '\' are escaped and any other byte becomes '?'.
func quote(s string) string {
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
