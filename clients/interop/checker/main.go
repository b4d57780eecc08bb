// Command checker is the Go side of the clients' interop test: it checks keys under one policy on
// the Go Redis store, one line of input per check ("KEY COST"), one JSON decision per line out, so
// that a Python and a Node process checking the same keys on the same Redis can be compared with it.
//
//	go run ./clients/interop/checker --redis redis://127.0.0.1:6379 --prefix P --policy NAME --strategy '{"kind":"gcra",...}'
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "checker:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("redis", "redis://127.0.0.1:6379", "the Redis")
	prefix := flag.String("prefix", "", "the store's key prefix (\"\": sluice)")
	name := flag.String("policy", "", "the policy's name")
	spec := flag.String("strategy", "", `the strategy as in the vectors, {"kind":...}`)
	flag.Parse()
	strategy, err := conformance.ParseStrategy([]byte(*spec))
	if err != nil {
		return fmt.Errorf("--strategy: %w", err)
	}
	policy, err := sluice.NewPolicy(*name, sluice.Limit{Strategy: strategy})
	if err != nil {
		return err
	}
	opt, err := redisstore.ParseURL(*url)
	if err != nil {
		return err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer client.Close()
	store := redisstore.New(client, redisstore.Config{Prefix: *prefix})
	lim, err := sluice.New(store, policy)
	if err != nil {
		return err
	}
	in, out := bufio.NewScanner(os.Stdin), json.NewEncoder(os.Stdout)
	for in.Scan() {
		key, costText, _ := strings.Cut(in.Text(), " ")
		cost, err := strconv.ParseInt(costText, 10, 64)
		if err != nil {
			return fmt.Errorf("input %q: want KEY COST", in.Text())
		}
		d, err := lim.Check(context.Background(), *name, key, cost)
		if err != nil {
			return err
		}
		if err := out.Encode(d); err != nil {
			return err
		}
	}
	return in.Err()
}
