package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults of the network fields (Network). They reclaim what a client leaves idle or sends too
// slowly, without cutting off any request that keeps moving.
const (
	DefaultIdleTimeout              = 2 * time.Minute
	DefaultReadTimeout              = 30 * time.Second
	DefaultWriteTimeout             = 30 * time.Second
	DefaultMaxConnections           = 4096
	DefaultGRPCMaxConnectionIdle    = 5 * time.Minute
	DefaultGRPCMaxConcurrentStreams = 1000
)

// Network is how sluice serve's listeners treat clients. Read at start only: a reload that
// changes it takes effect at the next restart.
type Network struct {
	// IdleTimeout closes an HTTP keep-alive connection idle this long; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadTimeout bounds reading a whole HTTP request, body included, so that a body sent at a
	// byte a second, or announced and never sent, cannot hold a connection; default
	// DefaultReadTimeout. The stream watches lift it once their request is read.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an HTTP answer; default DefaultWriteTimeout. The stream watches
	// renew it at each event instead.
	WriteTimeout time.Duration
	// MaxConnections caps the HTTP connections open at once; past it, new ones wait in the
	// listen queue until one closes. Default DefaultMaxConnections; keep it under the process's
	// open-file limit.
	MaxConnections int
	// GRPCMaxConnectionIdle closes a gRPC connection with no call for this long; default
	// DefaultGRPCMaxConnectionIdle.
	GRPCMaxConnectionIdle time.Duration
	// GRPCMaxConcurrentStreams caps the calls under way on one gRPC connection; default
	// DefaultGRPCMaxConcurrentStreams.
	GRPCMaxConcurrentStreams uint32
	// AllowedHosts are the Host headers the HTTP API answers (a name or address, any port, or
	// host:port); empty means any. Listing them keeps a DNS-rebound web page off the API.
	AllowedHosts []string
	// TrustedProxies are the peers (addresses or CIDR prefixes) whose Forwarded or
	// X-Forwarded-For the gate believes when it keys on the client address; empty trusts none.
	TrustedProxies []netip.Prefix
}

// rawNetwork is Network as written, at the top level of the file.
type rawNetwork struct {
	IdleTimeout              string   `yaml:"idleTimeout"`
	ReadTimeout              string   `yaml:"readTimeout"`
	WriteTimeout             string   `yaml:"writeTimeout"`
	MaxConnections           *int     `yaml:"maxConnections"`
	GRPCMaxConnectionIdle    string   `yaml:"grpcMaxConnectionIdle"`
	GRPCMaxConcurrentStreams *int64   `yaml:"grpcMaxConcurrentStreams"`
	AllowedHosts             []string `yaml:"allowedHosts"`
	TrustedProxies           []string `yaml:"trustedProxies"`
}

func init() {
	fileKeys = append(fileKeys, "idleTimeout", "readTimeout", "writeTimeout", "maxConnections",
		"grpcMaxConnectionIdle", "grpcMaxConcurrentStreams", "allowedHosts", "trustedProxies")
}

// network reads the network fields of r into c, applying their defaults.
func (c *Config) network(r rawNetwork) *Error {
	n := Network{
		IdleTimeout: DefaultIdleTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout,
		MaxConnections: DefaultMaxConnections, GRPCMaxConnectionIdle: DefaultGRPCMaxConnectionIdle,
		GRPCMaxConcurrentStreams: DefaultGRPCMaxConcurrentStreams,
	}
	for _, d := range []struct {
		path, text string
		dst        *time.Duration
	}{
		{"idleTimeout", r.IdleTimeout, &n.IdleTimeout},
		{"readTimeout", r.ReadTimeout, &n.ReadTimeout},
		{"writeTimeout", r.WriteTimeout, &n.WriteTimeout},
		{"grpcMaxConnectionIdle", r.GRPCMaxConnectionIdle, &n.GRPCMaxConnectionIdle},
	} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return fail(d.path, "must be a positive duration such as 30s, got %q", d.text)
		}
		*d.dst = v
	}
	if r.MaxConnections != nil {
		if *r.MaxConnections < 1 {
			return fail("maxConnections", "must be at least 1, got %d", *r.MaxConnections)
		}
		n.MaxConnections = *r.MaxConnections
	}
	if r.GRPCMaxConcurrentStreams != nil {
		if v := *r.GRPCMaxConcurrentStreams; v < 1 || v > 1<<31-1 {
			return fail("grpcMaxConcurrentStreams", "must be from 1 to 2^31-1, got %d", v)
		}
		n.GRPCMaxConcurrentStreams = uint32(*r.GRPCMaxConcurrentStreams)
	}
	for i, h := range r.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ \t@") {
			return fail(fmt.Sprintf("allowedHosts[%d]", i), "must be a host name or address, with or without a port, got %q", h)
		}
	}
	n.AllowedHosts = r.AllowedHosts
	for i, p := range r.TrustedProxies {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return fail(fmt.Sprintf("trustedProxies[%d]", i), "must be an address or a CIDR prefix such as 10.0.0.0/8, got %q", p)
			}
			prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		n.TrustedProxies = append(n.TrustedProxies, prefix.Masked())
	}
	c.Network = n
	return nil
}
