package header

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// ClientAddr returns the address of the client that sent r.
//
// That is the direct peer's address (r.RemoteAddr), which no client can forge, unless the peer is
// in one of trusted: then the forwarded headers are read (Forwarded, or X-Forwarded-For when there
// is no Forwarded), right to left, past every address in a trusted prefix: the right-most untrusted
// address is the client, since only the entries to its right were written by proxies we trust (the
// left-most entry when all are trusted). An entry that is not an address (such as "unknown" or an
// obfuscated identifier) ends the walk at the proxy that wrote it. IPv4-mapped IPv6 addresses are
// returned as IPv4, and IPv6 zones, which name an interface of a proxy's host, are dropped.
//
// ok is false when r.RemoteAddr is not an address, such as a unix socket's peer.
func ClientAddr(r *http.Request, trusted []netip.Prefix) (addr netip.Addr, ok bool) {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !isTrusted(peer, trusted) {
		return peer, true
	}
	client := peer // the nearest hop we can vouch for
	for _, hop := range slices.Backward(forwardedFor(r.Header)) {
		a, ok := parseAddr(hop)
		if !ok {
			break
		}
		client = a
		if !isTrusted(a, trusted) {
			break
		}
	}
	return client, true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
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
