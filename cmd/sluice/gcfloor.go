package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// gcFloor is the least the heap may grow by between two collections in sluice serve, when the
// environment sets neither GOGC nor GOMEMLIMIT. With Go's default (the heap may double), a
// service whose live heap is a few MB collects many times a second under load, each collection
// shrinking the stacks of the goroutines serving calls, which then grow them again (measured in
// docs/benchmarks.md, "Service path"). A large heap (the embedded store holding many keys) doubles
// as before.
const gcFloor = 64 << 20

var startGCFloor = sync.OnceFunc(func() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return // the operator's settings stand
	}
	retuneGC(gcFloor)
})

// retuneGC sets the GC percent that lets the heap grow by floor bytes, or double, past what the
// last collection left live, and sets it again after each collection: a cleanup runs once per
// cycle, when a collection finds its sentinel unreachable. Below 4 MB live the runtime's own
// minimum heap (4 MB × percent/100) is what the percent scales, so that is the base.
func retuneGC(floor uint64) {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := max(live[0].Value.Uint64(), 4<<20)
	debug.SetGCPercent(int(max(floor*100/base, 100)))
	runtime.AddCleanup(new(gcSentinel), retuneGC, floor)
}

// gcSentinel holds pointers so that it is not packed with other small objects, which would keep
// it alive as long as they are.
type gcSentinel [2]*byte
