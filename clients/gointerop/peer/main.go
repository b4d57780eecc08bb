// Command peer is the Go side of the Python and TypeScript clients' Redis tests: the Go Redis store
// (store/redis) deciding policies of one limit on the same Redis, prefix and policy name as a
// client's RedisBackend, driven one JSON request a line on stdin and answering one JSON line each
// on stdout, in order.
//
//	go run ./clients/gointerop/peer -url redis://127.0.0.1:6379
//
// A request:
//
//	{"prefix":"p","policy":"api","strategy":{"kind":"gcra","limit":10,"periodMs":60000,"burst":10},
//	 "op":"check","key":"k","keys":["a","b"],"cost":1,"now":0,"n":5000,"warm":200}
//
// prefix is the store's key prefix (Config.Prefix; "" is the default, sluice), policy the policy's
// name and strategy its one limit as the conformance vectors write it (conformance.ParseStrategy).
// now is epoch ms, 0 for the Redis server's clock; cost is 1 when left out. The ops and their
// replies:
//
//	check      key, cost, now    {"decision":{...}}      Store.Check
//	peek       key, now          {"decision":{...}}      Store.Peek
//	forecast   key, cost, now    {"forecast":{...}}      Store.Forecast
//	refund     key, cost, now    {}                      Store.Refund
//	reset      key               {}                      Store.Reset
//	checkMany  keys, cost, now   {"decisions":[...]}     Store.CheckMany: each key on its own
//	checkAll   keys, cost, now   {"decisions":[...]}     Store.CheckAll: the keys under the policy,
//	                                                     one all-or-nothing group (the store's
//	                                                     general check script)
//	bench      keys or key, n,   {"latenciesNs":[...]}   warm unmeasured checks, then n measured
//	           warm, cost                                ones, one at a time on Redis's clock, the
//	                                                     keys checked in turn; the n latencies in
//	                                                     order, in ns
//
// A decision is sluice.Decision's JSON ({"allowed":true,"limit":10,"remaining":9,"resetAt":...,
// "retryAfterMs":0,"deniedBy":-1}) and a forecast sluice.Forecast's ({"spendableNow":...,
// "nextReplenishAt":...,"fullAt":...}). A request that fails (a line that is not a request, a
// strategy Go refuses, an unknown op, the store's error) answers {"error":"..."} and the peer reads
// on. Stores are kept per prefix and their Redis client shared; the peer ends at the end of stdin.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// request is one line of input (see the package doc).
type request struct {
	Prefix   string          `json:"prefix"`
	Policy   string          `json:"policy"`
	Strategy json.RawMessage `json:"strategy"`
	Op       string          `json:"op"`
	Key      string          `json:"key"`
	Keys     []string        `json:"keys"`
	Cost     int64           `json:"cost"`
	Now      int64           `json:"now"`
	N        int             `json:"n"`
	Warm     int             `json:"warm"`
}

// reply is one line of output: the fields of the request's op, or Error.
type reply struct {
	Decision    *sluice.Decision  `json:"decision,omitempty"`
	Decisions   []sluice.Decision `json:"decisions,omitempty"`
	Forecast    *sluice.Forecast  `json:"forecast,omitempty"`
	LatenciesNs []int64           `json:"latenciesNs,omitempty"`
	Error       string            `json:"error,omitempty"`
}

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379", "the Redis, as a store URL (redisstore.ParseURL)")
	flag.Parse()
	if err := run(*url); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(2)
	}
}

func run(url string) error {
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
	stores := map[string]*redisstore.Store{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		req := request{Cost: 1}
		var r reply
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			r.Error = fmt.Sprintf("request %q: %v", in.Text(), err)
		} else if p, err := policy(req); err != nil {
			r.Error = err.Error()
		} else {
			s, ok := stores[req.Prefix]
			if !ok {
				c := cfg
				c.Prefix = req.Prefix
				s = redisstore.New(client, c)
				stores[req.Prefix] = s
			}
			r = serve(context.Background(), s, p, req)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return in.Err()
}

// policy is the request's policy: its name with its one strategy.
func policy(req request) (*sluice.Policy, error) {
	st, err := conformance.ParseStrategy(req.Strategy)
	if err != nil {
		return nil, fmt.Errorf("strategy: %w", err)
	}
	return sluice.NewPolicy(req.Policy, sluice.Limit{Strategy: st})
}

// serve runs one request on the store.
func serve(ctx context.Context, s *redisstore.Store, p *sluice.Policy, req request) reply {
	var r reply
	var err error
	switch req.Op {
	case "check":
		var d sluice.Decision
		d, err = s.Check(ctx, req.Now, p, req.Key, req.Cost)
		r.Decision = &d
	case "peek":
		var d sluice.Decision
		d, err = s.Peek(ctx, req.Now, p, req.Key)
		r.Decision = &d
	case "forecast":
		var f sluice.Forecast
		f, err = s.Forecast(ctx, req.Now, p, req.Key, req.Cost)
		r.Forecast = &f
	case "refund":
		err = s.Refund(ctx, req.Now, p, req.Key, req.Cost)
	case "reset":
		err = s.Reset(ctx, p, req.Key)
	case "checkMany":
		r.Decisions = make([]sluice.Decision, len(req.Keys))
		err = s.CheckMany(ctx, req.Now, p, req.Keys, req.Cost, r.Decisions)
	case "checkAll":
		ps := make([]*sluice.Policy, len(req.Keys))
		items := make([]sluice.Item, len(req.Keys))
		for i, k := range req.Keys {
			ps[i], items[i] = p, sluice.Item{Policy: p.Name(), Key: k, Cost: req.Cost}
		}
		r.Decisions = make([]sluice.Decision, len(req.Keys))
		err = s.CheckAll(ctx, req.Now, ps, items, r.Decisions)
	case "bench":
		r.LatenciesNs, err = bench(ctx, s, p, req)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		return reply{Error: err.Error()}
	}
	return r
}

// bench times req.N checks of cost req.Cost on Redis's clock, one at a time, after req.Warm
// unmeasured ones, checking req.Keys (or req.Key alone) in turn.
func bench(ctx context.Context, s *redisstore.Store, p *sluice.Policy, req request) ([]int64, error) {
	keys := req.Keys
	if len(keys) == 0 {
		keys = []string{req.Key}
	}
	if req.N < 1 || req.Warm < 0 {
		return nil, errors.New("bench: want n of 1 or more and warm of 0 or more")
	}
	took := make([]int64, 0, req.N)
	for i := range req.Warm + req.N {
		start := time.Now()
		_, err := s.Check(ctx, 0, p, keys[i%len(keys)], req.Cost)
		elapsed := time.Since(start)
		if err != nil {
			return nil, err
		}
		if i >= req.Warm {
			took = append(took, elapsed.Nanoseconds())
		}
	}
	return took, nil
}
