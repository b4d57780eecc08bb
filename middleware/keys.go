package middleware

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
)

// KeyByIP keys a request by its client's IP address, as header.ClientAddr finds it.
//
// Without trusted proxies the key is the direct peer's address (r.RemoteAddr), which no client can
// forge. When the peer is in one of trustedProxies, the forwarded headers are read (Forwarded, or
// X-Forwarded-For when there is no Forwarded), right to left, past every address in a trusted
// prefix: the right-most untrusted address is the client, since only the entries to its right were
// written by proxies we trust. An entry that is not an address (such as "unknown" or an obfuscated
// identifier) ends the walk at the proxy that wrote it. IPv4-mapped IPv6 addresses are keyed as
// IPv4, and IPv6 zones are dropped.
func KeyByIP(trustedProxies ...netip.Prefix) func(*http.Request) (string, error) {
	trusted := make([]netip.Prefix, 0, len(trustedProxies))
	for _, p := range trustedProxies {
		if p.IsValid() {
			trusted = append(trusted, p.Masked())
		}
	}
	return func(r *http.Request) (string, error) {
		addr, ok := header.ClientAddr(r, trusted)
		if !ok {
			return "", fmt.Errorf("%w: client address %q", ErrNoKey, r.RemoteAddr)
		}
		return addr.String(), nil
	}
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
