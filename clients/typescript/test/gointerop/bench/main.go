// Command bench measures the latency of a check through the Go Redis store (store/redis), one
// caller, one check at a time, for comparison with scripts/bench-redis.mjs, which measures the
// TypeScript RedisBackend the same way on the same Redis: the same policy, strategy, keys and
// number of checks, after the same warm-up. It prints one JSON line of milliseconds.
//
//	go run ./clients/typescript/test/gointerop/bench -url redis://127.0.0.1:6379 -n 5000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379", "the Redis")
	n := flag.Int("n", 5000, "checks measured")
	warm := flag.Int("warm", 500, "checks run first, not measured")
	keys := flag.Int("keys", 1000, "distinct keys, checked in turn")
	spec := flag.String("strategy", `{"kind":"gcra","limit":1000000,"periodMs":1000,"burst":1000000}`, "the strategy, as the vectors write it")
	flag.Parse()

	st, err := conformance.ParseStrategy([]byte(*spec))
	check(err)
	p, err := sluice.NewPolicy("bench", sluice.Limit{Strategy: st})
	check(err)
	opt, err := redisstore.ParseURL(*url)
	check(err)
	client, err := rueidis.NewClient(opt)
	check(err)
	defer client.Close()
	prefix := "sluicebench-go-" + strconv.FormatUint(rand.Uint64(), 36)
	s := redisstore.New(client, redisstore.Config{Prefix: prefix})
	ctx := context.Background()

	lat := make([]float64, 0, *n)
	for i := range *warm + *n {
		key := "k" + strconv.Itoa(i%*keys)
		start := time.Now()
		_, err := s.Check(ctx, 0, p, key, 1)
		elapsed := time.Since(start)
		check(err)
		if i >= *warm {
			lat = append(lat, float64(elapsed.Nanoseconds())/1e6)
		}
	}
	for i := range *keys {
		check(s.Reset(ctx, p, "k"+strconv.Itoa(i)))
	}
	slices.Sort(lat)
	sum := 0.0
	for _, v := range lat {
		sum += v
	}
	out := map[string]any{
		"impl": "go store/redis", "n": len(lat),
		"p50Ms": quantile(lat, 0.50), "p99Ms": quantile(lat, 0.99), "meanMs": sum / float64(len(lat)),
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

// quantile is the q-quantile of sorted: the value at rank ceil(q*n), nearest-rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(float64(len(sorted))*q+0.999999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
}
