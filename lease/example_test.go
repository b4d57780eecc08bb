package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/store/memory"
)

func ExampleLeaser() {
	// In production the store is a shared one, such as Redis; the memory store stands in here. A
	// fixed clock makes the example reproducible; a server leaves Now unset.
	now := time.UnixMilli(1_700_000_040_000)
	shared := memory.New(memory.Config{Now: now.UnixMilli})
	defer shared.Close()
	lim, err := sluice.New(shared, sluice.MustPolicy("api",
		sluice.Limit{Strategy: sluice.TokenBucket{Capacity: 10_000, RefillPerSec: 100}}))
	if err != nil {
		panic(err)
	}
	leaser := lease.New(lim, lease.Config{MaxLease: 500, Now: func() time.Time { return now }})
	ctx := context.Background()

	// A cold key: its first check goes to the store, for its cost alone.
	d, _ := leaser.Check(ctx, "api", "tenant-7", 1)
	fmt.Printf("cold: allowed %v, remaining %d (the store's), %d store check\n", d.Allowed, d.Remaining, leaser.Stats().StoreChecks)

	// A hot key: its leases grow with its rate (here 1, 50, then MaxLease, 500) and the checks
	// between two leases are answered locally.
	for range 2_000 {
		d, _ = leaser.Check(ctx, "api", "tenant-42", 1)
	}
	// Remaining is what the store had left at the last lease plus what the lease still holds:
	// with one process and no time passing, what the key has left.
	st := leaser.Stats()
	fmt.Printf("hot: 2000 checks, %d store checks, remaining %d\n", st.StoreChecks-1, d.Remaining)

	// Close gives the lease's unspent units back to the store.
	if err := leaser.Close(ctx); err != nil {
		panic(err)
	}
	p, _ := lim.Peek(ctx, "api", "tenant-42")
	fmt.Printf("closed: %d units returned, the store has %d of 10000 left\n", leaser.Stats().Returned, p.Remaining)
	// Output:
	// cold: allowed true, remaining 9999 (the store's), 1 store check
	// hot: 2000 checks, 6 store checks, remaining 8000
	// closed: 51 units returned, the store has 8000 of 10000 left
}
