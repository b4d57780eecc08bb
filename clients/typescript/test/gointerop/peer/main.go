// Command peer is the Go side of the TypeScript client's interop test: the Go Redis store
// (store/redis) deciding policies of one limit on the same Redis, prefix and policy name as a
// RedisBackend, driven one JSON request a line on stdin and answering one JSON line each on stdout.
//
//	go run ./clients/typescript/test/gointerop/peer -url redis://127.0.0.1:6379
//
// Requests: {"prefix":"p","policy":"api","strategy":{"kind":"gcra","limit":10,"periodMs":60000,
// "burst":10},"op":"check"|"peek"|"forecast"|"refund"|"reset"|"checkMany"|"checkAll","key":"k",
// "keys":["a","b"],"cost":1,"now":0}: the strategy as the conformance vectors write it, a store of
// that prefix (Config.Prefix) and now 0 for the Redis server's clock. checkAll checks keys together
// under the policy, one all-or-nothing group (the store's general check script). Replies:
// {"decision":{...}}, {"decisions":[...]}, {"forecast":{...}}, {} or {"error":"..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

type request struct {
	Prefix   string          `json:"prefix"`
	Policy   string          `json:"policy"`
	Strategy json.RawMessage `json:"strategy"`
	Op       string          `json:"op"`
	Key      string          `json:"key"`
	Keys     []string        `json:"keys"`
	Cost     int64           `json:"cost"`
	Now      int64           `json:"now"`
}

type reply struct {
	Decision  *sluice.Decision  `json:"decision,omitempty"`
	Decisions []sluice.Decision `json:"decisions,omitempty"`
	Forecast  *sluice.Forecast  `json:"forecast,omitempty"`
	Error     string            `json:"error,omitempty"`
}

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379", "the Redis")
	flag.Parse()
	opt, err := redisstore.ParseURL(*url)
	if err != nil {
		fail(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		fail(err)
	}
	defer client.Close()
	stores := map[string]*redisstore.Store{}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fail(err)
		}
		r := reply{}
		p, err := policy(req)
		if err != nil {
			r.Error = err.Error()
		} else {
			s, ok := stores[req.Prefix]
			if !ok {
				s = redisstore.New(client, redisstore.Config{Prefix: req.Prefix})
				stores[req.Prefix] = s
			}
			r = serve(context.Background(), s, p, req)
		}
		if err := out.Encode(r); err != nil {
			fail(err)
		}
	}
}

// policy is the request's policy: its name with its one strategy.
func policy(req request) (*sluice.Policy, error) {
	st, err := conformance.ParseStrategy(req.Strategy)
	if err != nil {
		return nil, err
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
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		return reply{Error: err.Error()}
	}
	return r
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "peer:", err)
	os.Exit(2)
}
