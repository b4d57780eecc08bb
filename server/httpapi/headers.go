package httpapi

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// SetRateLimitHeaders sets the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers for d, a decision of p taken at now, and Retry-After (whole
// seconds, rounded up) when d is a denial.
//
// A single-limit policy is one item named after the policy:
//
//	RateLimit-Policy: "partner-api";q=100;w=60
//	RateLimit: "partner-api";r=0;t=60
//
// A composite policy lists one item per limit, named policy#name (policy#index for a limit without
// a printable name), in the policy's order, each with that limit's own part of d.
//
// q is the limit's ceiling (the decision's limit). w is the time, in seconds rounded to the nearest
// and at least 1, in which the limit gives back q units: windowMs for the window strategies,
// capacity/refillPerSec for a token bucket, and periodMs/limit×burst for GCRA (q = burst cells
// at periodMs/limit each, so limit 100 per minute with burst 20 is q=20;w=12). r is the decision's
// remaining and t the seconds until resetAt, rounded up.
//
// A decision made by a fail-open policy while the store was unavailable carries no numbers (its
// limit is 0): RateLimit is left out then, as nothing is known of what remains.
func SetRateLimitHeaders(h http.Header, p *sluice.Policy, d sluice.Decision, now time.Time) {
	limits := p.Limits()
	var policy, state strings.Builder
	known := d.Limit > 0 && (len(limits) == 1 || len(d.Parts) == len(limits))
	for i, l := range limits {
		if i > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		name := p.Name()
		if len(limits) > 1 {
			name += "#" + limitLabel(l, i)
		}
		writeString(&policy, name)
		policy.WriteString(";q=")
		policy.WriteString(strconv.FormatInt(int64(l.Strategy.Ceiling()), 10))
		policy.WriteString(";w=")
		policy.WriteString(strconv.FormatInt(windowSeconds(l.Strategy), 10))
		if known {
			part := d
			if len(limits) > 1 {
				part = d.Parts[i]
			}
			writeString(&state, name)
			state.WriteString(";r=")
			state.WriteString(strconv.FormatInt(max(part.Remaining, 0), 10))
			state.WriteString(";t=")
			state.WriteString(strconv.FormatInt(ceilSeconds(part.ResetAt-now.UnixMilli()), 10))
		}
	}
	h.Set("RateLimit-Policy", policy.String())
	if known {
		h.Set("RateLimit", state.String())
	} else {
		h.Del("RateLimit")
	}
	setRetryAfter(h, d)
}

// setRetryAfter sets Retry-After on a denial: at least 1, since a denied check never passes at once.
func setRetryAfter(h http.Header, d sluice.Decision) {
	if d.Allowed {
		h.Del("Retry-After")
		return
	}
	h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(d.RetryAfterMs), 1), 10))
}

// windowSeconds is the time in which s gives back its whole ceiling.
func windowSeconds(s sluice.Strategy) int64 {
	var ms float64
	switch v := s.(type) {
	case sluice.GCRA:
		ms = v.PeriodMs / v.Limit * v.Burst
	case sluice.TokenBucket:
		ms = v.Capacity / v.RefillPerSec * 1000
	case sluice.FixedWindow:
		ms = v.WindowMs
	case sluice.SlidingWindow:
		ms = v.WindowMs
	case sluice.SlidingWindowLog:
		ms = v.WindowMs
	}
	// A structured-field integer has at most 15 digits.
	return int64(min(max(math.Round(ms/1000), 1), 999_999_999_999_999))
}

func ceilSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}

// limitLabel names limit i of a composite in the header fields: its name when that is printable
// ASCII (a structured-field string can hold nothing else), else its index.
func limitLabel(l sluice.Limit, i int) string {
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

// writeString writes s as a structured-field string (RFC 9651 §3.3.3); s is printable ASCII.
func writeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
}

// ClientAddr returns the address of the client that sent r. That is the peer's address, unless
// the peer is in trusted: then X-Forwarded-For is read from the right, each trusted proxy
// vouching for the hop before it, and the first address that is not a trusted proxy is the
// client (the leftmost one if all are). Hops a client wrote itself, left of the first untrusted
// one, are never believed. ok is false when r.RemoteAddr is not an address.
func ClientAddr(r *http.Request, trusted []netip.Prefix) (addr netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		a, err := netip.ParseAddr(r.RemoteAddr)
		if err != nil {
			return netip.Addr{}, false
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	addr = ap.Addr().Unmap()
	if !isTrusted(addr, trusted) {
		return addr, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := parseHop(strings.TrimSpace(hops[i]))
		if err != nil {
			// A trusted proxy passed on something that is not an address: the proxy itself is
			// the last hop known.
			return addr, true
		}
		addr = hop
		if !isTrusted(addr, trusted) {
			break
		}
	}
	return addr, true
}

func parseHop(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
