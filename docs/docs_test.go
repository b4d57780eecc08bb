// The figures of docs/sizing.md and docs/leases.md come from docs/benchmarks.md, and this test
// keeps them so. The convention, for whoever edits those two docs:
//
//  1. A measured figure is a link to the section of benchmarks.md that shows it:
//     [48,262 checks/s](benchmarks.md#postgresql). Every number in the link's text must appear,
//     written the same way (commas, decimals, a k or M suffix), in that section: from its heading
//     down to the next heading of the same or a higher level. The anchor is GitHub's: the
//     heading in lower case, spaces as hyphens, punctuation dropped.
//  2. A figure worked out from measured ones (a rate per shard, servers needed = ⌈demand ÷ rate
//     per server⌉, the bytes of 10M keys) is an entry of derived below: the figures it is computed
//     from (each must appear in its section of benchmarks.md), the arithmetic, and the text the
//     doc must contain (line breaks in the doc count as spaces).
//  3. Outside code, a number followed by a unit of speed, size or ratio (×, /s, ns, µs, B, MB,
//     GB, checks/s, checks a second) must be one of those two: linked, or derived; or one of
//     givens below, the load an example is sized for, which nobody measured.
//
// So a number changed in benchmarks.md fails this test until the docs that cite it are updated.
// The test also refuses, in every doc and the README, words that point at documents the reader
// never saw ("seed 002", "the seed's", "the issue's").
package docs_test

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// fig is a number as docs/benchmarks.md writes it, in the section of the given anchor.
type fig struct{ anchor, text string }

// derived lists the figures of sizing.md and leases.md that are computed from benchmarks.md.
// f gets the inputs' values (commas dropped, k and M multiplied out) and returns the text; the
// test checks that it equals want and that the doc contains want.
var derived = []struct {
	doc  string
	want string
	in   []fig
	f    func(x []float64) string
}{
	// sizing.md: Redis shards. A Redis core at 100% decides 1 s ÷ (CPU per check); shards run at
	// half that; shards = ⌈200,000 ÷ half⌉, plus one to survive losing one.
	{"sizing.md", "285,714 checks a second", []fig{{"redis", "3.5"}},
		func(x []float64) string { return count(1e6/x[0]) + " checks a second" }},
	{"sizing.md", "61,728 checks a second", []fig{{"redis", "16.2"}},
		func(x []float64) string { return count(1e6/x[0]) + " checks a second" }},
	{"sizing.md", "142,857 checks/s a shard, so **2 shards** (3 to survive losing one at peak)", []fig{{"redis", "3.5"}},
		func(x []float64) string {
			half := 1e6 / x[0] / 2
			n := need(200_000, half)
			return fmt.Sprintf("%s checks/s a shard, so **%d shards** (%d to survive losing one at peak)", count(half), n, n+1)
		}},
	{"sizing.md", "76,923 checks/s a shard at half CPU: **3 shards**", []fig{{"redis", "6.5"}},
		func(x []float64) string {
			half := 1e6 / x[0] / 2 // x[0] is ms of CPU per thousand checks: µs per check
			return fmt.Sprintf("%s checks/s a shard at half CPU: **%d shards**", count(half), need(200_000, half))
		}},
	{"sizing.md", "30,864 checks/s a shard at half CPU, so 7 shards", []fig{{"redis", "16.2"}},
		func(x []float64) string {
			half := 1e6 / x[0] / 2
			return fmt.Sprintf("%s checks/s a shard at half CPU, so %d shards", count(half), need(200_000, half))
		}},
	// sizing.md: sluice serve in front of Redis, servers = ⌈200,000 ÷ checks/s per server⌉, and
	// twice the rate's worth of servers at half load.
	{"sizing.md", "needs **7** such servers at the measured rate, 14 to run them at half load",
		[]fig{{serveRedis, "30,430"}},
		func(x []float64) string {
			return fmt.Sprintf("needs **%d** such servers at the measured rate, %d to run them at half load",
				need(200_000, x[0]), need(200_000, x[0]/2))
		}},
	{"sizing.md", "batched traffic, 1 (2 at half load)", []fig{{serveRedis, "283,077"}},
		func(x []float64) string {
			return fmt.Sprintf("batched traffic, %d (%d at half load)", need(200_000, x[0]), need(200_000, x[0]/2))
		}},
	// sizing.md: the embedded store, checks a second = 1e9 ÷ ns per check.
	{"sizing.md", "5.8M to 7.4M checks a second", []fig{{manyKeys, "173"}, {manyKeys, "135"}},
		func(x []float64) string {
			return fmt.Sprintf("%.1fM to %.1fM checks a second", 1e3/x[0], 1e3/x[1])
		}},
	{"sizing.md", "33.2M checks a second on one core", []fig{{hotKey, "30.1"}},
		func(x []float64) string { return fmt.Sprintf("%.1fM checks a second on one core", 1e3/x[0]) }},
	// sizing.md: PostgreSQL, 200,000 ÷ checks/s.
	{"sizing.md", "200k/s is 4.1× the first and 1.7× the second", []fig{{"postgresql", "48,262"}, {"postgresql", "116,801"}},
		func(x []float64) string {
			return fmt.Sprintf("200k/s is %.1f× the first and %.1f× the second", 200_000/x[0], 200_000/x[1])
		}},
	// sizing.md: 10M keys × bytes per key.
	{"sizing.md", "| 1.45 GB |", []fig{{bytesPerKey, "145.3"}},
		func(x []float64) string { return fmt.Sprintf("| %.2f GB |", 10e6*x[0]/1e9) }},
	{"sizing.md", "| 2.81 GB |", []fig{{bytesPerKey, "281.4"}},
		func(x []float64) string { return fmt.Sprintf("| %.2f GB |", 10e6*x[0]/1e9) }},
	{"sizing.md", "| 2.93 GB |", []fig{{bytesPerKey, "293.1"}},
		func(x []float64) string { return fmt.Sprintf("| %.2f GB |", 10e6*x[0]/1e9) }},
	{"sizing.md", "| 370–460 MB |", []fig{{statePerKey, "37"}, {statePerKey, "46"}},
		func(x []float64) string { return fmt.Sprintf("| %.0f–%.0f MB |", 10e6*x[0]/1e6, 10e6*x[1]/1e6) }},
	{"sizing.md", "| 460–570 MB |", []fig{{statePerKey, "46"}, {statePerKey, "57"}},
		func(x []float64) string { return fmt.Sprintf("| %.0f–%.0f MB |", 10e6*x[0]/1e6, 10e6*x[1]/1e6) }},

	// leases.md: local checks a second = 1e9 ÷ ns per check.
	{"leases.md", "about 40.5 million a second on one core over the memory store and 38.0 million over Redis",
		[]fig{{"leased-capacity", "24.7"}, {"leased-capacity", "26.3"}},
		func(x []float64) string {
			return fmt.Sprintf("about %.1f million a second on one core over the memory store and %.1f million over Redis",
				1e3/x[0], 1e3/x[1])
		}},
	// leases.md: a store round trip spread over the checks of a lease of 100 000, and of 10 000.
	{"leases.md", "adds 0.65 ns a check on average", []fig{{"redis", "65.0"}},
		func(x []float64) string { return fmt.Sprintf("adds %.2f ns a check on average", x[0]*1e3/100_000) }},
	{"leases.md", "6.5 ns a check", []fig{{"redis", "65.0"}},
		func(x []float64) string { return fmt.Sprintf("%.1f ns a check", x[0]*1e3/10_000) }},
	{"leases.md", "36.0 and 33.7 million checks a second for the process",
		[]fig{{"leased-capacity", "27.8"}, {"leased-capacity", "29.7"}},
		func(x []float64) string {
			return fmt.Sprintf("%.1f and %.1f million checks a second for the process", 1e3/x[0], 1e3/x[1])
		}},
}

// Anchors of benchmarks.md's longer headings.
const (
	serveRedis  = "sluice-bench-against-sluice-serve---store-redis"
	hotKey      = "hot-key-one-goroutine-target--05-go-limiters-nsop-0-allocs"
	manyKeys    = "1m-keys-random-key-per-op-parallel-target--2-go-limiters-throughput"
	statePerKey = "state-per-key-at-1m-keys-target--48-bkey-for-gcra-token-bucket-fixed-window"
	bytesPerKey = "bytes-per-key-in-redis-and-postgresql"
)

// need is how many servers (or shards) of rate per second serve demand: ⌈demand ÷ rate⌉.
func need(demand, rate float64) int { return int(math.Ceil(demand / rate)) }

// count writes x, rounded down, with commas: 285714.3 → "285,714".
func count(x float64) string {
	s := strconv.FormatInt(int64(math.Floor(x)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// cited are the docs whose figures come from benchmarks.md.
var cited = []string{"sizing.md", "leases.md", "overrides.md"}

func TestLinkedFiguresAreInBenchmarks(t *testing.T) {
	sections := benchmarkSections(t)
	for _, doc := range cited {
		links := 0
		for _, m := range benchLink.FindAllStringSubmatch(prose(read(t, doc)), -1) {
			links++
			text, anchor := m[1], m[2]
			section, ok := sections[anchor]
			if !ok {
				t.Errorf("%s: [%s](benchmarks.md#%s): benchmarks.md has no heading with that anchor; it has %s",
					doc, text, anchor, strings.Join(slices.Sorted(maps.Keys(sections)), ", "))
				continue
			}
			have := numbers(section)
			for _, n := range slices.Sorted(maps.Keys(numbers(text))) {
				if !have[n] {
					t.Errorf("%s: [%s](benchmarks.md#%s): benchmarks.md's section #%s does not show %s",
						doc, text, anchor, anchor, n)
				}
			}
		}
		if links == 0 {
			t.Errorf("%s cites no figure of benchmarks.md", doc)
		}
	}
}

func TestDerivedFigures(t *testing.T) {
	sections := benchmarkSections(t)
	for _, d := range derived {
		var x []float64
		for _, in := range d.in {
			section, ok := sections[in.anchor]
			if !ok {
				t.Errorf("%s, %q: benchmarks.md has no section #%s", d.doc, d.want, in.anchor)
			} else if !numbers(section)[in.text] {
				t.Errorf("%s, %q: computed from %s, which benchmarks.md's section #%s no longer shows", d.doc, d.want, in.text, in.anchor)
			}
			x = append(x, value(in.text))
		}
		if got := d.f(x); got != d.want {
			t.Errorf("%s: from benchmarks.md's figures %v the text should read %q, not %q", d.doc, d.in, got, d.want)
		}
		if !strings.Contains(flat(read(t, d.doc)), d.want) {
			t.Errorf("%s does not contain %q", d.doc, d.want)
		}
	}
}

// A figure with a unit must be linked or derived (rule 3 above), or be one of the example's givens.
func TestNoUncitedFigures(t *testing.T) {
	for _, doc := range cited {
		text := flat(benchLink.ReplaceAllString(prose(read(t, doc)), ""))
		for _, d := range derived {
			if d.doc == doc {
				text = strings.ReplaceAll(text, d.want, "")
			}
		}
		for _, g := range givens[doc] {
			text = strings.ReplaceAll(text, g, "")
		}
		for _, loc := range withUnit.FindAllStringIndex(text, -1) {
			t.Errorf("%s: %q is neither a link to benchmarks.md nor a derived figure of docs_test.go, in: …%s…",
				doc, text[loc[0]:loc[1]], around(text, loc[0], loc[1]))
		}
	}
}

// givens are the figures of the docs' examples that nobody measured: the load a page sizes for.
var givens = map[string][]string{
	"sizing.md": {"200,000 checks a second", "200k/s"},
}

// around is s[i:j] with some 60 bytes of context on either side, cut at rune boundaries.
func around(s string, i, j int) string {
	i, j = max(i-60, 0), min(j+60, len(s))
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	for j < len(s) && !utf8.RuneStart(s[j]) {
		j++
	}
	return s[i:j]
}

// flat is s with every run of white space, line breaks included, made one space: a phrase the
// test looks for may be wrapped anywhere in the doc.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// The docs speak of their own examples, not of documents the reader never saw.
func TestNoPrivateReferences(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, w := range []string{"seed 00", "the seed's", "the issue's"} {
				if strings.Contains(strings.ToLower(line), w) {
					t.Errorf("%s:%d: %q: describe the example itself, not the document it came from", f, i+1, w)
				}
			}
		}
	}
}

var (
	benchLink = regexp.MustCompile(`\[([^\]]*)\]\(benchmarks\.md#([^)\s]+)\)`)
	withUnit  = regexp.MustCompile(`(?:\d[\d,.]*\d|\d)[kM]?(?:×|/s\b| ?(?:checks/s|checks a second|ns|µs|B|MB|GB)\b)`)
	number    = regexp.MustCompile(`\d[\d,.]*\d|\d`)
	heading   = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence     = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan  = regexp.MustCompile("`[^`]*`")
)

// numbers returns the set of numbers written in s: digits with their commas and decimal points,
// and a k or M suffix that is not the start of a word. A number glued to a letter before it (a
// commit hash, a CPU model) is not one.
func numbers(s string) map[string]bool {
	set := map[string]bool{}
	for _, loc := range number.FindAllStringIndex(s, -1) {
		i, j := loc[0], loc[1]
		if r, _ := utf8.DecodeLastRuneInString(s[:i]); r == '_' || unicode.IsLetter(r) {
			continue
		}
		n := s[i:j]
		if j < len(s) && (s[j] == 'k' || s[j] == 'M') && (j+1 == len(s) || !isWordByte(s[j+1])) {
			n += s[j : j+1]
		}
		set[n] = true
	}
	return set
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// value reads a number as numbers writes it.
func value(s string) float64 {
	mul := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1e3, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1e6, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil {
		panic(fmt.Sprintf("docs_test: %q is not a number", s))
	}
	return v * mul
}

// benchmarkSections maps each anchor of benchmarks.md to its section's text: the heading and
// what follows, down to the next heading of the same or a higher level.
func benchmarkSections(t *testing.T) map[string]string {
	t.Helper()
	lines := strings.Split(read(t, "benchmarks.md"), "\n")
	type head struct {
		level, line int
		anchor      string
	}
	var heads []head
	seen := map[string]int{}
	inFence := false
	for i, line := range lines {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil && !inFence {
			a := slug(m[2])
			if n := seen[a]; n > 0 {
				seen[a]++
				a = fmt.Sprintf("%s-%d", a, n)
			} else {
				seen[a] = 1
			}
			heads = append(heads, head{len(m[1]), i, a})
		}
	}
	sections := map[string]string{}
	for k, h := range heads {
		end := len(lines)
		for _, next := range heads[k+1:] {
			if next.level <= h.level {
				end = next.line
				break
			}
		}
		sections[h.anchor] = strings.Join(lines[h.line:end], "\n")
	}
	return sections
}

// slug is GitHub's anchor for a heading: lower case, letters, digits, '-' and '_' kept, each space
// a '-', everything else dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// prose is a markdown text without its fenced code blocks and code spans, whose numbers are
// commands and configuration, not figures.
func prose(s string) string {
	var b strings.Builder
	inFence := false
	for _, line := range strings.Split(s, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			b.WriteByte('\n')
			continue
		}
		if !inFence {
			b.WriteString(codeSpan.ReplaceAllString(line, "``"))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
