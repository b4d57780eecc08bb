package sluice

import "testing"

// Goroutines started together get stacks next to each other, 2 KiB apart at first; their checks
// must count in different stripes, or two cores write one cache line on every check.
func TestNeighbouringStacksCountApart(t *testing.T) {
	for _, base := range []uintptr{0xc000000000, 0xc000123800, 0x7f12_3456_7800, 1 << 40} {
		for i := range uintptr(64) {
			a, b := base+i*2048, base+(i+1)*2048
			if stripeOf(a) == stripeOf(b) {
				t.Errorf("stacks at %#x and %#x share stripe %d", a, b, stripeOf(a))
			}
		}
	}
}
