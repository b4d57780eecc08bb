package algo

import (
	"math"
	"testing"
)

// TestWhole: whole, which decisions report Remaining with, is max(floor(x), 0) for every x,
// fractions and values below zero included.
func TestWhole(t *testing.T) {
	for _, x := range []float64{0, math.Copysign(0, -1), 0.25, 0.999, 1, 1.5, 41.9999, 1e15 + 0.5, 1 << 62,
		-0.25, -0.999, -1, -1.5, -1e15, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, want := whole(x), max(int64(math.Floor(x)), 0); got != want {
			t.Errorf("whole(%v) = %d, want %d", x, got, want)
		}
	}
}
