package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/loadgen"
)

const benchUsage = "usage: sluice bench --target ADDR --policy NAME [--proto grpc|http|envoy|gubernator] [--keys N] [--concurrency N] [--conns N] [--duration D] [--calls N] [--rate R] [--batch N] [--cost N] [--token T] [--limit N --period D] [--json]\n\n" +
	"With --proto gubernator, --target is gubernator's gRPC port, --policy the rate limit's name,\n" +
	"and --limit and --period (required) the limit and duration sent in each request.\n" +
	"With --proto envoy, --target is a gRPC port serving Envoy's ShouldRateLimit (sluice's, or\n" +
	"envoyproxy/ratelimit's), --policy the domain, each key one descriptor of one entry (key, bench-N),\n" +
	"--batch N descriptors per request, and --cost the request's hits_addend.\n\n"

// runBench drives a running server and prints a summary: exit 0 when every call succeeded, 1 when
// some failed, 2 on bad usage or when the run could not start.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	cfg := loadgen.Config{}
	fs.StringVar(&cfg.Target, "target", "", "`address` (host:port) of the server's gRPC or HTTP port")
	fs.StringVar(&cfg.Proto, "proto", loadgen.GRPC, "protocol: grpc, http, envoy (Envoy's ShouldRateLimit), or gubernator (its GetRateLimits API, for comparison)")
	fs.StringVar(&cfg.Policy, "policy", "", "policy `NAME` to check against (envoy: the domain)")
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct keys, chosen uniformly at random")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "concurrent callers")
	fs.IntVar(&cfg.Conns, "conns", 4, "gRPC connections, or HTTP connections to the host at most")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	fs.Int64Var(&cfg.Calls, "calls", 0, "stop after this many calls (0: when --duration ends)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "calls per second at most, over all callers (0: as fast as the server answers)")
	fs.IntVar(&cfg.Batch, "batch", 0, "keys per call: 0 or 1 for unary Check, more for CheckMany")
	fs.Int64Var(&cfg.Cost, "cost", 1, "cost of each check")
	fs.StringVar(&cfg.Token, "token", "", "bearer `token` to send with every call")
	fs.Int64Var(&cfg.Limit, "limit", 0, "gubernator only: the `limit` sent in each request")
	fs.DurationVar(&cfg.Period, "period", 0, "gubernator only: the duration sent in each request")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}

	tty := isTerminal(stderr)
	cfg.Progress = func(p loadgen.Progress) {
		line := fmt.Sprintf("%5.1fs  %10.0f checks/s  %5.1f%% allowed  p50 %-9v p99 %-9v errors %d",
			p.Elapsed.Seconds(), p.ChecksPerSec, p.AllowedPct, round(p.P50), round(p.P99), p.Errors)
		if tty {
			fmt.Fprintf(stderr, "\r%s\x1b[K", line)
		} else {
			fmt.Fprintln(stderr, line)
		}
	}
	s, err := loadgen.Run(ctx, cfg)
	if tty {
		fmt.Fprint(stderr, "\r\x1b[K")
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 2
		}
	} else {
		printSummary(stdout, s)
	}
	if s.Errors > 0 {
		fmt.Fprintf(stderr, "sluice bench: %d calls failed; the first: %s\n", s.Errors, s.FirstError)
		return 1
	}
	return 0
}

func printSummary(w io.Writer, s *loadgen.Summary) {
	pct := func(n int64) float64 {
		if s.Checks == 0 {
			return 0
		}
		return 100 * float64(n) / float64(s.Checks)
	}
	call := "Check"
	if s.Batch > 1 {
		call = fmt.Sprintf("CheckMany of %d", s.Batch)
	}
	if s.Proto == loadgen.Envoy {
		call = fmt.Sprintf("ShouldRateLimit of %d descriptors", s.Batch)
		if s.Batch == 1 {
			call = "ShouldRateLimit of 1 descriptor"
		}
	}
	if s.Proto == loadgen.Gubernator {
		call = fmt.Sprintf("GetRateLimits of %d, limit %d per %v", s.Batch, s.Limit, time.Duration(s.PeriodMs)*time.Millisecond)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s (%s), policy %s, %s, cost %d\n", s.Target, s.Proto, s.Policy, call, s.Cost)
	fmt.Fprintf(tw, "load\t%d callers, %d conns, %d keys, %.2fs\n", s.Concurrency, s.Conns, s.Keys, s.ElapsedSec)
	fmt.Fprintf(tw, "calls\t%d\t(%.0f/s)\n", s.Calls, s.CallsPerSec)
	fmt.Fprintf(tw, "checks\t%d\n", s.Checks)
	fmt.Fprintf(tw, "checks/s\t%.0f\n", s.ChecksPerSec)
	fmt.Fprintf(tw, "allowed\t%d\t(%.2f%%)\n", s.Allowed, pct(s.Allowed))
	if s.FailOpen > 0 {
		fmt.Fprintf(tw, "  by fail mode\t%d\t(%.2f%%: the store did not answer in time; no limit was applied)\n", s.FailOpen, pct(s.FailOpen))
	}
	fmt.Fprintf(tw, "denied\t%d\t(%.2f%%)\n", s.Denied, pct(s.Denied))
	fmt.Fprintf(tw, "errors\t%d\n", s.Errors)
	fmt.Fprintf(tw, "latency/call\tp50 %v\tp90 %v\tp99 %v\tmax %v\n",
		round(s.Latency.P50), round(s.Latency.P90), round(s.Latency.P99), round(s.Latency.Max))
	tw.Flush()
}

// round keeps three significant figures of a latency.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	}
	return d.Round(10 * time.Nanosecond)
}

// isTerminal reports whether w is a character device (a terminal), where progress rewrites one line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
