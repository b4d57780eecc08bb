package middleware

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// KeyByIP keys a request by its client's IP address.
//
// Without trusted proxies the key is the direct peer's address (r.RemoteAddr), which no client can
// forge. When the peer is in one of trustedProxies, the forwarded headers are read (Forwarded, or
// X-Forwarded-For when there is no Forwarded), right to left, past every address in a trusted
// prefix: the right-most untrusted address is the client, since only the entries to its right were
// written by proxies we trust. An entry that is not an address (such as "unknown" or an obfuscated
// identifier) ends the walk at the proxy that wrote it. IPv4-mapped IPv6 addresses are keyed as
// IPv4.
func KeyByIP(trustedProxies ...netip.Prefix) func(*http.Request) (string, error) {
	trusted := make([]netip.Prefix, 0, len(trustedProxies))
	for _, p := range trustedProxies {
		if p.IsValid() {
			trusted = append(trusted, p.Masked())
		}
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, ok := parseAddr(r.RemoteAddr)
		if !ok {
			return "", fmt.Errorf("%w: client address %q", ErrNoKey, r.RemoteAddr)
		}
		if !isTrusted(peer) {
			return peer.String(), nil
		}
		client := peer // the nearest hop we can vouch for
		for _, hop := range slices.Backward(forwardedFor(r.Header)) {
			a, ok := parseAddr(hop)
			if !ok {
				break
			}
			client = a
			if !isTrusted(a) {
				break
			}
		}
		return client.String(), nil
	}
}

// forwardedFor lists the client addresses of the forwarded headers, left to right over all their
// lines: the for= parameters of Forwarded (RFC 7239) if it is present, else X-Forwarded-For.
func forwardedFor(h http.Header) []string {
	var hops []string
	if lines := h.Values("Forwarded"); len(lines) > 0 {
		for _, line := range lines {
			for elem := range strings.SplitSeq(line, ",") {
				var hop string // an element without for= still stands for a hop we cannot name
				for pair := range strings.SplitSeq(elem, ";") {
					k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
					if strings.EqualFold(k, "for") {
						hop = strings.Trim(v, `"`)
					}
				}
				hops = append(hops, hop)
			}
		}
		return hops
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for hop := range strings.SplitSeq(line, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// parseAddr reads an address with or without a port, IPv6 possibly in brackets or with a zone.
func parseAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	// The zone names an interface of the proxy's host, not a client.
	return a.Unmap().WithZone(""), true
}

// KeyByHeader keys a request by the value of the named header, such as an API key or a tenant
// set by an authenticating proxy. A request without it, or with one longer than sluice.MaxKeyLen,
// has no key (ErrNoKey): the header is the client's to send, so this is the request's fault.
func KeyByHeader(name string) func(*http.Request) (string, error) {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(name))
		switch {
		case v == "":
			return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
		case len(v) > sluice.MaxKeyLen:
			return "", fmt.Errorf("%w: the %s header is longer than %d bytes", ErrNoKey, name, sluice.MaxKeyLen)
		}
		return v, nil
	}
}
