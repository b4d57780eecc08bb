package raster

import (
	"image"
	"image/color"
	"testing"
)

var (
	bg = color.RGBA{255, 255, 255, 255}
	fg = color.RGBA{0, 0, 0, 255}
)

func count(c *Canvas) int {
	n := 0
	b := c.Img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if c.Img.RGBAAt(x, y) == fg {
				n++
			}
		}
	}
	return n
}

func TestPolyline(t *testing.T) {
	tests := []struct {
		name        string
		pts         []image.Point
		width, dash int
		want        int // pixels painted
		ends        []image.Point
	}{
		{name: "horizontal", pts: []image.Point{{2, 5}, {11, 5}}, width: 1, want: 10, ends: []image.Point{{2, 5}, {11, 5}}},
		{name: "diagonal", pts: []image.Point{{0, 0}, {9, 9}}, width: 1, want: 10, ends: []image.Point{{0, 0}, {9, 9}}},
		{name: "corner drawn once", pts: []image.Point{{0, 0}, {4, 0}, {4, 4}}, width: 1, want: 9},
		{name: "dashed", pts: []image.Point{{0, 0}, {15, 0}}, width: 1, dash: 4, want: 8},
		{name: "thick", pts: []image.Point{{5, 5}, {5, 5}}, width: 3, want: 9},
		{name: "clipped", pts: []image.Point{{-10, 1}, {30, 1}}, width: 1, want: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(20, 20, bg)
			c.Polyline(tt.pts, fg, tt.width, tt.dash)
			if n := count(c); n != tt.want {
				t.Errorf("painted %d pixels, want %d", n, tt.want)
			}
			for _, p := range tt.ends {
				if c.Img.RGBAAt(p.X, p.Y) != fg {
					t.Errorf("end %v not painted", p)
				}
			}
		})
	}
}

func TestText(t *testing.T) {
	if w := TextWidth("AB", 2); w != 22 {
		t.Fatalf("TextWidth = %d, want 22", w)
	}
	c := New(40, 20, bg)
	c.Text(1, 1, "i", 1, fg) // drawn as I: 5 + 5 + 5 rows of one pixel
	if n := count(c); n != 11 {
		t.Fatalf("I painted %d pixels, want 11", n)
	}
	c = New(40, 20, bg)
	c.Text(0, 0, "\u00e9", 1, fg) // unknown: drawn as '?'
	if count(c) == 0 {
		t.Fatal("an unknown character drew nothing")
	}
	for r, g := range font {
		for _, row := range g {
			if row >= 1<<5 {
				t.Fatalf("glyph %q is wider than 5 pixels", r)
			}
		}
	}
}
