// Package streamtest holds the contract every stream.Backend must pass, so that the memory
// engine and the PostgreSQL engine run the same tests: windows and decisions across a restart,
// late events, resets, bad input, and consumer groups (exclusive leases, delivery once per
// group, acks, redelivery after a lease expires). Tests that only one backend can run (schema
// migrations, a processor killed mid-transaction) stay with that backend.
package streamtest

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/stream"
)

// T0 is an instant the tests' events start at: a multiple of 1000, so window boundaries fall on it.
const T0 int64 = 1_700_000_000_000

// Harness is one fresh, empty backend and the hooks the contract needs around it. The backend is
// closed when the test ends.
type Harness struct {
	stream.Backend
	// Reopen returns another handle on the same state, as a restarted process would open; a
	// backend that lives in one process returns itself.
	Reopen func() stream.Backend
	// Advance moves the clock that leases expire by forward by ms, and Now reads it in epoch ms:
	// no test waits for a lease to expire.
	Advance func(ms int64)
	Now     func() int64
	// Slack is how far a lease's ExpiresAt may stray from Now() + its LeaseMs: a database's clock
	// is not the test's. 0 for a backend on the test's clock.
	Slack int64
}

// Open returns a Harness on a fresh, empty backend for t.
type Open func(t *testing.T) Harness

// Run runs the contract, each test on a backend of its own from open.
func Run(t *testing.T, open Open) {
	t.Helper()
	t.Run("WindowsAndDecisions", func(t *testing.T) { windowsAndDecisions(t, open(t)) })
	t.Run("Invalid", func(t *testing.T) { invalid(t, open(t)) })
	t.Run("ResetPublishesNoSecondDecision", func(t *testing.T) { resetPublishesNoSecondDecision(t, open) })
	t.Run("GroupsLeaseExclusively", func(t *testing.T) { groupsLeaseExclusively(t, open(t)) })
	t.Run("GroupsDeliverEachOnce", func(t *testing.T) { groupsDeliverEachOnce(t, open(t)) })
	t.Run("GroupsAck", func(t *testing.T) { groupsAck(t, open(t)) })
	t.Run("GroupsRedeliver", func(t *testing.T) { groupsRedeliver(t, open(t)) })
	t.Run("GroupsInvalid", func(t *testing.T) { groupsInvalid(t, open(t)) })
}

// ProcessAll processes q at now in batches of batch until a Process consumes nothing, and returns
// how many events it consumed in all.
func ProcessAll(t testing.TB, b stream.Backend, q stream.Query, now int64, batch int) int {
	t.Helper()
	total := 0
	for {
		n, err := b.Process(context.Background(), q, now, batch)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}
