package header_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/header"
)

func TestClientAddr(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		header  []string // name, value, …
		want    string   // "" for not ok
	}{
		{"direct peer", nil, "192.0.2.1:4711", nil, "192.0.2.1"},
		{"direct IPv6 peer", nil, "[2001:db8::1]:4711", nil, "2001:db8::1"},
		{"IPv4-mapped peer", nil, "[::ffff:192.0.2.1]:4711", nil, "192.0.2.1"},
		{"zoned peer", nil, "[fe80::1%eth0]:4711", nil, "fe80::1"},
		{"no port", nil, "192.0.2.1", nil, "192.0.2.1"},
		{"forwarded headers ignored without trust", nil, "192.0.2.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1"},
		{"forwarded headers ignored from an untrusted peer", proxies, "192.0.2.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1"},
		{"X-Forwarded-For from a trusted peer", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"trusted IPv4-mapped peer", proxies, "[::ffff:10.0.0.1]:1234", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"proxies chained", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"right-most untrusted wins over a spoofed left", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"several X-Forwarded-For lines", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.7,10.0.0.2"}, "198.51.100.7"},
		{"every hop trusted", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "10.9.9.9, 10.0.0.2"}, "10.9.9.9"},
		{"no forwarded header", proxies, "10.0.0.1:1", nil, "10.0.0.1"},
		{"garbage stops at the proxy that wrote it", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.7, unknown, 10.0.0.2"}, "10.0.0.2"},
		{"garbage from the client", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "nonsense"}, "10.0.0.1"},
		{"X-Forwarded-For with a port", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7:5555"}, "198.51.100.7"},
		{"X-Forwarded-For IPv6", proxies, "[fd00::1]:1234", []string{"X-Forwarded-For", "fd00::2, 2a00::9"}, "2a00::9"},
		{"X-Forwarded-For zone dropped", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "fe80::7%eth1"}, "fe80::7"},
		{"Forwarded", proxies, "[fd00::1]:1",
			[]string{"Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2;by=10.0.0.1`}, "2001:db8:cafe::17"},
		{"Forwarded wins over X-Forwarded-For", proxies, "10.0.0.1:1",
			[]string{"Forwarded", "For=198.51.100.7", "X-Forwarded-For", "6.6.6.6"}, "198.51.100.7"},
		{"Forwarded zone dropped", proxies, "10.0.0.1:1", []string{"Forwarded", `for="[fe80::7%25eth1]:80"`}, "fe80::7"},
		{"Forwarded obfuscated", proxies, "10.0.0.1:1", []string{"Forwarded", `for="_gazonk"`}, "10.0.0.1"},
		{"Forwarded element without for", proxies, "10.0.0.1:1", []string{"Forwarded", "for=6.6.6.6, proto=http"}, "10.0.0.1"},
		{"unix socket peer", nil, "@", nil, ""},
		{"empty remote address", nil, "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.header); i += 2 {
				r.Header.Add(tt.header[i], tt.header[i+1])
			}
			got, ok := header.ClientAddr(r, tt.trusted)
			if ok != (tt.want != "") || ok && got.String() != tt.want {
				t.Errorf("ClientAddr = %v, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// FuzzClientAddr feeds ClientAddr forwarded headers from a trusted peer: it never panics, and what
// it answers is always an address, the peer's own when the headers name none.
func FuzzClientAddr(f *testing.F) {
	for _, seed := range []struct{ forwarded, xff string }{
		{`for=192.0.2.60;proto=http;by=203.0.113.43`, ""},
		{`for="[2001:db8:cafe::17]:4711"`, ""},
		{`for=unknown, for=198.51.100.17`, ""},
		{"", "203.0.113.195, 70.41.3.18, 150.172.238.178"},
		{"", "::ffff:192.0.2.1, fe80::1%eth0"},
		{`for="`, ",,,"},
	} {
		f.Add(seed.forwarded, seed.xff)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}
	f.Fuzz(func(t *testing.T, forwarded, xff string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.1.2.3:5555"
		if forwarded != "" {
			r.Header.Set("Forwarded", forwarded)
		}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		addr, ok := header.ClientAddr(r, trusted)
		if !ok || !addr.IsValid() {
			t.Fatalf("ClientAddr(Forwarded %q, X-Forwarded-For %q) = %v, %v: want an address", forwarded, xff, addr, ok)
		}
	})
}
