package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{Target: "127.0.0.1:1", Proto: GRPC, Policy: "p", Keys: 1, Concurrency: 1, Conns: 1, Duration: time.Second}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no target", func(c *Config) { c.Target = "" }, "no target"},
		{"bad proto", func(c *Config) { c.Proto = "udp" }, `proto "udp"`},
		{"no policy", func(c *Config) { c.Policy = "" }, "no policy"},
		{"no keys", func(c *Config) { c.Keys = 0 }, "keys 0"},
		{"no callers", func(c *Config) { c.Concurrency = 0 }, "concurrency 0"},
		{"no conns", func(c *Config) { c.Conns = 0 }, "conns 0"},
		{"no duration", func(c *Config) { c.Duration = 0 }, "duration 0s"},
		{"batch too large", func(c *Config) { c.Batch = 1001 }, "batch 1001"},
		{"negative cost", func(c *Config) { c.Cost = -1 }, "cost -1"},
		{"negative calls", func(c *Config) { c.Calls = -1 }, "calls -1"},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "rate -1"},
		{"a rate and a number of calls", func(c *Config) { c.Rate, c.Calls = 100, 10 }, ""},
		{"gubernator valid", func(c *Config) { c.Proto, c.Limit, c.Period = Gubernator, 10, time.Second }, ""},
		{"gubernator no limit", func(c *Config) { c.Proto, c.Period = Gubernator, time.Second }, "needs --limit"},
		{"gubernator no period", func(c *Config) { c.Proto, c.Limit = Gubernator, 10 }, "needs --period"},
		{"gubernator sub-ms period", func(c *Config) { c.Proto, c.Limit, c.Period = Gubernator, 10, time.Microsecond }, "needs --period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil || c.Batch != 1 || c.Cost != 1 || c.ProgressEvery != time.Second {
					t.Fatalf("Validate() = %v, defaults %+v", err, c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestRunUnreachable checks that a run against nothing fails fast on its first call and never
// runs for its duration.
func TestRunUnreachable(t *testing.T) {
	for _, proto := range []string{GRPC, HTTP, Gubernator} {
		t.Run(proto, func(t *testing.T) {
			start := time.Now()
			_, err := Run(context.Background(), Config{Target: "127.0.0.1:1", Proto: proto, Policy: "p",
				Keys: 1, Concurrency: 1, Conns: 1, Duration: time.Hour, Limit: 1, Period: time.Second})
			if err == nil || !strings.Contains(err.Error(), "first call") {
				t.Fatalf("Run = %v, want the first call to fail", err)
			}
			if time.Since(start) > 15*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
		})
	}
}
