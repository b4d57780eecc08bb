package redisstore

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ParseURL reads a store URL into rueidis client options. The forms:
//
//	redis://[user[:password]@]host[:port][/db]                         one Redis
//	redis-sentinel://[user[:password]@]host:port[,host:port…][/db]?master=NAME
//	                                                                   the master that Sentinels watch
//	redis-cluster://[user[:password]@]host:port[,host:port…]          a Redis Cluster (seed nodes)
//
// with rediss, rediss-sentinel and rediss-cluster for TLS. The port defaults to 6379 (26379 for a
// Sentinel), the database to 0; user and password authenticate to Redis. Query options:
// dial_timeout (a Go duration, default 5s); master (Sentinel, required), sentinel_username and
// sentinel_password (Sentinel, when the Sentinels require their own credentials); wait_replicas
// and wait_timeout (a Go duration), the store's Config.WaitReplicas and Config.WaitTimeout, which
// Open applies and ParseURL checks and leaves out (URLConfig reads them). The options turn
// rueidis's client-side cache off (the store never reads through it), and its automatic
// pipelining, so that the store's batched runs go on connections of their own (see New).
func ParseURL(rawURL string) (rueidis.ClientOption, error) {
	opt, _, err := parseURL(rawURL)
	return opt, err
}

// URLConfig reads the options of a store URL that configure the Store rather than the client
// (wait_replicas, wait_timeout; see ParseURL) into a Config for New. Open applies them itself.
func URLConfig(rawURL string) (Config, error) {
	_, cfg, err := parseURL(rawURL)
	return cfg, err
}

func parseURL(rawURL string) (rueidis.ClientOption, Config, error) {
	var cfg Config
	// The store never reads through rueidis's client-side cache. With the cache on, every
	// connection turns on CLIENT TRACKING, so Redis looks up every key the store writes for
	// invalidations, and rueidis refuses a server that speaks only RESP2 (Redis before 6, some
	// proxies) rather than fall back to it. Without automatic pipelining, the store's batched
	// runs each go on a connection of their own and its other commands are still pipelined (see
	// route in redis.go).
	opt := rueidis.ClientOption{DisableCache: true, DisableAutoPipelining: true}
	fail := func(format string, args ...any) (rueidis.ClientOption, Config, error) {
		return rueidis.ClientOption{}, Config{}, fmt.Errorf("redis store: url %q: %s", redact(rawURL), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return fail("want scheme://…")
	}
	kind, secure := strings.CutPrefix(scheme, "rediss")
	if !secure {
		if kind, ok = strings.CutPrefix(scheme, "redis"); !ok {
			return fail("unknown scheme %q", scheme)
		}
	}
	if kind != "" && kind != "-sentinel" && kind != "-cluster" {
		return fail("unknown scheme %q", scheme)
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(hosts, '@'); at >= 0 {
		user, err := url.PathUnescape(hosts[:at])
		if err != nil {
			return fail("user info: %v", err)
		}
		hosts = hosts[at+1:]
		name, password, hasPassword := strings.Cut(user, ":")
		if !hasPassword { // redis://secret@host: a password alone, as redis-cli reads it
			name, password = "", name
		}
		opt.Username, opt.Password = name, password
	}
	port := "6379"
	if kind == "-sentinel" {
		port = "26379"
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return fail("empty host")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		host, p, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return fail("host %q: want host:port", h)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fail("host %q: port must be 1 to 65535", h)
		}
		opt.InitAddress = append(opt.InitAddress, h)
	}
	if kind == "" && len(opt.InitAddress) > 1 {
		return fail("one host only; use redis-sentinel:// or redis-cluster:// for several")
	}
	if path != "" {
		db, err := strconv.Atoi(path)
		switch {
		case err != nil || db < 0:
			return fail("database %q: want a number", path)
		case kind == "-cluster" && db != 0:
			return fail("a Redis Cluster has only database 0")
		}
		opt.SelectDB = db
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return fail("query: %v", err)
	}
	for name, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case name == "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fail("dial_timeout %q: want a positive duration such as 2s", v)
			}
			opt.Dialer.Timeout = d
		case name == "master" && kind == "-sentinel":
			opt.Sentinel.MasterSet = v
		case name == "sentinel_username" && kind == "-sentinel":
			opt.Sentinel.Username = v
		case name == "sentinel_password" && kind == "-sentinel":
			opt.Sentinel.Password = v
		case name == "wait_replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fail("wait_replicas %q: want a number of replicas, 0 or more", v)
			}
			cfg.WaitReplicas = n
		case name == "wait_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fail("wait_timeout %q: want a positive duration such as 20ms", v)
			}
			cfg.WaitTimeout = d
		default:
			return fail("unknown option %q", name)
		}
	}
	switch kind {
	case "":
		// One Redis, even a node of a Cluster; a client made while it is down redials on use.
		opt.ForceSingleClient = true
	case "-sentinel":
		if opt.Sentinel.MasterSet == "" {
			return fail("a Sentinel URL needs ?master=NAME")
		}
		opt.Sentinel.Dialer = opt.Dialer
		// Reconcile with the Sentinels now and then, not only on +switch-master messages, which a
		// client can miss while it reconnects.
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	if secure {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12} // the server name comes from each address dialled
		if kind == "-sentinel" {
			opt.Sentinel.TLSConfig = opt.TLSConfig
		}
	}
	return opt, cfg, nil
}

// redact hides a URL's password in error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			if j := strings.Index(raw, "://"); j >= 0 && j < i {
				return raw[:j+3] + "xxxxx" + raw[i:]
			}
		}
		return raw
	}
	return u.Redacted()
}
