package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram is log-linear: values below 2·subBuckets fall in buckets of width 1; above, every
// power of two is split into subBuckets equal buckets. With 32 sub-buckets a bucket's width is at
// most 1/32 of its lower bound, so a quantile read as a bucket's upper bound is at most ~3% high.
const (
	subBits    = 5
	subBuckets = 1 << subBits
	// NumBuckets covers every non-negative int64 (nanoseconds: ~292 years).
	NumBuckets = (64-subBits-1)*subBuckets + 2*subBuckets
)

// bucketOf returns the bucket of v (v ≥ 0).
func bucketOf(v uint64) int {
	if v < 2*subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // ≥ 1; v>>shift is in [subBuckets, 2·subBuckets)
	return shift*subBuckets + int(v>>shift)
}

// bucketBounds returns the smallest and largest value that fall in bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*subBuckets {
		return uint64(i), uint64(i)
	}
	shift := i/subBuckets - 1
	m := uint64(i - shift*subBuckets)
	return m << shift, (m+1)<<shift - 1
}

// Histogram records durations into fixed log-linear buckets. It is written by one goroutine (a
// worker) and may be read concurrently by Snapshot: the counters are atomics, uncontended on the
// writer's side, so recording takes no lock and never waits.
type Histogram struct {
	counts [NumBuckets]atomic.Uint64
	max    atomic.Int64
}

// Record adds one duration. Only one goroutine may call Record on a Histogram.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(uint64(v))].Add(1)
	if v > h.max.Load() {
		h.max.Store(v) // single writer: a load and a store suffice
	}
}

// AddTo adds the histogram's current counts to s.
func (h *Histogram) AddTo(s *Counts) {
	for i := range h.counts {
		if c := h.counts[i].Load(); c != 0 {
			s.Buckets[i] += c
			s.Total += c
		}
	}
	s.Max = max(s.Max, time.Duration(h.max.Load()))
}

// Counts is a plain copy of one or more histograms, for merging and reading quantiles.
type Counts struct {
	Buckets [NumBuckets]uint64
	Total   uint64
	Max     time.Duration // the largest value recorded; not reduced by Sub
}

// Record adds one duration to c.
func (c *Counts) Record(d time.Duration) {
	c.Buckets[bucketOf(uint64(max(d, 0)))]++
	c.Total++
	c.Max = max(c.Max, d)
}

// Merge adds o's counts to c.
func (c *Counts) Merge(o *Counts) {
	for i, n := range o.Buckets {
		c.Buckets[i] += n
	}
	c.Total += o.Total
	c.Max = max(c.Max, o.Max)
}

// Sub removes an earlier snapshot's counts from c, leaving what was recorded in between.
func (c *Counts) Sub(earlier *Counts) {
	for i, n := range earlier.Buckets {
		c.Buckets[i] -= n
	}
	c.Total -= earlier.Total
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the recorded values: the upper bound of the
// bucket holding the ⌈q·n⌉-th smallest value, never more than Max. Values below 64 ns are exact;
// above, the answer is at most 1/32 above the true value. It is 0 with nothing recorded.
func (c *Counts) Quantile(q float64) time.Duration {
	if c.Total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(c.Total)))
	rank = min(max(rank, 1), c.Total)
	var seen uint64
	for i, n := range c.Buckets {
		seen += n
		if seen >= rank {
			_, hi := bucketBounds(i)
			if c.Max > 0 && time.Duration(hi) > c.Max {
				return c.Max
			}
			return time.Duration(hi)
		}
	}
	return c.Max
}
