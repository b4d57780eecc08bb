package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// The GC percent lets the heap grow by the floor, and is set again after every collection.
func TestRetuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	retuneGC(64 << 20)
	if got := debug.SetGCPercent(7); got < 100 {
		t.Fatalf("GC percent %d after retuneGC, want at least 100", got)
	}
	runtime.GC()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := debug.SetGCPercent(7)
		if got != 7 {
			if got < 100 {
				t.Fatalf("GC percent %d after a collection, want at least 100", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the GC percent was not set again after a collection")
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
