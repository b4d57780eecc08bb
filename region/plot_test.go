package region

import (
	"image"
	"image/color"
	"testing"
)

// TestPlotShowsShortfall checks that a region short of its demand shows as shading in its own
// tint, drawn over the demand line rather than hidden under it, and that a region never short
// shows none.
func TestPlotShowsShortfall(t *testing.T) {
	tests := []struct {
		name   string
		every  int
		demand map[string]int64
		short  map[string]bool // regions that must show shortfall
	}{
		// Demand moves from mumbai to frankfurt, virginia: with 15-minute rebalances the
		// growing regions fall well short.
		{name: "rebalanced every 15 minutes", every: 15,
			demand: map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100},
			short:  map[string]bool{"mumbai": true, "frankfurt": true, "virginia": true}},
		// Total demand of 300 fits in every share the hour over: no shortfall at all.
		{name: "demand always served", every: 1,
			demand: map[string]int64{"mumbai": 100, "frankfurt": 100, "virginia": 100},
			short:  map[string]bool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			regions := []string{"mumbai", "frankfurt", "virginia"}
			sim, err := Simulate(SimConfig{Limit: 900, Regions: regions, Demand: tt.demand, Floor: DefaultFloor, Every: tt.every})
			if err != nil {
				t.Fatal(err)
			}
			img := sim.Image()
			top := image.Rect(plotLeft+1, panel1Top, plotRight, panel1Bot)
			bottom := image.Rect(plotLeft+1, panel2Top, plotRight, panel2Bot)
			for i, r := range regions {
				n := countColor(img, top, tint(palette[i], 0.35))
				if tt.short[r] != (n > 0) {
					t.Errorf("%s: %d shortfall pixels, want some: %v", r, n, tt.short[r])
				}
			}
			if n := countColor(img, bottom, unserved); (len(tt.short) > 0) != (n > 0) {
				t.Errorf("%d unserved pixels in the fleet panel, want some: %v", n, len(tt.short) > 0)
			}
		})
	}
}

func countColor(img *image.RGBA, r image.Rectangle, col color.RGBA) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if img.RGBAAt(x, y) == col {
				n++
			}
		}
	}
	return n
}
