package pgstore_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// TestSameAsMemory replays random traffic (every operation, every strategy, composite policies,
// keys repeated within one call) against the memory store and PostgreSQL at the same instants and
// requires every answer to be equal.
func TestSameAsMemory(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			s, _, _ := newStore(t, pgstore.Config{})
			storetest.SameAsMemory(t, s, seed, 1500)
		})
	}
}

// TestLimitChange replays random traffic whose keys' limits change between and within windows
// (storetest.LimitVariants) against the memory store and PostgreSQL, and requires equal answers.
// The sweep is off: the test compares how the stores read a kept state, and a row swept once idle
// under the numbers of its last write reads fresh under any other (docs/semantics.md, When a
// key's limit changes), which a sweep during a slow run could otherwise meet.
func TestLimitChange(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			s, _, _ := newStore(t, pgstore.Config{SweepInterval: -1})
			storetest.LimitChange(t, s, seed, 1500)
		})
	}
}

// TestCalendarWindows checks calendar quotas across local midnights, days of 23 and 25 hours and
// month ends on PostgreSQL and the memory store alike.
func TestCalendarWindows(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.CalendarWindows(t, s)
}
