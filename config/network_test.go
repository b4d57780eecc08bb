package config_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

func TestNetwork(t *testing.T) {
	c := mustParse(t, `
idleTimeout: 1s
readTimeout: 2s
writeTimeout: 3s
maxConnections: 10
grpcMaxConnectionIdle: 4s
grpcMaxConcurrentStreams: 5
allowedHosts: [sluice.internal, "127.0.0.1:8080"]
trustedProxies: [10.0.0.0/8, 192.168.1.7, "::1"]
`)
	want := config.Network{IdleTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
		MaxConnections: 10, GRPCMaxConnectionIdle: 4 * time.Second, GRPCMaxConcurrentStreams: 5,
		AllowedHosts:   []string{"sluice.internal", "127.0.0.1:8080"},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("::1/128")}}
	if !reflect.DeepEqual(c.Network, want) {
		t.Errorf("Network = %+v, want %+v", c.Network, want)
	}
	for _, tt := range []struct{ name, yaml, path string }{
		{"zero idle timeout", "idleTimeout: 0s", "idleTimeout"},
		{"negative read timeout", "readTimeout: -1s", "readTimeout"},
		{"write timeout not a duration", "writeTimeout: soon", "writeTimeout"},
		{"no connections", "maxConnections: 0", "maxConnections"},
		{"no streams", "grpcMaxConcurrentStreams: 0", "grpcMaxConcurrentStreams"},
		{"too many streams", "grpcMaxConcurrentStreams: 4294967296", "grpcMaxConcurrentStreams"},
		{"empty host", "allowedHosts: ['']", "allowedHosts[0]"},
		{"a URL for a host", "allowedHosts: [a, 'http://a/']", "allowedHosts[1]"},
		{"a proxy not an address", "trustedProxies: [gateway]", "trustedProxies[0]"},
		{"a misspelt field", "idletimeout: 1s", `"idletimeout": unknown field`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), "config: "+tt.path) {
				t.Errorf("Parse(%q) = %v, want an error naming %s", tt.yaml, err, tt.path)
			}
		})
	}
}
