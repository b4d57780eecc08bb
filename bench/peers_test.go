package bench

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sethvargo/go-limiter"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// The benchmarks below run sluice (one sub-benchmark per strategy) and its peers side by side;
// every sub-benchmark is named sluice-<strategy>, xtime-rate or go-limiter so that the results line
// up in a table. Every check's outcome is counted and reported as allowed/op, so that a fixture that
// starts denying (a different, usually cheaper, path) shows.

// BenchmarkHotKey is one key checked b.N times in a loop by one goroutine.
func BenchmarkHotKey(b *testing.B) {
	for _, sc := range hotStrategies {
		for _, call := range sluiceCalls {
			b.Run("sluice-"+sc.name+call, func(b *testing.B) {
				lim, st := newSluice(b, sc.strategy, memory.Config{})
				defer st.Close()
				b.ReportAllocs()
				b.ResetTimer()
				allowed := hotChecks(b, lim, call)
				b.StopTimer()
				reportAllowed(b, allowed)
			})
		}
	}
	b.Run("xtime-rate", func(b *testing.B) {
		lim := newHotRate()
		b.ReportAllocs()
		var allowed int64
		b.ResetTimer()
		for range b.N {
			if lim.Allow() {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})
	b.Run("go-limiter", func(b *testing.B) {
		st := newGoLimiter(b)
		defer st.Close(ctx)
		b.ReportAllocs()
		var allowed int64
		b.ResetTimer()
		for range b.N {
			_, _, _, ok, err := st.Take(ctx, "hot")
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})
}

// BenchmarkHotKeyParallel is one key checked from GOMAXPROCS goroutines at once (run it with
// -cpu 1,2). x/time/rate shares one *rate.Limiter.
func BenchmarkHotKeyParallel(b *testing.B) {
	for _, sc := range hotStrategies {
		for _, call := range sluiceCalls {
			b.Run("sluice-"+sc.name+call, func(b *testing.B) {
				lim, st := newSluice(b, sc.strategy, memory.Config{})
				defer st.Close()
				b.ReportAllocs()
				var allowed atomic.Int64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					allowed.Add(hotChecksParallel(b, lim, call, pb))
				})
				b.StopTimer()
				reportAllowed(b, allowed.Load())
			})
		}
	}
	// floor-cas is no limiter: it is the least an exact check of one key does, on one word of state
	// alone. It loads the word, applies GCRA's admission arithmetic and compare-and-swaps the result
	// back. Its -cpu 2 ÷ -cpu 1 is what passing that word back and forth between two cores costs on
	// this machine, with nothing else in the check.
	b.Run("floor-cas", func(b *testing.B) {
		var w struct {
			_   [64]byte
			tat atomic.Uint64
			_   [64]byte
		}
		const now, t, tau = 1e12, 1e-3, 1e15 // tau so large that every check is admitted
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				for {
					old := w.tat.Load()
					tat := max(math.Float64frombits(old), now) + t
					if now < tat-tau {
						break
					}
					if w.tat.CompareAndSwap(old, math.Float64bits(tat)) {
						n++
						break
					}
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		reportAllowed(b, allowed.Load())
	})
	b.Run("xtime-rate", func(b *testing.B) {
		lim := newHotRate()
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				if lim.Allow() {
					n++
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		reportAllowed(b, allowed.Load())
	})
	b.Run("go-limiter", func(b *testing.B) {
		st := newGoLimiter(b)
		defer st.Close(ctx)
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				_, _, _, ok, err := st.Take(ctx, "hot")
				if err != nil {
					b.Error(err)
					return
				}
				if ok {
					n++
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		reportAllowed(b, allowed.Load())
	})
}

var pickerSeeds atomic.Uint64

// builder draws keys uniformly at random among the numKeys keys with its own PRNG (goroutines never
// share a lock or a cache line to pick one) and writes each in its own buffer, as a server builds a
// key from the request it has just parsed: the bytes are hot in cache, and no limiter has seen the
// string before. The string is overwritten by the next call, so a limiter may not keep it; none
// does when checking a key it already holds, and every key is inserted before the timer starts.
type builder struct {
	buf *[keyLen]byte
	r   *rand.PCG
}

func newBuilder() builder {
	b := builder{buf: new([keyLen]byte), r: rand.NewPCG(pickerSeeds.Add(1), 0x9e3779b97f4a7c15)}
	copy(b.buf[:], "user:")
	return b
}

func (b builder) next() string {
	n := b.r.Uint64() >> (64 - 20)
	for i := keyLen - 1; i >= 5; i-- {
		b.buf[i] = byte('0' + n%10)
		n /= 10
	}
	return unsafe.String(&b.buf[0], keyLen)
}

// BenchmarkManyKeys checks a key drawn at random among 1M keys, from GOMAXPROCS goroutines. Every
// key is checked once before the timer starts, so the store holds all 1M keys throughout; each timed
// check makes its key afresh, hot in cache as a just-parsed key is (see builder). The stores are built on a
// sub-benchmark's first run and shared by its repeats (-count, -cpu).
//
// sluice's store runs with its sweep off (SweepInterval -1): with a generous limit nearly every key
// is idle between two of its checks, and the sweep would drop most of the 1M keys every 10 s.
// x/time/rate is a map[string]*rate.Limiter behind one sync.Mutex, every limiter created up front:
// the usual way to use it for many keys.
func BenchmarkManyKeys(b *testing.B) {
	ks := manyKeys()
	for _, sc := range keyStrategies {
		var lim *sluice.Limiter
		var st *memory.Store
		b.Run("sluice-"+sc.name, func(b *testing.B) {
			if lim == nil {
				lim, st = newSluice(b, sc.strategy, memory.Config{SweepInterval: -1})
				for _, k := range ks {
					if _, err := lim.Check(ctx, "p", k, 1); err != nil {
						b.Fatal(err)
					}
				}
				if st.Len() != numKeys {
					b.Fatalf("store holds %d keys, want %d", st.Len(), numKeys)
				}
			}
			b.ReportAllocs()
			var allowed atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := newBuilder()
				var n int64
				for pb.Next() {
					d, err := lim.Check(ctx, "p", p.next(), 1)
					if err != nil {
						b.Error(err)
						return
					}
					if d.Allowed {
						n++
					}
				}
				allowed.Add(n)
			})
			b.StopTimer()
			reportAllowed(b, allowed.Load())
		})
		if st != nil {
			st.Close()
		}
	}

	// harness is what every sub-benchmark pays to make its key; a limiter's own cost is its ns/op
	// minus this one's.
	b.Run("harness", func(b *testing.B) {
		b.ReportAllocs()
		var sum atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			p := newBuilder()
			var n int64
			for pb.Next() {
				k := p.next()
				n += int64(k[0]) + int64(k[len(k)-1])
			}
			sum.Add(n)
		})
		b.StopTimer()
		runtime.KeepAlive(sum.Load())
	})

	var rm *rateMap
	b.Run("xtime-rate", func(b *testing.B) {
		if rm == nil {
			rm = newRateMap()
			for _, k := range ks {
				rm.allow(k)
			}
		}
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			p := newBuilder()
			var n int64
			for pb.Next() {
				if rm.allow(p.next()) {
					n++
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		reportAllowed(b, allowed.Load())
	})
	rm = nil

	var gl limiter.Store
	b.Run("go-limiter", func(b *testing.B) {
		if gl == nil {
			gl = newGoLimiter(b)
			for _, k := range ks {
				if _, _, _, _, err := gl.Take(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			p := newBuilder()
			var n int64
			for pb.Next() {
				_, _, _, ok, err := gl.Take(ctx, p.next())
				if err != nil {
					b.Error(err)
					return
				}
				if ok {
					n++
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		reportAllowed(b, allowed.Load())
	})
	if gl != nil {
		gl.Close(ctx)
	}
}

// BenchmarkStatePerKey measures the heap each key's state takes with 1M keys, reported as B/key.
// One op fills a fresh store with 1M keys (one check each): the live heap after a full GC, less
// the live heap before it (the keys themselves were generated before), divided by 1M. The keys'
// bytes are not counted: sluice holds a key of up to 16 bytes in its slot, so keyLen (16) bytes a
// key are subtracted for it (the slots left empty by the table's load stay counted). The peers keep
// the caller's strings, which were on the heap before, so nothing is subtracted for them; their
// string headers in the map are state and stay counted.
// The result does not depend on GOMAXPROCS: with -cpu 1,2 the runs at 2 are more samples.
func BenchmarkStatePerKey(b *testing.B) {
	ks := manyKeys()
	for _, sc := range keyStrategies {
		b.Run("sluice-"+sc.name, func(b *testing.B) {
			statePerKey(b, keyLen, func() func() {
				lim, st := newSluice(b, sc.strategy, memory.Config{SweepInterval: -1})
				for _, k := range ks {
					if _, err := lim.Check(ctx, "p", k, 1); err != nil {
						b.Fatal(err)
					}
				}
				if st.Len() != numKeys {
					b.Fatalf("store holds %d keys, want %d", st.Len(), numKeys)
				}
				return func() {
					runtime.KeepAlive(lim)
					st.Close()
				}
			})
		})
	}
	b.Run("xtime-rate", func(b *testing.B) {
		statePerKey(b, 0, func() func() {
			rm := newRateMap()
			for _, k := range ks {
				rm.allow(k)
			}
			if len(rm.m) != numKeys {
				b.Fatalf("map holds %d keys, want %d", len(rm.m), numKeys)
			}
			return func() { runtime.KeepAlive(rm) }
		})
	})
	b.Run("go-limiter", func(b *testing.B) {
		statePerKey(b, 0, func() func() {
			gl := newGoLimiter(b)
			for _, k := range ks {
				if _, _, _, _, err := gl.Take(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
			return func() {
				runtime.KeepAlive(gl)
				gl.Close(ctx)
			}
		})
	})
}

// statePerKey runs fill b.N times, each time measuring the live heap before it and after it, and
// reports the mean growth per key less keyBytes, the bytes of each key itself. fill returns a
// function that releases what it built; it is called only after the heap was measured, so what
// fill built is alive when it is.
func statePerKey(b *testing.B, keyBytes float64, fill func() (release func())) {
	b.ReportAllocs()
	var sum float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		before := heapAlloc()
		b.StartTimer()
		release := fill()
		b.StopTimer()
		after := heapAlloc()
		release()
		sum += float64(int64(after)-int64(before))/numKeys - keyBytes
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(sum/float64(b.N), "B/key")
}
