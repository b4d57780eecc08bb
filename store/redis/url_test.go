package redisstore_test

import (
	"strings"
	"testing"
	"time"

	redisstore "github.com/sluicehq/sluice/store/redis"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name, url string
		addrs     []string
		user, pw  string
		db        int
		master    string
		tls       bool
		single    bool
		timeout   time.Duration
	}{
		{name: "standalone", url: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}, single: true},
		{name: "default port", url: "redis://cache", addrs: []string{"cache:6379"}, single: true},
		{name: "auth and db", url: "redis://app:s%40cret@h:7000/3", addrs: []string{"h:7000"}, user: "app", pw: "s@cret", db: 3, single: true},
		{name: "password only", url: "redis://secret@h:1", addrs: []string{"h:1"}, pw: "secret", single: true},
		{name: "tls", url: "rediss://h:6380?dial_timeout=250ms", addrs: []string{"h:6380"}, tls: true, single: true, timeout: 250 * time.Millisecond},
		{name: "sentinel", url: "redis-sentinel://s1:26379,s2,s3:26380/2?master=main", addrs: []string{"s1:26379", "s2:26379", "s3:26380"}, db: 2, master: "main"},
		{name: "cluster", url: "redis-cluster://:pw@n1:7000,n2:7001", addrs: []string{"n1:7000", "n2:7001"}, pw: "pw"},
		{name: "cluster tls", url: "rediss-cluster://n1:7000", addrs: []string{"n1:7000"}, tls: true},
		{name: "ipv6", url: "redis://[::1]:6379", addrs: []string{"[::1]:6379"}, single: true},
		{name: "ipv6 default port", url: "redis://[::1]", addrs: []string{"[::1]:6379"}, single: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt, err := redisstore.ParseURL(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(opt.InitAddress, " ") != strings.Join(tt.addrs, " ") {
				t.Errorf("addresses %v, want %v", opt.InitAddress, tt.addrs)
			}
			if opt.Username != tt.user || opt.Password != tt.pw || opt.SelectDB != tt.db {
				t.Errorf("user %q password %q db %d, want %q %q %d", opt.Username, opt.Password, opt.SelectDB, tt.user, tt.pw, tt.db)
			}
			if opt.Sentinel.MasterSet != tt.master {
				t.Errorf("master %q, want %q", opt.Sentinel.MasterSet, tt.master)
			}
			if !opt.DisableCache {
				t.Error("client-side caching is on; the store never reads through it")
			}
			if !opt.DisableAutoPipelining {
				t.Error("automatic pipelining is on; batched runs should take connections of their own")
			}
			if (opt.TLSConfig != nil) != tt.tls || opt.ForceSingleClient != tt.single || opt.Dialer.Timeout != tt.timeout {
				t.Errorf("tls %v single %v timeout %v, want %v %v %v", opt.TLSConfig != nil, opt.ForceSingleClient, opt.Dialer.Timeout, tt.tls, tt.single, tt.timeout)
			}
		})
	}
}

func TestParseURLRejects(t *testing.T) {
	tests := []struct{ name, url, want string }{
		{"no scheme", "127.0.0.1:6379", "scheme"},
		{"unknown scheme", "memcached://h:1", "unknown scheme"},
		{"unknown kind", "redis-ring://h:1", "unknown scheme"},
		{"two hosts standalone", "redis://a:1,b:2", "one host only"},
		{"empty host", "redis-cluster://a:1,,b:2", "empty host"},
		{"bad port", "redis://h:99999", "port"},
		{"bad db", "redis://h:1/x", "database"},
		{"cluster db", "redis-cluster://h:1/2", "only database 0"},
		{"sentinel without master", "redis-sentinel://h:1", "master=NAME"},
		{"master on standalone", "redis://h:1?master=x", "unknown option \"master\""},
		{"unknown option", "redis://h:1?pool=3", "unknown option \"pool\""},
		{"bad timeout", "redis://h:1?dial_timeout=soon", "dial_timeout"},
		{"password hidden", "redis://u:hunter2@h:1?x=1", "unknown option"},
		{"bad wait_replicas", "redis://h:1?wait_replicas=one", "wait_replicas"},
		{"negative wait_replicas", "redis://h:1?wait_replicas=-1", "wait_replicas"},
		{"bad wait_timeout", "redis://h:1?wait_replicas=1&wait_timeout=0s", "wait_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redisstore.ParseURL(tt.url)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestURLConfig(t *testing.T) {
	tests := []struct {
		name, url string
		want      redisstore.Config
	}{
		{"none", "redis://h:1", redisstore.Config{}},
		{"replicas", "redis://h:1?wait_replicas=1", redisstore.Config{WaitReplicas: 1}},
		{"replicas and timeout", "redis-sentinel://s:1?master=m&wait_replicas=2&wait_timeout=20ms",
			redisstore.Config{WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond}},
		{"cluster", "redis-cluster://a:1,b:2?wait_timeout=5ms&wait_replicas=1",
			redisstore.Config{WaitReplicas: 1, WaitTimeout: 5 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := redisstore.URLConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if cfg != tt.want {
				t.Errorf("config %+v, want %+v", cfg, tt.want)
			}
			if _, err := redisstore.ParseURL(tt.url); err != nil {
				t.Errorf("ParseURL refuses the store's options: %v", err)
			}
		})
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "rediss://u:p@h?dial_timeout=1s", "redis-sentinel://a,b:1?master=m",
		"redis-cluster://a:1,b:2", "redis://[::1]", "redis://h:1?x=%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		opt, err := redisstore.ParseURL(s)
		if err != nil {
			return
		}
		if len(opt.InitAddress) == 0 {
			t.Fatalf("%q parsed with no address", s)
		}
		if opt.SelectDB < 0 {
			t.Fatalf("%q parsed with database %d", s, opt.SelectDB)
		}
	})
}
