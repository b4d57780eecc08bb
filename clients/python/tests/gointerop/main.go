// Command gointerop is the Go side of the Python client's tests: the Go Redis store (store/redis)
// deciding checks of one policy on a Redis that a Python RedisBackend shares.
//
//	go run ./clients/python/tests/gointerop -url redis://127.0.0.1:6379 -prefix P -policy api \
//	    -strategy '{"kind":"gcra","limit":3,"periodMs":1000,"burst":3}'
//
// It reads commands from stdin, one a line, and answers each with one line of JSON:
//
//	check KEY COST NOW   {"allowed":true,"limit":3,"remaining":2,"resetAt":...,"retryAfterMs":0}
//	many K1,K2,... COST NOW  [{decision}, ...]: CheckMany of the keys
//	peek KEY NOW         the same fields, consuming nothing
//	forecast KEY COST NOW {"spendableNow":...,"nextReplenishAt":...,"fullAt":...}
//	refund KEY COST NOW  {}
//	bench N KEY          {"n":N,"p50Us":...,"p99Us":...,"meanUs":...}: N checks of KEY, one at a time
//
// NOW is epoch ms, 0 for Redis's clock. An error answers {"error":"..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379", "the Redis")
	prefix := flag.String("prefix", "sluice", "the store's key prefix")
	policy := flag.String("policy", "api", "the policy's name")
	strategy := flag.String("strategy", `{"kind":"gcra","limit":3,"periodMs":1000,"burst":3}`, "the policy's strategy, as in the vectors")
	flag.Parse()
	if err := run(*url, *prefix, *policy, *strategy); err != nil {
		fmt.Fprintln(os.Stderr, "gointerop:", err)
		os.Exit(1)
	}
}

func run(url, prefix, name, spec string) error {
	st, err := conformance.ParseStrategy([]byte(spec))
	if err != nil {
		return err
	}
	p, err := sluice.NewPolicy(name, sluice.Limit{Strategy: st})
	if err != nil {
		return err
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		return err
	}
	cfg, err := redisstore.URLConfig(url)
	if err != nil {
		return err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer client.Close()
	cfg.Prefix = prefix
	store := redisstore.New(client, cfg)
	defer store.Close()

	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		reply, err := do(store, p, strings.Fields(in.Text()))
		if err != nil {
			reply = map[string]any{"error": err.Error()}
		}
		b, _ := json.Marshal(reply)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	return in.Err()
}

// do runs one command.
func do(s *redisstore.Store, p *sluice.Policy, f []string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	if len(f) < 2 {
		return nil, fmt.Errorf("want a command and a key, got %q", f)
	}
	key := f[1]
	switch f[0] {
	case "check":
		d, err := s.Check(ctx, num(3), p, key, num(2))
		return decision(d), err
	case "many":
		keys := strings.Split(key, ",")
		out := make([]sluice.Decision, len(keys))
		if err := s.CheckMany(ctx, num(3), p, keys, num(2), out); err != nil {
			return nil, err
		}
		ds := make([]map[string]any, len(out))
		for i, d := range out {
			ds[i] = decision(d)
		}
		return ds, nil
	case "peek":
		d, err := s.Peek(ctx, num(2), p, key)
		return decision(d), err
	case "forecast":
		fc, err := s.Forecast(ctx, num(3), p, key, num(2))
		return map[string]int64{"spendableNow": fc.SpendableNow, "nextReplenishAt": fc.NextReplenishAt, "fullAt": fc.FullAt}, err
	case "refund":
		return map[string]any{}, s.Refund(ctx, num(3), p, key, num(2))
	case "bench":
		return bench(s, p, int(num(1)), f[2])
	}
	return nil, fmt.Errorf("unknown command %q", f[0])
}

func decision(d sluice.Decision) map[string]any {
	return map[string]any{"allowed": d.Allowed, "limit": d.Limit, "remaining": d.Remaining, "resetAt": d.ResetAt, "retryAfterMs": d.RetryAfterMs}
}

// bench times n checks of key on Redis's clock, one caller, one at a time, after 200 to warm up.
func bench(s *redisstore.Store, p *sluice.Policy, n int, key string) (any, error) {
	ctx := context.Background()
	for range 200 {
		if _, err := s.Check(ctx, 0, p, key, 1); err != nil {
			return nil, err
		}
	}
	took := make([]time.Duration, n)
	var total time.Duration
	for i := range took {
		start := time.Now()
		if _, err := s.Check(ctx, 0, p, key, 1); err != nil {
			return nil, err
		}
		took[i] = time.Since(start)
		total += took[i]
	}
	slices.Sort(took)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	return map[string]any{"n": n, "p50Us": us(took[n/2]), "p99Us": us(took[n*99/100]), "meanUs": us(total / time.Duration(n))}, nil
}
