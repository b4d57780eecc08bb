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

// TestKeyByIP checks the key KeyByIP makes of header.ClientAddr, which package header tests.
func TestKeyByIP(t *testing.T) {
	lb := netip.MustParsePrefix("10.0.0.0/8")
	tests := []struct {
		name, peer, xff string
		trusted         []netip.Prefix
		want            string
		wantErr         error
	}{
		{name: "direct peer", peer: "192.0.2.1:4711", xff: "198.51.100.7", want: "192.0.2.1"},
		{name: "IPv6 peer", peer: "[2001:db8::1%eth0]:4711", want: "2001:db8::1"},
		{name: "behind a trusted proxy", peer: "10.0.0.1:1", xff: "6.6.6.6, 198.51.100.7, 10.0.0.2", trusted: []netip.Prefix{lb}, want: "198.51.100.7"},
		{name: "unmasked and invalid prefixes", peer: "10.0.0.1:1", xff: "198.51.100.7",
			trusted: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.1.2.3"), 8), {}}, want: "198.51.100.7"},
		{name: "not an address", peer: "@", wantErr: middleware.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.peer
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
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
