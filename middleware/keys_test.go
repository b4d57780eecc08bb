package middleware_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/middleware"
)

func TestKeyByIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		header  []string // name, value, …
		want    string
		wantErr error
	}{
		{"direct peer", nil, "192.0.2.1:4711", nil, "192.0.2.1", nil},
		{"direct IPv6 peer", nil, "[2001:db8::1]:4711", nil, "2001:db8::1", nil},
		{"IPv4-mapped peer", nil, "[::ffff:192.0.2.1]:4711", nil, "192.0.2.1", nil},
		{"no port", nil, "192.0.2.1", nil, "192.0.2.1", nil},
		{"forwarded headers ignored without trust", nil, "192.0.2.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1", nil},
		{"forwarded headers ignored from an untrusted peer", proxies, "192.0.2.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1", nil},
		{"X-Forwarded-For from a trusted peer", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7", nil},
		{"right-most untrusted wins over a spoofed left", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7", nil},
		{"several X-Forwarded-For lines", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.7, 10.0.0.2"}, "198.51.100.7", nil},
		{"every hop trusted", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "10.9.9.9, 10.0.0.2"}, "10.9.9.9", nil},
		{"no forwarded header", proxies, "10.0.0.1:1", nil, "10.0.0.1", nil},
		{"garbage stops at the proxy that wrote it", proxies, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.7, unknown, 10.0.0.2"}, "10.0.0.2", nil},
		{"Forwarded", proxies, "[fd00::1]:1",
			[]string{"Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2;by=10.0.0.1`}, "2001:db8:cafe::17", nil},
		{"Forwarded wins over X-Forwarded-For", proxies, "10.0.0.1:1",
			[]string{"Forwarded", "For=198.51.100.7", "X-Forwarded-For", "6.6.6.6"}, "198.51.100.7", nil},
		{"Forwarded obfuscated", proxies, "10.0.0.1:1", []string{"Forwarded", `for="_gazonk"`}, "10.0.0.1", nil},
		{"Forwarded element without for", proxies, "10.0.0.1:1", []string{"Forwarded", "for=6.6.6.6, proto=http"}, "10.0.0.1", nil},
		{"X-Forwarded-For with a port", proxies, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7:5555"}, "198.51.100.7", nil},
		{"bad remote address", nil, "@", nil, "", middleware.ErrNoKey},
		{"empty remote address", nil, "", nil, "", middleware.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.header); i += 2 {
				r.Header.Add(tt.header[i], tt.header[i+1])
			}
			got, err := middleware.KeyByIP(tt.trusted...)(r)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("KeyByIP: %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestKeyByHeader(t *testing.T) {
	tests := []struct {
		name, value string
		want        string
		wantErr     error
	}{
		{"present", "key-123", "key-123", nil},
		{"trimmed", "  key-123 ", "key-123", nil},
		{"missing", "", "", middleware.ErrNoKey},
		{"too long", strings.Repeat("k", 1025), "", middleware.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.value != "" {
				r.Header.Set("X-Api-Key", tt.value)
			}
			got, err := middleware.KeyByHeader("x-api-key")(r)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("KeyByHeader: %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
