// Package raster draws the few things a chart needs onto an image.RGBA with the standard library
// alone: filled rectangles, thick and dashed polylines, and text in a 5x7 bitmap font. It exists
// so that sluice simulate can write a picture without a plotting dependency.
package raster

import (
	"image"
	"image/color"
	"image/draw"
	"strings"
)

// Canvas is an image to draw on. Drawing outside it is clipped.
type Canvas struct {
	Img *image.RGBA
}

// New returns a w by h canvas filled with bg.
func New(w, h int, bg color.RGBA) *Canvas {
	c := &Canvas{Img: image.NewRGBA(image.Rect(0, 0, w, h))}
	c.Fill(c.Img.Bounds(), bg)
	return c
}

// Fill paints r.
func (c *Canvas) Fill(r image.Rectangle, col color.RGBA) {
	draw.Draw(c.Img, r, image.NewUniform(col), image.Point{}, draw.Src)
}

// dot paints a width by width square centred on (x, y).
func (c *Canvas) dot(x, y, width int, col color.RGBA) {
	lo := -(width - 1) / 2
	for dy := lo; dy < lo+width; dy++ {
		for dx := lo; dx < lo+width; dx++ {
			if image.Pt(x+dx, y+dy).In(c.Img.Rect) {
				c.Img.SetRGBA(x+dx, y+dy, col)
			}
		}
	}
}

// Line draws from p to q, width pixels thick. dash > 0 draws dash pixels on, dash off.
func (c *Canvas) Line(p, q image.Point, col color.RGBA, width, dash int) {
	c.Polyline([]image.Point{p, q}, col, width, dash)
}

// Polyline joins pts in order with Bresenham's algorithm; a dash pattern runs on across corners.
func (c *Canvas) Polyline(pts []image.Point, col color.RGBA, width, dash int) {
	step := 0
	plot := func(x, y int) {
		if dash <= 0 || (step/dash)%2 == 0 {
			c.dot(x, y, width, col)
		}
		step++
	}
	if len(pts) == 1 {
		plot(pts[0].X, pts[0].Y)
	}
	for i := 1; i < len(pts); i++ {
		x0, y0, x1, y1 := pts[i-1].X, pts[i-1].Y, pts[i].X, pts[i].Y
		dx, dy := abs(x1-x0), -abs(y1-y0)
		sx, sy := sign(x1-x0), sign(y1-y0)
		e := dx + dy
		for {
			if x0 != x1 || y0 != y1 || i == len(pts)-1 {
				plot(x0, y0) // a corner is drawn once, by the segment that starts there
			}
			if x0 == x1 && y0 == y1 {
				break
			}
			e2 := 2 * e
			if e2 >= dy {
				e += dy
				x0 += sx
			}
			if e2 <= dx {
				e += dx
				y0 += sy
			}
		}
	}
}

// Text draws s with its top-left corner at (x, y), each font pixel scale pixels square. Lower
// case is drawn as upper case; a character the font lacks is drawn as '?'.
func (c *Canvas) Text(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		g, ok := font[r]
		if !ok {
			g = font['?']
		}
		for row, bitsRow := range g {
			for colIdx := range 5 {
				if bitsRow&(1<<(4-colIdx)) != 0 {
					c.Fill(image.Rect(x+colIdx*scale, y+row*scale, x+(colIdx+1)*scale, y+(row+1)*scale), col)
				}
			}
		}
		x += Advance * scale
	}
}

// Advance is the width of one character cell, in font pixels: 5 for the glyph and 1 between.
const Advance = 6

// GlyphHeight is the height of a glyph, in font pixels.
const GlyphHeight = 7

// TextWidth is how wide Text draws s at scale, without the space after the last character.
func TextWidth(s string, scale int) int {
	n := len([]rune(s))
	if n == 0 {
		return 0
	}
	return (n*Advance - 1) * scale
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
