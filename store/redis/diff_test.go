package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
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
// (storetest.LimitVariants) against the memory store and Redis, and requires equal answers.
func TestLimitChange(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rs, _, _ := newStore(t)
			storetest.LimitChange(t, rs, seed, 1500)
		})
	}
}
