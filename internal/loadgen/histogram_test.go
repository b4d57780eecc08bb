package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	// Every value falls in a bucket whose bounds hold it, buckets are contiguous and in order, and
	// a bucket is at most 1/32 of its lower bound wide.
	prevHi := int64(-1)
	for i := range NumBuckets {
		lo, hi := bucketBounds(i)
		if int64(lo) != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, prevHi+1)
		}
		if lo > 64 && float64(hi-lo+1) > float64(lo)/subBuckets {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/32 of its lower bound", i, lo, hi)
		}
		for _, v := range []uint64{lo, hi, lo + (hi-lo)/2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		prevHi = int64(hi)
		if hi == 1<<63-1 {
			return
		}
	}
	t.Fatalf("the buckets end at %d, short of the largest int64", prevHi)
}

func TestQuantile(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", []time.Duration{42}, 0.99, 42},
		{"median of 1..100", seq(1, 100, 1), 0.50, 50},
		{"p90 of 1..100, in a bucket of two [90, 91]", seq(1, 100, 1), 0.90, 91},
		{"p99 of 1..100, in a bucket of two", seq(1, 100, 1), 0.99, 99},
		{"max of 1..100", seq(1, 100, 1), 1, 100},
		{"min of 1..100", seq(1, 100, 1), 0, 1},
		// 1 ms steps: the 50th value is 50 ms, in a bucket [49.28 ms, 50.33 ms) whose upper bound is reported.
		{"median in ms", seq(time.Millisecond, 100*time.Millisecond, time.Millisecond), 0.50, 50331647},
		{"p99 capped at max", seq(time.Millisecond, 100*time.Millisecond, time.Millisecond), 0.999, 100 * time.Millisecond},
		{"a long tail", append(repeat(time.Microsecond, 99), 100*time.Microsecond), 0.99, time.Microsecond + 7},
		{"the tail itself", append(repeat(time.Microsecond, 99), 100*time.Microsecond), 1, 100 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Counts
			for _, v := range tt.values {
				c.Record(v)
			}
			if got := c.Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %v (%d), want %v (%d)", tt.q, got, got, tt.want, tt.want)
			}
		})
	}
}

// TestQuantileError checks the relative error bound against exact quantiles of random values.
func TestQuantileError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c Counts
	var h Histogram
	values := make([]time.Duration, 100000)
	for i := range values {
		values[i] = time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		c.Record(values[i])
		h.Record(values[i])
	}
	var fromH Counts
	h.AddTo(&fromH)
	if fromH != c {
		t.Fatal("Histogram and Counts disagree on the same values")
	}
	slices.Sort(values)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := values[int(q*float64(len(values)))-1]
		got := c.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subBuckets {
			t.Errorf("p%v = %v, exact %v: off by more than 1/32", q*100, got, exact)
		}
	}
}

func TestMergeSub(t *testing.T) {
	var a, b Counts
	for _, v := range seq(1, 50, 1) {
		a.Record(v)
	}
	for _, v := range seq(51, 100, 1) {
		b.Record(v)
	}
	all := a
	all.Merge(&b)
	if all.Total != 100 || all.Max != 100 || all.Quantile(0.5) != 50 {
		t.Fatalf("merged: total %d max %v median %v, want 100, 100, 50", all.Total, all.Max, all.Quantile(0.5))
	}
	all.Sub(&a)
	if all.Total != 50 || all.Quantile(0) != 51 {
		t.Fatalf("after Sub: total %d min %v, want 50, 51", all.Total, all.Quantile(0))
	}
}

func seq(from, to, step time.Duration) []time.Duration {
	var out []time.Duration
	for v := from; v <= to; v += step {
		out = append(out, v)
	}
	return out
}

func repeat(v time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = v
	}
	return out
}
