package regionsim

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
)

// RegionTotals is one region's hour: its demand, the shares each split gave it, and what each
// served of its demand (each minute, the smaller of its share and its demand).
type RegionTotals struct {
	Region                       string
	Demand                       int64
	EvenShare, RebalancedShare   int64
	ServedEven, ServedRebalanced int64
}

// RegionTotals sums the hour per region, in the order of Regions.
func (s *Simulation) RegionTotals() []RegionTotals {
	out := make([]RegionTotals, len(s.Regions))
	for i, r := range s.Regions {
		t := &out[i]
		t.Region = r
		for _, m := range s.Minutes {
			d := m.Demand[r]
			t.Demand += d
			t.EvenShare += m.Even[r]
			t.RebalancedShare += m.Rebalanced[r]
			t.ServedEven += min(m.Even[r], d)
			t.ServedRebalanced += min(m.Rebalanced[r], d)
		}
	}
	return out
}

// WriteHTML writes the hour as one HTML page that needs nothing else: a heading, the SVG of
// WriteSVG inline, the hour's totals and a table per region. Its only style is in the page, and it
// follows the reader's light or dark preference.
func (s *Simulation) WriteHTML(w io.Writer) error {
	var svg bytes.Buffer
	if err := s.WriteSVG(&svg); err != nil {
		return err
	}
	t := s.Totals()
	data := struct {
		Sim     *Simulation
		Totals  Totals
		Even    string
		Reb     string
		SVG     template.HTML
		Regions []RegionTotals
	}{s, t, percent(t.Even, t.Servable), percent(t.Rebalanced, t.Servable),
		template.HTML(svg.String()), // WriteSVG escapes every name it writes
		s.RegionTotals()}
	var page bytes.Buffer
	if err := pageTemplate.Execute(&page, data); err != nil {
		return fmt.Errorf("regionsim: writing the page: %w", err) // unreachable: the template is fixed
	}
	if _, err := page.WriteTo(w); err != nil {
		return fmt.Errorf("regionsim: writing the page: %w", err)
	}
	return nil
}

// pageTemplate is the page. The dark style overrides the SVG's presentation attributes (CSS
// wins over them), so the picture is the same one WriteSVG draws.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>sluice simulate regions: limit {{.Sim.Limit}}/min</title>
<style>
body { font-family: sans-serif; margin: 1.5rem; color: #1a1a1a; background: #fff; }
figure { margin: 0 0 1.5rem; }
svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 0 0 1.5rem; }
caption { text-align: left; font-weight: bold; padding-bottom: 0.4rem; }
th, td { padding: 0.25rem 0.75rem; border-bottom: 1px solid #ccc; }
td, thead th { text-align: right; }
th[scope=row], thead th:first-child { text-align: left; }
@media (prefers-color-scheme: dark) {
  body { color: #e6e6e6; background: #161616; }
  th, td { border-bottom-color: #444; }
  svg > rect:first-of-type { fill: #161616; }
  svg text { fill: #e6e6e6; }
  svg [stroke="black"] { stroke: #e6e6e6; }
  svg [fill="black"] { fill: #e6e6e6; }
  svg line[stroke="#e1e1e1"] { stroke: #3a3a3a; }
}
</style>
</head>
<body>
<main>
<h1>Regions: an hour of shifting demand</h1>
<p>A global limit of {{.Sim.Limit}} per minute split across {{len .Sim.Regions}} regions, evenly and rebalanced by demand every {{.Sim.Every}} min (floor {{.Sim.Floor}}).</p>
<figure>
{{.SVG}}<figcaption>Top: each region's demand, rebalanced share and even share. Bottom: all regions, what could be served and what each split served.</figcaption>
</figure>
<table>
<caption>The hour's totals</caption>
<thead>
<tr><td></td><th scope="col">Requests</th><th scope="col">Of the servable</th></tr>
</thead>
<tbody>
<tr><th scope="row">Demand</th><td>{{.Totals.Demand}}</td><td></td></tr>
<tr><th scope="row">Servable (demand capped at the limit)</th><td>{{.Totals.Servable}}</td><td></td></tr>
<tr><th scope="row">Served, even</th><td>{{.Totals.Even}}</td><td>{{.Even}}</td></tr>
<tr><th scope="row">Served, rebalanced</th><td>{{.Totals.Rebalanced}}</td><td>{{.Reb}}</td></tr>
</tbody>
</table>
<table>
<caption>Per region, summed over the hour</caption>
<thead>
<tr><th scope="col">Region</th><th scope="col">Demand</th><th scope="col">Even share</th><th scope="col">Served, even</th><th scope="col">Rebalanced share</th><th scope="col">Served, rebalanced</th></tr>
</thead>
<tbody>
{{range .Regions}}<tr><th scope="row">{{.Region}}</th><td>{{.Demand}}</td><td>{{.EvenShare}}</td><td>{{.ServedEven}}</td><td>{{.RebalancedShare}}</td><td>{{.ServedRebalanced}}</td></tr>
{{end}}</tbody>
</table>
</main>
</body>
</html>
`))
