package region

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/region/internal/raster"
)

// The size of the picture WritePNG draws, in pixels.
const (
	PlotWidth  = 1000
	PlotHeight = 660
)

// The picture's layout: two panels on the left sharing the minute axis, the legend on the right.
const (
	plotLeft   = 80
	plotRight  = 720
	panel1Top  = 70
	panel1Bot  = 330
	panel2Top  = 380
	panel2Bot  = 600
	legendLeft = 745
	textScale  = 2
	lineHeight = (raster.GlyphHeight + 4) * textScale
)

var (
	white    = color.RGBA{255, 255, 255, 255}
	black    = color.RGBA{0, 0, 0, 255}
	gray     = color.RGBA{128, 128, 128, 255}
	grid     = color.RGBA{225, 225, 225, 255}
	rebGreen = color.RGBA{0, 150, 60, 255}
	unserved = color.RGBA{250, 190, 190, 255}
	// palette colors the regions, in the order given: the usual ten-color chart set, less gray
	// and green, which mean the even split and the rebalanced total.
	palette = []color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {148, 103, 189, 255}, {214, 39, 40, 255},
		{23, 190, 207, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {188, 189, 34, 255},
	}
)

// WritePNG draws the hour (see Image) as a PNG.
func (s *Simulation) WritePNG(w io.Writer) error {
	if err := png.Encode(w, s.Image()); err != nil {
		return fmt.Errorf("region: writing the plot: %w", err)
	}
	return nil
}

// Image draws the hour as a PlotWidth by PlotHeight picture.
//
// The top panel shows each region in its own color: its demand as a thick pale line, its
// rebalanced share as a solid line drawn over it, and the shortfall (demand above the share)
// shaded between the two, over the demand line, and the even share as a gray dashed line. The bottom panel shows the whole
// fleet: the most any split could serve (demand capped at the limit) in black, what the even
// split served in gray dashes, what the rebalanced shares served in green, and what they
// left unserved shaded red. The legend on the right names the regions' colors and the line
// styles; the x axis is the minute.
func (s *Simulation) Image() *image.RGBA {
	c := raster.New(PlotWidth, PlotHeight, white)
	c.Text(plotLeft, 10, fmt.Sprintf("LIMIT %d/MIN  FLOOR %g  REBALANCE EVERY %d MIN", s.Limit, s.Floor, s.Every), textScale, black)

	// Top panel: per region.
	var top int64 = 1
	for _, m := range s.Minutes {
		for _, r := range s.Regions {
			top = max(top, m.Demand[r], m.Rebalanced[r], m.Even[r])
		}
	}
	p1 := panel{c: c, top: panel1Top, bot: panel1Bot, max: niceCeil(top), minutes: len(s.Minutes)}
	p1.frame("DEMAND AND SHARES PER REGION")
	// One even line stands for all: even shares differ by at most one unit.
	p1.series(func(m Minute) int64 { return m.Even[s.Regions[0]] }, s.Minutes, gray, 2, 6)
	// Demand, then the shortfall over it, then shares on top: the shortfall is what must show.
	for i, r := range s.Regions {
		p1.series(func(m Minute) int64 { return m.Demand[r] }, s.Minutes, tint(palette[i%len(palette)], 0.6), 3, 0)
	}
	for i, r := range s.Regions {
		p1.between(func(m Minute) int64 { return m.Rebalanced[r] }, func(m Minute) int64 { return m.Demand[r] }, s.Minutes, tint(palette[i%len(palette)], 0.35))
	}
	for i, r := range s.Regions {
		p1.series(func(m Minute) int64 { return m.Rebalanced[r] }, s.Minutes, palette[i%len(palette)], 2, 0)
	}

	// Bottom panel: the fleet.
	servable := func(m Minute) int64 {
		var d int64
		for _, v := range m.Demand {
			d += v
		}
		return min(d, s.Limit)
	}
	p2 := panel{c: c, top: panel2Top, bot: panel2Bot, max: niceCeil(s.Limit), minutes: len(s.Minutes)}
	p2.frame("SERVED, ALL REGIONS")
	p2.between(func(m Minute) int64 { return m.ServedRebalanced }, servable, s.Minutes, unserved)
	p2.series(servable, s.Minutes, black, 1, 0)
	p2.series(func(m Minute) int64 { return m.ServedEven }, s.Minutes, gray, 2, 6)
	p2.series(func(m Minute) int64 { return m.ServedRebalanced }, s.Minutes, rebGreen, 2, 0)
	p2.xAxis()

	// Legend.
	y := panel1Top
	for i, r := range s.Regions {
		c.Fill(image.Rect(legendLeft, y, legendLeft+14, y+14), palette[i%len(palette)])
		c.Text(legendLeft+22, y, clip(r, 18), textScale, black)
		y += lineHeight
	}
	y += lineHeight / 2
	y = legend(c, y, []legendLine{
		{"DEMAND", tint(black, 0.6), 3, 0},
		{"REBALANCED SHARE", black, 2, 0},
	})
	c.Fill(image.Rect(legendLeft, y, legendLeft+16, y+14), tint(black, 0.35))
	c.Text(legendLeft+22, y, "SHORTFALL", textScale, black)
	legend(c, y+lineHeight, []legendLine{{"EVEN SHARE", gray, 2, 6}})
	y = legend(c, panel2Top, []legendLine{
		{"SERVABLE", black, 1, 0},
		{"SERVED, EVEN", gray, 2, 6},
		{"SERVED, REBALANCED", rebGreen, 2, 0},
	})
	c.Fill(image.Rect(legendLeft, y, legendLeft+16, y+14), unserved)
	c.Text(legendLeft+22, y, "UNSERVED, REB.", textScale, black)
	y += lineHeight
	t := s.Totals()
	y += lineHeight / 2
	for _, line := range []string{
		"HOUR SERVED:",
		fmt.Sprintf("EVEN %s", percent(t.Even, t.Servable)),
		fmt.Sprintf("REBALANCED %s", percent(t.Rebalanced, t.Servable)),
		"OF SERVABLE",
	} {
		c.Text(legendLeft, y, line, textScale, black)
		y += lineHeight
	}

	return c.Img
}

// panel is one chart: values from 0 to max on the y axis, minutes on the x axis.
type panel struct {
	c        *raster.Canvas
	top, bot int
	max      int64
	minutes  int
}

func (p panel) x(minute int) int {
	return plotLeft + minute*(plotRight-plotLeft)/max(p.minutes-1, 1)
}

func (p panel) y(v int64) int {
	return p.yf(float64(v))
}

func (p panel) yf(v float64) int {
	return p.bot - int(v/float64(p.max)*float64(p.bot-p.top))
}

// frame draws the panel's title, grid, y-axis labels and border.
func (p panel) frame(title string) {
	p.c.Text(plotLeft, p.top-lineHeight, title, textScale, black)
	for i := range 5 {
		v := p.max * int64(i) / 4
		y := p.y(v)
		p.c.Line(image.Pt(plotLeft, y), image.Pt(plotRight, y), grid, 1, 0)
		label := strconv.FormatInt(v, 10)
		p.c.Text(plotLeft-8-raster.TextWidth(label, textScale), y-raster.GlyphHeight*textScale/2, label, textScale, black)
	}
	for m := 0; m < p.minutes; m += 15 {
		p.c.Line(image.Pt(p.x(m), p.top), image.Pt(p.x(m), p.bot), grid, 1, 0)
	}
	p.c.Line(image.Pt(plotLeft, p.bot), image.Pt(plotRight, p.bot), black, 1, 0)
	p.c.Line(image.Pt(plotLeft, p.top), image.Pt(plotLeft, p.bot), black, 1, 0)
}

// xAxis labels the minutes under the panel.
func (p panel) xAxis() {
	for m := 0; m < p.minutes; m += 15 {
		label := strconv.Itoa(m)
		p.c.Text(p.x(m)-raster.TextWidth(label, textScale)/2, p.bot+8, label, textScale, black)
	}
	p.c.Text(plotRight-raster.TextWidth("MINUTE", textScale), p.bot+8+lineHeight, "MINUTE", textScale, black)
}

// series draws one value per minute as a polyline.
func (p panel) series(value func(Minute) int64, minutes []Minute, col color.RGBA, width, dash int) {
	pts := make([]image.Point, len(minutes))
	for i, m := range minutes {
		pts[i] = image.Pt(p.x(i), p.y(value(m)))
	}
	p.c.Polyline(pts, col, width, dash)
}

// between shades, column by column, where hi is above lo, following the straight lines series
// draws between minutes.
func (p panel) between(lo, hi func(Minute) int64, minutes []Minute, col color.RGBA) {
	if len(minutes) < 2 {
		return
	}
	for x := plotLeft; x <= plotRight; x++ {
		pos := float64(x-plotLeft) * float64(len(minutes)-1) / float64(plotRight-plotLeft)
		i := min(int(pos), len(minutes)-2)
		f := pos - float64(i)
		at := func(v func(Minute) int64) float64 {
			return float64(v(minutes[i]))*(1-f) + float64(v(minutes[i+1]))*f
		}
		if l, h := at(lo), at(hi); h > l {
			p.c.Fill(image.Rect(x, p.yf(h), x+1, p.yf(l)+1), col)
		}
	}
}

// tint mixes col with white: 0 is col, 1 white.
func tint(col color.RGBA, white float64) color.RGBA {
	mix := func(v uint8) uint8 { return uint8(float64(v) + (255-float64(v))*white) }
	return color.RGBA{mix(col.R), mix(col.G), mix(col.B), 255}
}

// niceCeil is the smallest of 1, 2, 4, 5 or 8 times a power of ten that is at least v: a round
// top for an axis labelled in quarters.
func niceCeil(v int64) int64 {
	for step := int64(1); step <= math.MaxInt64/10; step *= 10 {
		for _, f := range []int64{1, 2, 4, 5, 8} {
			if f*step >= v {
				return f * step
			}
		}
	}
	return v
}

func percent(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "."
	}
	return s
}

// legendLine is one line of a legend: a stroke as a series draws it, and its label.
type legendLine struct {
	label       string
	col         color.RGBA
	width, dash int
}

// legend draws lines from y down and returns the y below them.
func legend(c *raster.Canvas, y int, lines []legendLine) int {
	for _, k := range lines {
		c.Line(image.Pt(legendLeft, y+7), image.Pt(legendLeft+16, y+7), k.col, k.width, k.dash)
		c.Text(legendLeft+22, y, k.label, textScale, black)
		y += lineHeight
	}
	return y
}
