package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

// TestSameAsMemory replays random traffic (every operation, every strategy, composite policies,
// keys repeated within one call) against the memory store and Redis at the same instants and
// requires every answer to be equal.
func TestSameAsMemory(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rs, _, _ := newStore(t)
			storetest.SameAsMemory(t, rs, seed, 1500)
		})
	}
}

// TestLimitChange replays random traffic whose keys' limits change between and within windows
// (storetest.LimitVariants) against the memory store and Redis, and requires equal answers. Keys
// live an hour past their idle instant: the test compares how the stores read a kept state, and a
// key Redis let expire under the numbers of its last write reads fresh under any other
// (docs/semantics.md, When a key's limit changes), which a slow run could otherwise meet.
func TestLimitChange(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c := client(t)
			prefix := fmt.Sprintf("sluice-test:%d:%s", time.Now().UnixNano(), t.Name())
			rs := redisstore.New(c, redisstore.Config{Prefix: prefix, TTLSlack: time.Hour})
			t.Cleanup(func() {
				rs.Close()
				for _, k := range keysUnder(t, c, prefix) {
					do(t, c, "DEL", k)
				}
			})
			storetest.LimitChange(t, rs, seed, 1500)
		})
	}
}
