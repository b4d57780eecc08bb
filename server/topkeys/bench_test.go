package topkeys

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkObserve is the hot path, from one goroutine and from GOMAXPROCS at once.
//
// cpu-ns/op is the CPU time of all threads per Observe: on a machine others share, ns/op counts
// the time the benchmark waited for a CPU too. On an idle machine, parallel's ns/op would be its
// cpu-ns/op over GOMAXPROCS.
//
// serial and parallel measure Observe alone, what a check pays: no drain goroutine competes for
// the CPUs, and the benchmark empties the stripes itself (of 16384 events here) every 8192 events
// a goroutine, about 0.2 ns an event, so that none is dropped. With +drain the Tracker's own
// goroutine drains them as in the service, at its worst: 1024 keys in turn, so that every event
// evicts a counter. On a machine of few cores it takes a core from the callers, and what it cannot
// keep up with is dropped (drops/op), which takes Observe's slower path.
func BenchmarkObserve(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	run := func(b *testing.B, parallel, drain bool) {
		kn := knobs{events: stripeEvents}
		if !drain {
			kn = knobs{events: 1 << 14, manual: true}
		}
		t, err := newTracker(Config{}, kn)
		if err != nil {
			b.Fatal(err)
		}
		defer t.Close()
		observe := func(i int) {
			if !drain && i&(1<<13-1) == 0 {
				discard(t)
			}
			t.Observe("api", keys[i&1023], i&7 == 0)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuTime()
		if parallel {
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					observe(i)
				}
			})
		} else {
			for i := 0; b.Loop(); i++ {
				observe(i)
			}
		}
		b.StopTimer()
		reportCPU(b, cpu)
		b.ReportMetric(float64(t.Dropped())/float64(b.N), "drops/op")
	}
	b.Run("serial", func(b *testing.B) { run(b, false, false) })
	b.Run("parallel", func(b *testing.B) { run(b, true, false) })
	b.Run("serial+drain", func(b *testing.B) { run(b, false, true) })
	b.Run("parallel+drain", func(b *testing.B) { run(b, true, true) })
}

// discard empties every stripe, dropping its events uncounted.
func discard(t *Tracker) {
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		clear(s.buf[:s.n])
		s.n = 0
		s.mu.Unlock()
	}
}

// BenchmarkSketchAdd updates a full sketch: a key it tracks (no allocation), and a key it does not,
// which takes the minimum's counter (the key's clone is the one allocation).
func BenchmarkSketchAdd(b *testing.B) {
	for _, k := range []int{DefaultCapacity, maxCapacity} {
		keys := make([]string, 4*k)
		for i := range keys {
			keys[i] = fmt.Sprintf("tenant-%d", i)
		}
		b.Run(fmt.Sprintf("k=%d/tracked", k), func(b *testing.B) {
			s := newSketch(k)
			for _, key := range keys[:k] {
				s.Add(key, 1)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for i := 0; b.Loop(); i++ {
				s.Add(keys[i%k], 1)
			}
			reportCPU(b, cpu)
		})
		b.Run(fmt.Sprintf("k=%d/new", k), func(b *testing.B) {
			s := newSketch(k)
			b.ReportAllocs()
			cpu := cpuTime()
			for i := 0; b.Loop(); i++ {
				s.Add(keys[i%len(keys)], 1) // 4k keys round robin: each one evicted before it returns
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkDrain is the drain goroutine's cost per event: a check counted in both windows.
func BenchmarkDrain(b *testing.B) {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	ws := newWindows(DefaultCapacity)
	b.ReportAllocs()
	cpu := cpuTime()
	for i := 0; b.Loop(); i++ {
		ws.add(1_764_672_000_000, "api", keys[i&4095>>(i&3)], i&7 == 0) // skewed: low keys are hot
	}
	reportCPU(b, cpu)
}

// reportCPU reports the CPU time the process used since start, per op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkTop is a console query: the hour's twelve full buckets merged, top 10.
func BenchmarkTop(b *testing.B) {
	ws := newWindows(DefaultCapacity)
	const now = 1_764_672_000_000
	for i := range 200_000 {
		ws.add(now-int64(i%hourBuckets)*hourBucketMs, "api", fmt.Sprint("k", i%5000), i%3 == 0)
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		ws.top(now, "api", Hour, 10)
	}
	reportCPU(b, cpu)
}

// BenchmarkMemory reports the heap a full sketch takes per counter, keys of 16 bytes included.
func BenchmarkMemory(b *testing.B) {
	for _, k := range []int{DefaultCapacity, maxCapacity} {
		b.Run(fmt.Sprint("k=", k), func(b *testing.B) {
			b.ReportMetric(sketchBytes(k, 16), "B/counter")
		})
	}
}

// sketchBytes measures the live heap of full sketches of k counters and keys of keyLen bytes, per
// counter.
func sketchBytes(k, keyLen int) float64 {
	const n = 64
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sketches := make([]*sketch, n)
	for i := range sketches {
		s := newSketch(k)
		for j := range 2 * k { // past full: the map has seen evictions too
			s.Add(fmt.Sprintf("%0*d", keyLen, i*k*2+j), 1)
		}
		sketches[i] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(sketches)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n*k)
}
