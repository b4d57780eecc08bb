package regionsim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The size of the picture WriteSVG draws, in CSS pixels.
const (
	Width  = 1000
	Height = 660
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
	lineHeight = 20
)

// Colors. palette colors the regions, in the order given: the usual ten-color chart set, less
// gray and green, which mean the even split and the rebalanced total.
const (
	gray     = "#808080"
	grid     = "#e1e1e1"
	rebGreen = "#00963c"
	unserved = "#fabebe"
)

var palette = []string{"#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#17becf", "#8c564b", "#e377c2", "#bcbd22"}

// WriteSVG draws the hour as a Width by Height SVG.
//
// The top panel shows each region in its own color: its demand as a thick pale line, its
// rebalanced share as a solid line, the shortfall (demand above the share) shaded between the
// two, and the even share as a gray dashed line. The bottom panel shows the whole fleet: the most
// any split could serve (demand capped at the limit) in black, what the even split served in gray
// dashes, what the rebalanced shares served in green, and what they left unserved shaded red.
// The legend on the right names the colors and ends with the hour's totals. Every mark carries a
// class (demand, share, shortfall, even, servable, served-even, served-rebalanced, unserved) and
// the region's name in data-region, so the picture can be read by a program as well.
func (s *Simulation) WriteSVG(w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", Width, Height, Width, Height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", Width, Height)
	text(b, plotLeft, 30, "start", 15, fmt.Sprintf("Limit %d/min, floor %g, rebalanced every %d min", s.Limit, s.Floor, s.Every))

	var top int64 = 1
	for _, m := range s.Minutes {
		for _, r := range s.Regions {
			top = max(top, m.Demand[r], m.Rebalanced[r], m.Even[r])
		}
	}
	p1 := panel{w: b, top: panel1Top, bot: panel1Bot, max: niceCeil(top), minutes: len(s.Minutes)}
	p1.frame("Demand and shares per region")
	// One even line stands for all: even shares differ by at most one unit.
	p1.series("even", "", func(m Minute) int64 { return m.Even[s.Regions[0]] }, s.Minutes, gray, 2, true, 1)
	for i, r := range s.Regions {
		col := palette[i%len(palette)]
		demand := func(m Minute) int64 { return m.Demand[r] }
		share := func(m Minute) int64 { return m.Rebalanced[r] }
		p1.between("shortfall", r, share, demand, s.Minutes, col, 0.35)
		p1.series("demand", r, demand, s.Minutes, col, 4, false, 0.35)
		p1.series("share", r, share, s.Minutes, col, 2, false, 1)
	}

	servable := func(m Minute) int64 {
		var d int64
		for _, v := range m.Demand {
			d += v
		}
		return min(d, s.Limit)
	}
	served := func(m Minute) int64 { return m.ServedRebalanced }
	p2 := panel{w: b, top: panel2Top, bot: panel2Bot, max: niceCeil(s.Limit), minutes: len(s.Minutes)}
	p2.frame("Served, all regions")
	p2.between("unserved", "", served, servable, s.Minutes, unserved, 1)
	p2.series("servable", "", servable, s.Minutes, "black", 1, false, 1)
	p2.series("served-even", "", func(m Minute) int64 { return m.ServedEven }, s.Minutes, gray, 2, true, 1)
	p2.series("served-rebalanced", "", served, s.Minutes, rebGreen, 2, false, 1)
	p2.xAxis()

	y := panel1Top
	for i, r := range s.Regions {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", legendLeft, y, palette[i%len(palette)])
		text(b, legendLeft+22, y+12, "start", 13, r)
		y += lineHeight
	}
	y += lineHeight / 2
	y = legend(b, y, []legendLine{
		{"demand", "black", 4, false, 0.35},
		{"rebalanced share", "black", 2, false, 1},
	})
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="16" height="14" fill="black" fill-opacity="0.35"/>`+"\n", legendLeft, y)
	text(b, legendLeft+22, y+12, "start", 13, "shortfall")
	legend(b, y+lineHeight, []legendLine{{"even share", gray, 2, true, 1}})
	y = legend(b, panel2Top, []legendLine{
		{"servable", "black", 1, false, 1},
		{"served, even", gray, 2, true, 1},
		{"served, rebalanced", rebGreen, 2, false, 1},
	})
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="16" height="14" fill="%s"/>`+"\n", legendLeft, y, unserved)
	text(b, legendLeft+22, y+12, "start", 13, "unserved, rebalanced")
	y += lineHeight * 3 / 2
	t := s.Totals()
	for _, line := range []string{
		"Served over the hour,",
		"of the servable " + fmt.Sprint(t.Servable) + ":",
		"even " + percent(t.Even, t.Servable),
		"rebalanced " + percent(t.Rebalanced, t.Servable),
	} {
		text(b, legendLeft, y+12, "start", 13, line)
		y += lineHeight
	}
	b.WriteString("</svg>\n")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("regionsim: writing the plot: %w", err)
	}
	return nil
}

// panel is one chart: values from 0 to max on the y axis, minutes on the x axis.
type panel struct {
	w        *bufio.Writer
	top, bot int
	max      int64
	minutes  int
}

func (p panel) x(minute int) float64 {
	return plotLeft + float64(minute)*(plotRight-plotLeft)/float64(max(p.minutes-1, 1))
}

func (p panel) y(v int64) float64 {
	return float64(p.bot) - float64(v)/float64(p.max)*float64(p.bot-p.top)
}

// frame draws the panel's title, grid, y-axis labels and axes.
func (p panel) frame(title string) {
	text(p.w, plotLeft, p.top-8, "start", 14, title)
	for i := range 5 {
		v := p.max * int64(i) / 4
		y := p.y(v)
		fmt.Fprintf(p.w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, y, plotRight, y, grid)
		text(p.w, plotLeft-8, int(y)+4, "end", 12, fmt.Sprint(v))
	}
	for m := 0; m < p.minutes; m += 15 {
		fmt.Fprintf(p.w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", p.x(m), p.top, p.x(m), p.bot, grid)
	}
	fmt.Fprintf(p.w, `<path d="M%d %d V%d H%d" fill="none" stroke="black"/>`+"\n", plotLeft, p.top, p.bot, plotRight)
}

// xAxis labels the minutes under the panel.
func (p panel) xAxis() {
	for m := 0; m < p.minutes; m += 15 {
		text(p.w, int(p.x(m)), p.bot+18, "middle", 12, fmt.Sprint(m))
	}
	text(p.w, plotRight, p.bot+38, "end", 12, "minute")
}

// series draws one value per minute as a polyline.
func (p panel) series(class, region string, value func(Minute) int64, minutes []Minute, col string, width int, dashed bool, opacity float64) {
	pts := make([]string, len(minutes))
	for i, m := range minutes {
		pts[i] = fmt.Sprintf("%.1f,%.1f", p.x(i), p.y(value(m)))
	}
	fmt.Fprintf(p.w, `<polyline class="%s"%s points="%s" fill="none" stroke="%s" stroke-width="%d"%s%s/>`+"\n",
		class, regionAttr(region), strings.Join(pts, " "), col, width, dash(dashed), strokeOpacity(opacity))
}

// between shades the area where hi is above lo: a polygon along max(lo, hi) and back along lo,
// so that it has no area where hi is not above lo.
func (p panel) between(class, region string, lo, hi func(Minute) int64, minutes []Minute, col string, opacity float64) {
	pts := make([]string, 0, 2*len(minutes))
	for i, m := range minutes {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.x(i), p.y(max(lo(m), hi(m)))))
	}
	for i := len(minutes) - 1; i >= 0; i-- {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.x(i), p.y(lo(minutes[i]))))
	}
	fill := ""
	if opacity < 1 {
		fill = fmt.Sprintf(` fill-opacity="%g"`, opacity)
	}
	fmt.Fprintf(p.w, `<polygon class="%s"%s points="%s" fill="%s"%s/>`+"\n", class, regionAttr(region), strings.Join(pts, " "), col, fill)
}

// legendLine is one line of a legend: a stroke as a series draws it, and its label.
type legendLine struct {
	label   string
	col     string
	width   int
	dashed  bool
	opacity float64
}

// legend draws lines from y down and returns the y below them.
func legend(w *bufio.Writer, y int, lines []legendLine) int {
	for _, k := range lines {
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%d"%s%s/>`+"\n",
			legendLeft, y+7, legendLeft+16, y+7, k.col, k.width, dash(k.dashed), strokeOpacity(k.opacity))
		text(w, legendLeft+22, y+12, "start", 13, k.label)
		y += lineHeight
	}
	return y
}

func text(w *bufio.Writer, x, y int, anchor string, size int, s string) {
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="%s" font-size="%d">%s</text>`+"\n", x, y, anchor, size, html.EscapeString(s))
}

func regionAttr(region string) string {
	if region == "" {
		return ""
	}
	return ` data-region="` + html.EscapeString(region) + `"`
}

func dash(dashed bool) string {
	if dashed {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

func strokeOpacity(o float64) string {
	if o < 1 {
		return fmt.Sprintf(` stroke-opacity="%g"`, o)
	}
	return ""
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
