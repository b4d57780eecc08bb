package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/sluicehq/sluice/internal/regionsim"
	"github.com/sluicehq/sluice/region"
)

// issueExample is docs/regions.md's example.
var issueExample = []string{"simulate", "regions", "--limit", "900", "--demand", "mumbai=600,frankfurt=200,virginia=100"}

func TestSimulateRegions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string   // the whole of stdout, when set
		stderr []string // substrings of stderr
	}{
		{
			name: "docs/regions.md's example",
			args: issueExample,
			stdout: "mumbai even=300 rebalanced=600\n" +
				"frankfurt even=300 rebalanced=200\n" +
				"virginia even=300 rebalanced=100\n" +
				"served: even=600 rebalanced=900\n",
		},
		{
			name: "order given, floor, spare capacity",
			args: []string{"simulate", "regions", "--limit", "1000", "--floor", "0.3", "--demand", " zurich = 10 , austin=200,bogota=0"},
			// base 100 each; 100 more for austin; the 600 left spread 200 each.
			stdout: "zurich even=333 rebalanced=300\n" +
				"austin even=334 rebalanced=400\n" +
				"bogota even=333 rebalanced=300\n" +
				"served: even=210 rebalanced=210\n",
		},
		{
			name: "no floor",
			args: []string{"simulate", "regions", "--limit", "10", "--floor", "0", "--demand", "a=10,b=0"},
			stdout: "a even=5 rebalanced=10\n" +
				"b even=5 rebalanced=0\n" +
				"served: even=5 rebalanced=10\n",
		},
		{name: "help", args: []string{"simulate", "-h"}, stdout: simulateUsage},
		{name: "no simulation", args: []string{"simulate"}, code: 2, stderr: []string{"usage: sluice simulate regions"}},
		{name: "unknown simulation", args: []string{"simulate", "cities"}, code: 2, stderr: []string{`unknown simulation "cities"`}},
		{name: "no limit", args: []string{"simulate", "regions", "--demand", "a=1"}, code: 2, stderr: []string{"--limit is required"}},
		{name: "zero limit", args: []string{"simulate", "regions", "--limit", "0", "--demand", "a=1"}, code: 2, stderr: []string{"--limit: must be from 1"}},
		{name: "limit above 2^53", args: []string{"simulate", "regions", "--limit", "9007199254740993", "--demand", "a=1"}, code: 2, stderr: []string{"--limit"}},
		{name: "limit not a number", args: []string{"simulate", "regions", "--limit", "lots", "--demand", "a=1"}, code: 2, stderr: []string{"-limit"}},
		{name: "no demand", args: []string{"simulate", "regions", "--limit", "9"}, code: 2, stderr: []string{"--demand is required"}},
		{name: "empty demand", args: []string{"simulate", "regions", "--limit", "9", "--demand", ""}, code: 2, stderr: []string{"--demand: no regions"}},
		{name: "demand without a value", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1,b"}, code: 2, stderr: []string{"--demand: item 2", "REGION=N"}},
		{name: "negative demand", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=-1"}, code: 2, stderr: []string{"--demand: region a"}},
		{name: "fractional demand", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1.5"}, code: 2, stderr: []string{"--demand: region a"}},
		{name: "duplicate region", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1,a=2"}, code: 2, stderr: []string{`--demand: region "a" is given twice`}},
		{name: "bad region name", args: []string{"simulate", "regions", "--limit", "9", "--demand", "new york=1"}, code: 2, stderr: []string{"--demand: item 1", "letters, digits"}},
		{name: "empty region name", args: []string{"simulate", "regions", "--limit", "9", "--demand", "=1"}, code: 2, stderr: []string{"--demand: item 1"}},
		{name: "total demand above 2^53", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=9007199254740992,b=1"}, code: 2, stderr: []string{"--demand: the total"}},
		{name: "floor of 1", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1", "--floor", "1"}, code: 2, stderr: []string{"--floor: must be at least 0 and below 1"}},
		{name: "negative floor", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1", "--floor", "-0.5"}, code: 2, stderr: []string{"--floor"}},
		{name: "NaN floor", args: []string{"simulate", "regions", "--limit", "9", "--demand", "a=1", "--floor", "NaN"}, code: 2, stderr: []string{"--floor"}},
		{name: "extra arguments", args: append(issueExample, "now"), code: 2, stderr: []string{`unexpected arguments ["now"]`}},
		{name: "unknown flag", args: []string{"simulate", "regions", "--regions", "a"}, code: 2, stderr: []string{"-regions"}},
		{name: "plot to another format", args: append(issueExample, "--plot", filepath.Join(dir, "p.png")), code: 2, stderr: []string{"--plot: cannot write .png: the plot is an SVG or an HTML page, want FILE.svg or FILE.html"}},
		{name: "plot without an extension", args: append(issueExample, "--plot", filepath.Join(dir, "plot")), code: 2, stderr: []string{"--plot:", "no extension"}},
		{name: "plot into a missing directory", args: append(issueExample, "--plot", filepath.Join(dir, "missing", "p.svg")), code: 2, stderr: []string{"--plot:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout.String(), stderr.String())
			}
			if tt.code == 0 && stdout.String() != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), tt.stdout)
			}
			if tt.code != 0 && stdout.Len() > 0 {
				t.Errorf("stdout on failure:\n%s", stdout.String())
			}
			assertContains(t, "stderr", stderr.String(), tt.stderr)
		})
	}
}

func TestSimulateRegionsPlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regions.svg")
	var stdout, stderr bytes.Buffer
	if code := run(append(issueExample, "--plot", path), &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	if !strings.HasSuffix(stdout.String(), "served: even=600 rebalanced=900\n") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	assertContains(t, "stderr", stderr.String(), []string{"wrote " + path})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		XMLName xml.Name
		Width   int `xml:"width,attr"`
		Height  int `xml:"height,attr"`
	}
	if err := xml.Unmarshal(b, &root); err != nil || root.XMLName.Local != "svg" {
		t.Fatalf("the plot is not an SVG (%v): %.100s", err, b)
	}
	if root.Width != regionsim.Width || root.Height != regionsim.Height {
		t.Errorf("the plot is %dx%d, want %dx%d", root.Width, root.Height, regionsim.Width, regionsim.Height)
	}
	// The help promises the size, and the legend names every region.
	if size := fmt.Sprintf("%dx%d", regionsim.Width, regionsim.Height); !strings.Contains(simulateUsage, size) {
		t.Errorf("the usage does not give the plot's size %s", size)
	}
	for _, r := range []string{"mumbai", "frankfurt", "virginia"} {
		if !strings.Contains(string(b), ">"+r+"</text>") {
			t.Errorf("the legend does not name %s", r)
		}
	}
}

func TestSimulateRegionsPlotFormat(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		wrote bool // false: refused before running
	}{
		{name: "svg", file: "p.svg", wrote: true},
		{name: "upper-case SVG", file: "p.SVG", wrote: true},
		{name: "html", file: "p.html", wrote: true},
		{name: "upper-case HTML", file: "p.HTML", wrote: true},
		{name: "htm", file: "p.htm"},
		{name: "xhtml", file: "p.xhtml"},
		{name: "svg then html in the directory", file: filepath.Join("d.svg", "p.txt")},
		{name: "png", file: "p.png"},
		{name: "jpg", file: "p.jpg"},
		{name: "no extension", file: "p"},
		{name: "a dot only in the directory", file: filepath.Join("d.svg", "p")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "d.svg"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tt.file)
			var stdout, stderr bytes.Buffer
			code := run(append(issueExample, "--plot", path), &stdout, &stderr)
			if !tt.wrote {
				if code != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), "--plot:") {
					t.Fatalf("exit %d, stdout %q, stderr %q: want 2 and an error naming --plot", code, stdout.String(), stderr.String())
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a refused plot left a file: %v", err)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := "<svg "
			if strings.EqualFold(filepath.Ext(tt.file), ".html") {
				want = "<!DOCTYPE html>"
			}
			if !bytes.HasPrefix(b, []byte(want)) {
				t.Fatalf("%s starts %.20q, want %q", tt.file, b, want)
			}
		})
	}
}

// TestSimulateRegionsPlotHTML reads the page --plot FILE.html writes as a browser would: the
// picture, the tables that say the same in numbers, and nothing fetched from elsewhere.
func TestSimulateRegionsPlotHTML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regions.html")
	var stdout, stderr bytes.Buffer
	if code := run(append(issueExample, "--plot", path), &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	assertWellFormed(t, b)
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := regionsim.Simulate(regionsim.Config{Limit: 900, Regions: []string{"mumbai", "frankfurt", "virginia"},
		Demand: map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100}, Floor: region.DefaultFloor})
	if err != nil {
		t.Fatal(err)
	}
	tot := sim.Totals()
	tests := []struct {
		name  string
		check func(doc *html.Node) error
	}{
		{"a language and a title", func(doc *html.Node) error {
			if h := find(doc, elem("html")); h == nil || attr(h, "lang") != "en" {
				return errors.New("no <html lang=en>")
			}
			if title := find(doc, elem("title")); title == nil || !strings.Contains(textOf(title), "900") {
				return errors.New("no title naming the limit")
			}
			return nil
		}},
		{"a heading", func(doc *html.Node) error {
			if h := find(doc, elem("h1")); h == nil || strings.TrimSpace(textOf(h)) == "" {
				return errors.New("no <h1>")
			}
			return nil
		}},
		{"the SVG inline", func(doc *html.Node) error {
			svg := find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "svg" && n.Namespace == "svg" })
			if svg == nil {
				return errors.New("no inline <svg>")
			}
			if w := attr(svg, "width"); w != strconv.Itoa(regionsim.Width) {
				return fmt.Errorf("svg width %q", w)
			}
			if n := len(findAll(svg, func(n *html.Node) bool { return attr(n, "class") == "share" })); n != 3 {
				return fmt.Errorf("%d share lines, want 3", n)
			}
			return nil
		}},
		{"the totals table", func(doc *html.Node) error {
			rows := tableRows(doc, "The hour's totals")
			want := map[string]string{
				"Demand":             strconv.FormatInt(tot.Demand, 10),
				"Served, even":       strconv.FormatInt(tot.Even, 10),
				"Served, rebalanced": strconv.FormatInt(tot.Rebalanced, 10),
			}
			return rowsHave(rows, want)
		}},
		{"the regions table", func(doc *html.Node) error {
			rows := tableRows(doc, "Per region, summed over the hour")
			want := map[string]string{}
			for _, rt := range sim.RegionTotals() {
				want[rt.Region] = strconv.FormatInt(rt.Demand, 10)
			}
			if err := rowsHave(rows, want); err != nil {
				return err
			}
			if cols := findAll(doc, func(n *html.Node) bool { return n.Data == "th" && attr(n, "scope") == "col" }); len(cols) < 6 {
				return fmt.Errorf("%d column headers with scope=col, want 6 or more", len(cols))
			}
			return nil
		}},
		{"light and dark", func(doc *html.Node) error {
			style := find(doc, elem("style"))
			if style == nil || !strings.Contains(textOf(style), "prefers-color-scheme: dark") {
				return errors.New("no dark style")
			}
			return nil
		}},
		{"nothing fetched", func(doc *html.Node) error {
			for _, n := range findAll(doc, func(n *html.Node) bool { return n.Type == html.ElementNode }) {
				switch n.Data {
				case "script", "link", "img", "iframe", "object", "embed", "image", "use":
					return fmt.Errorf("a <%s> element", n.Data)
				}
				for _, a := range n.Attr {
					if (a.Key == "src" || a.Key == "href") && a.Val != "" {
						return fmt.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
					}
				}
			}
			if style := find(doc, elem("style")); style != nil && (strings.Contains(textOf(style), "url(") || strings.Contains(textOf(style), "@import")) {
				return errors.New("the style fetches something")
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.check(doc); err != nil {
				t.Error(err)
			}
		})
	}
}

// assertWellFormed fails unless b tokenizes to its end as HTML, its elements closed in order
// (void elements and the inline SVG's self-closed ones aside).
func assertWellFormed(t *testing.T, b []byte) {
	t.Helper()
	void := map[string]bool{"meta": true, "br": true, "hr": true, "img": true, "link": true, "input": true}
	var open []string
	z := html.NewTokenizer(bytes.NewReader(b))
	for {
		switch z.Next() {
		case html.ErrorToken:
			if z.Err() != io.EOF {
				t.Fatalf("the page does not tokenize: %v", z.Err())
			}
			if len(open) > 0 {
				t.Fatalf("the page ends with %q still open", open)
			}
			return
		case html.StartTagToken:
			if name, _ := z.TagName(); !void[string(name)] {
				open = append(open, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(open) == 0 || open[len(open)-1] != string(name) {
				t.Fatalf("</%s> closes %q", name, open)
			}
			open = open[:len(open)-1]
		}
	}
}

func elem(name string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == name }
}

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if all := findAll(n, match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if match(d) {
			out = append(out, d)
		}
	}
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// tableRows maps the row header (th scope=row) of each row of the table captioned caption to
// the row's first cell.
func tableRows(doc *html.Node, caption string) map[string]string {
	rows := map[string]string{}
	for _, table := range findAll(doc, elem("table")) {
		if c := find(table, elem("caption")); c == nil || textOf(c) != caption {
			continue
		}
		for _, tr := range findAll(table, elem("tr")) {
			th := find(tr, func(n *html.Node) bool { return n.Data == "th" && attr(n, "scope") == "row" })
			td := find(tr, elem("td"))
			if th != nil && td != nil {
				rows[textOf(th)] = textOf(td)
			}
		}
	}
	return rows
}

func rowsHave(rows, want map[string]string) error {
	if len(rows) == 0 {
		return errors.New("no such table, or no rows with th scope=row")
	}
	for k, v := range want {
		if rows[k] != v {
			return fmt.Errorf("row %q: %q, want %q (rows %q)", k, rows[k], v, rows)
		}
	}
	return nil
}

// TestSimulateRegionsBinary runs the built command: its output, and exit status 2 on bad input.
func TestSimulateRegionsBinary(t *testing.T) {
	bin := buildSluice(t)
	out, err := exec.Command(bin, issueExample...).Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	last := lines[len(lines)-1]
	var even, rebalanced int64
	if _, err := fmt.Sscanf(last, "served: even=%d rebalanced=%d", &even, &rebalanced); err != nil {
		t.Fatalf("last line %q: %v", last, err)
	}
	if even != 600 || rebalanced < 870 {
		t.Fatalf("served even=%d rebalanced=%d, want 600 and at least 870", even, rebalanced)
	}
	for _, tt := range []struct {
		flag string
		args []string
	}{
		{"--limit", []string{"simulate", "regions", "--limit", "-1", "--demand", "a=1"}},
		{"--demand", []string{"simulate", "regions", "--limit", "9", "--demand", "a=x"}},
		{"--floor", []string{"simulate", "regions", "--limit", "9", "--demand", "a=1", "--floor", "2"}},
	} {
		args := tt.args
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%q: %v, want exit status 2", args, err)
		}
		if !strings.Contains(stderr.String(), tt.flag) {
			t.Errorf("%q: stderr %q does not name %s", args, stderr.String(), tt.flag)
		}
	}
}

func FuzzParseDemand(f *testing.F) {
	for _, s := range []string{
		"mumbai=600,frankfurt=200,virginia=100", " a = 1 ,b=2", "a=1,a=2", "a", "=1", "a=-1", "a=1.5",
		"a=9007199254740992", "a=9007199254740993", "a=1,,b=2", "", "us-east-1=0", "é=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		regions, demand, err := parseDemand(s)
		if err != nil {
			return
		}
		if len(regions) == 0 || len(regions) != len(demand) || len(regions) > regionsim.MaxRegions {
			t.Fatalf("%q: %d regions, %d demands", s, len(regions), len(demand))
		}
		var total int64
		parts := make([]string, len(regions))
		for i, r := range regions {
			if err := regionsim.CheckRegionName(r); err != nil {
				t.Fatalf("%q: region %q: %v", s, r, err)
			}
			d, ok := demand[r]
			if !ok || d < 0 || d > 1<<53 {
				t.Fatalf("%q: region %q has demand %d (%v)", s, r, d, ok)
			}
			total += d
			parts[i] = r + "=" + strconv.FormatInt(d, 10)
		}
		if total > 1<<53 {
			t.Fatalf("%q: total %d", s, total)
		}
		// What was accepted reads back the same from its plain form.
		again, demand2, err := parseDemand(strings.Join(parts, ","))
		if err != nil || strings.Join(again, ",") != strings.Join(regions, ",") || len(demand2) != len(demand) {
			t.Fatalf("%q: the plain form %q parses to %q, %v", s, strings.Join(parts, ","), again, err)
		}
		for r, d := range demand {
			if demand2[r] != d {
				t.Fatalf("%q: region %s: %d then %d", s, r, d, demand2[r])
			}
		}
	})
}
