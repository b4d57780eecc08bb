package bench

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// heapAlloc returns the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHeapCost checks heapCostF, the bytes subtracted for each copy of a key that sluice keeps,
// against the heap: it copies many keys of one length the way the memory store does (a []byte of
// the key's length, kept by an unsafe.Pointer) and divides the growth of the live heap by their
// number.
func TestHeapCost(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates")
	}
	const n = 1 << 18
	for _, l := range []int{3, 5, 8, 11, 12, 16, 17, 24, 33, 100, 1024} {
		t.Run(fmt.Sprint(l), func(t *testing.T) {
			key := strings.Repeat("k", l)
			ptrs := make([]unsafe.Pointer, n)
			before := heapAlloc()
			for i := range ptrs {
				b := make([]byte, len(key))
				copy(b, key)
				ptrs[i] = unsafe.Pointer(&b[0])
			}
			after := heapAlloc()
			runtime.KeepAlive(ptrs)
			got := float64(after-before) / n
			t.Logf("%d-byte keys: %.2f B per copy on the heap, heapCostF %.2f", l, got, heapCostF(l))
			if want := heapCostF(l); math.Abs(got-want) > 0.05*want+0.1 {
				t.Errorf("%d-byte keys: heap grew %.2f B per copy, heapCostF says %.2f", l, got, want)
			}
		})
	}
}
