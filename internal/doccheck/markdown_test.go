package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// block is one fenced code block of a document.
type block struct {
	doc        string // the document's path from the module root: README.md, docs/serve.md
	line       int    // the line of the opening fence, from 1
	lang       string // the first word of the info string: go, sh, text, or ""
	marker     string // what follows "doccheck:" in the marker before the block; "" without one
	markerLine int    // the marker's line, 0 without one
	text       string // the lines between the fences, each ending in "\n"
}

// name is the block's place, README.md:40, for test names and messages.
func (b block) name() string { return fmt.Sprintf("%s:%d", b.doc, b.line) }

var (
	fence     = regexp.MustCompile("^(```+)\\s*(.*)$")
	markerRE  = regexp.MustCompile(`^<!--\s*doccheck:\s*(.*?)\s*-->\s*$`)
	anyMarker = regexp.MustCompile(`<!--\s*doccheck`)
)

// shellLangs are the info strings of shell blocks.
var shellLangs = []string{"sh", "bash", "shell"}

// parseBlocks returns the fenced blocks of a Markdown document, each with its marker, and refuses
// a marker that is malformed, stands before no block, or does not apply to its block's language.
func parseBlocks(doc, text string) ([]block, error) {
	lines := strings.Split(text, "\n")
	var blocks []block
	var pending *block // the marker waiting for its block
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := markerRE.FindStringSubmatch(line); m != nil {
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: a doccheck marker before another marker, not before a fenced block", doc, pending.markerLine)
			}
			pending = &block{marker: m[1], markerLine: i + 1}
			continue
		}
		if anyMarker.MatchString(line) {
			return nil, fmt.Errorf("%s:%d: a doccheck marker must be a line of its own: <!-- doccheck: WHAT -->", doc, i+1)
		}
		m := fence.FindStringSubmatch(line)
		if m == nil {
			if pending != nil && strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("%s:%d: a doccheck marker must stand right before a fenced block (blank lines allowed)", doc, pending.markerLine)
			}
			continue
		}
		b := block{doc: doc, line: i + 1}
		if info := strings.Fields(m[2]); len(info) > 0 {
			b.lang = info[0]
		}
		if pending != nil {
			b.marker, b.markerLine = pending.marker, pending.markerLine
			pending = nil
		}
		var body strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == m[1] {
				closed = true
				break
			}
			body.WriteString(lines[i] + "\n")
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: the fenced block is never closed", doc, b.line)
		}
		b.text = body.String()
		if err := checkMarker(b); err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: a doccheck marker at the end of the document, before no block", doc, pending.markerLine)
	}
	return blocks, nil
}

// checkMarker refuses a marker its block's language has no use for.
func checkMarker(b block) error {
	ok := false
	switch {
	case b.marker == "":
		ok = true
	case b.lang == "go":
		ok = b.marker == "run" || strings.HasPrefix(b.marker, "func(") ||
			strings.HasPrefix(b.marker, "skip:") && strings.TrimSpace(strings.TrimPrefix(b.marker, "skip:")) != ""
	case slices.Contains(shellLangs, b.lang):
		ok = b.marker == "run"
	default:
		ok = b.marker == "output"
	}
	if !ok {
		return fmt.Errorf("%s:%d: marker %q does not apply to a ```%s block: see package doccheck for the markers", b.doc, b.markerLine, b.marker, b.lang)
	}
	return nil
}

// moduleRoot is the directory of the module's go.mod, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the module root %s: %v", root, err)
	}
	return root
}

// documents returns the blocks of README.md and docs/*.md, by document, in order.
func documents(t *testing.T, root string) map[string][]block {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	docs := make(map[string][]block)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		blocks, err := parseBlocks(filepath.ToSlash(rel), string(data))
		if err != nil {
			t.Error(err)
			continue
		}
		docs[filepath.ToSlash(rel)] = blocks
	}
	return docs
}

// docNames returns the documents' names in order: README.md first, then docs/ by name.
func docNames(docs map[string][]block) []string {
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == "README.md":
			return -1
		case b == "README.md":
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

func TestParseBlocks(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []block // doc, line, lang, marker, markerLine, text
		err  string
	}{
		{
			name: "blocks without markers",
			text: "# t\n\n```go\nx := 1\n```\n\ntext\n\n```\nplain\n```\n",
			want: []block{
				{doc: "d.md", line: 3, lang: "go", text: "x := 1\n"},
				{doc: "d.md", line: 9, lang: "", text: "plain\n"},
			},
		},
		{
			name: "a marker, then blank lines, then its block",
			text: "<!-- doccheck: run -->\n\n```sh\necho hi\n```\n",
			want: []block{{doc: "d.md", line: 3, lang: "sh", marker: "run", markerLine: 1, text: "echo hi\n"}},
		},
		{
			name: "a statement block's signature",
			text: "<!-- doccheck: func(ctx context.Context) -->\n```go\n_ = ctx\n```\n",
			want: []block{{doc: "d.md", line: 2, lang: "go", marker: "func(ctx context.Context)", markerLine: 1, text: "_ = ctx\n"}},
		},
		{
			name: "an output block",
			text: "<!-- doccheck: output -->\n```text\nok\n```\n",
			want: []block{{doc: "d.md", line: 2, lang: "text", marker: "output", markerLine: 1, text: "ok\n"}},
		},
		{
			name: "a longer fence holds a shorter one",
			text: "````md\n```go\n```\n````\n",
			want: []block{{doc: "d.md", line: 1, lang: "md", text: "```go\n```\n"}},
		},
		{
			name: "a marker before prose",
			text: "<!-- doccheck: run -->\nSome prose.\n```sh\nls\n```\n",
			err:  "d.md:1: a doccheck marker must stand right before a fenced block",
		},
		{
			name: "a marker at the end",
			text: "```sh\nls\n```\n<!-- doccheck: run -->\n",
			err:  "d.md:4: a doccheck marker at the end of the document",
		},
		{
			name: "a skip without a reason",
			text: "<!-- doccheck: skip: -->\n```go\nx\n```\n",
			err:  `d.md:1: marker "skip:" does not apply to a ` + "```go block",
		},
		{
			name: "run on a text block",
			text: "<!-- doccheck: run -->\n```text\nx\n```\n",
			err:  `marker "run" does not apply`,
		},
		{
			name: "output on a Go block",
			text: "<!-- doccheck: output -->\n```go\nx\n```\n",
			err:  `marker "output" does not apply`,
		},
		{
			name: "a marker inside prose",
			text: "see <!-- doccheck: run --> here\n",
			err:  "d.md:1: a doccheck marker must be a line of its own",
		},
		{
			name: "an unclosed block",
			text: "```go\nx := 1\n",
			err:  "d.md:1: the fenced block is never closed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseBlocks("d.md", tt.text)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
