package doccheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stdImports are the packages outside this module a block may use without importing them.
var stdImports = map[string]string{
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"http":    "net/http",
	"io":      "io",
	"json":    "encoding/json",
	"log":     "log",
	"os":      "os",
	"slog":    "log/slog",
	"strconv": "strconv",
	"strings": "strings",
	"sync":    "sync",
	"time":    "time",
	"pgxpool": "github.com/jackc/pgx/v5/pgxpool",
}

// importTable maps package names to import paths: stdImports, and this module's packages outside
// internal/, cmd/ and examples/, by their names as go list reports them. A name two packages share
// maps to "", which is an error to use.
func importTable(t *testing.T, root string) map[string]string {
	t.Helper()
	out := goCommand(t, root, "list", "-f", "{{.Name}} {{.ImportPath}}", "github.com/sluicehq/sluice/...")
	table := make(map[string]string, len(stdImports))
	for name, path := range stdImports {
		table[name] = path
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, path, _ := strings.Cut(line, " ")
		if name == "main" || regexp.MustCompile(`/(internal|cmd|examples)(/|$)`).MatchString(path) {
			continue
		}
		if p, dup := table[name]; dup && p != path {
			table[name] = ""
			continue
		}
		table[name] = path
	}
	return table
}

// goCommand runs the go command in dir and returns its output, failing the test on an error.
func goCommand(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := goRun(dir, args...)
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func goRun(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// goSource is a Go block made into a package: its file, and how it was read.
type goSource struct {
	block
	kind string // "file", "declarations" or "statements"
	main bool   // a file of package main
	src  []byte // the generated file, whose //line directives point into the document
}

// lineDirective makes the line after it read as line n of the document.
func lineDirective(doc string, n int) string { return fmt.Sprintf("//line %s:%d\n", doc, n) }

// isFile reports whether src starts with a package clause, after comments.
func isFile(src string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.PackageClauseOnly)
	return err == nil && f.Name != nil
}

// makeSource turns a Go block into the file of a package of its own. doc is the path the
// //line directives name, so that compiler and vet messages point into the document.
func makeSource(b block, doc string, imports map[string]string) (goSource, error) {
	s := goSource{block: b}
	first := b.line + 1 // the document's line of the block's first line
	if isFile(b.text) {
		s.kind = "file"
		f, _ := parser.ParseFile(token.NewFileSet(), "", b.text, parser.PackageClauseOnly)
		s.main = f.Name.Name == "main"
		s.src = []byte(lineDirective(doc, b.line) + "\n" + b.text)
		return s, nil
	}
	var body string
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package doc\n"+b.text, parser.SkipObjectResolution); err == nil {
		s.kind = "declarations"
		// The blank line keeps the directive out of a doc comment the block starts with, which
		// gofmt would otherwise move to the comment's end, shifting the lines.
		body = lineDirective(doc, b.line) + "\n" + b.text
	} else {
		s.kind = "statements"
		sig := "func()"
		if strings.HasPrefix(b.marker, "func(") {
			sig = b.marker
		}
		stmts, err := useDeclared(b.text)
		if err != nil {
			// Neither declarations nor statements: say why as statements, at the document's lines.
			fset := token.NewFileSet()
			_, perr := parser.ParseFile(fset, "", "package doc\nfunc _() {\n"+lineDirective(doc, first)+b.text+"\n}\n", parser.SkipObjectResolution)
			return s, fmt.Errorf("neither declarations nor statements: %v", perr)
		}
		at := b.markerLine
		if at == 0 {
			at = b.line
		}
		body = lineDirective(doc, at) + "func _" + strings.TrimPrefix(sig, "func") + " {\n" + lineDirective(doc, first) + stmts + "}\n"
	}
	names, err := packagesUsed("package doc\n\n" + body)
	if err != nil {
		return s, err
	}
	var imp strings.Builder
	for _, name := range names {
		path, known := imports[name]
		switch {
		case !known:
			continue // a name the block meant otherwise; the compiler will say what it lacks
		case path == "":
			return s, fmt.Errorf("package name %s is ambiguous in this module: write the block as a file, with its imports", name)
		}
		fmt.Fprintf(&imp, "import %s %q\n", name, path)
	}
	s.src = []byte("package doc\n\n" + imp.String() + "\n" + body)
	if formatted, err := format.Source(s.src); err == nil {
		s.src = formatted // as gofmt would leave it, should anyone run gofmt while it exists
	}
	return s, nil
}

// useDeclared returns the statements with a use of each variable they declare at their top
// level, so that a block may declare a variable only to show it: "d, err := lim.Check(...)". The
// uses come last, on a line of their own, or before the last statement if it is a return or a
// panic, which nothing may follow. It fails if src is not a list of statements.
func useDeclared(src string) (string, error) {
	const head = "package doc\nfunc _() {\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", head+src+"\n}\n", parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	body := f.Decls[0].(*ast.FuncDecl).Body
	var names []string
	declare := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, st := range body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declare(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						declare(id)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		return src, nil
	}
	use := strings.TrimSuffix(strings.Repeat("_, ", len(names)), ", ") + " = " + strings.Join(names, ", ") + "\n"
	if n := len(body.List); n > 0 && terminates(body.List[n-1]) {
		at := fset.Position(body.List[n-1].Pos()).Offset - len(head)
		at = strings.LastIndex(src[:at], "\n") + 1 // the start of its line
		return src[:at] + use + src[at:], nil
	}
	return strings.TrimSuffix(src, "\n") + "\n" + use, nil
}

// terminates reports whether nothing may follow st: a return or a call of panic.
func terminates(st ast.Stmt) bool {
	switch st := st.(type) {
	case *ast.ReturnStmt:
		return true
	case *ast.ExprStmt:
		if call, ok := st.X.(*ast.CallExpr); ok {
			id, ok := call.Fun.(*ast.Ident)
			return ok && id.Name == "panic"
		}
	}
	return false
}

// packagesUsed returns the names a file uses as packages (x in x.Sel) without declaring them, in
// order: those a type check finds undefined.
func packagesUsed(src string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	selectors := make(map[token.Pos]string) // the x of each x.Sel
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				selectors[id.Pos()] = id.Name
			}
		}
		return true
	})
	var names []string
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) { return nil, errors.New("no imports here") }),
		Error: func(err error) {
			if te, ok := err.(types.Error); ok && strings.HasPrefix(te.Msg, "undefined: ") {
				if name, ok := selectors[te.Pos]; ok && !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		},
	}
	conf.Check("doc", fset, []*ast.File{f}, nil) // errors go to conf.Error
	slices.Sort(names)
	return names, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// genDir makes a directory for generated packages inside the module, where they can import its
// packages, under testdata so that ./... never sees it, and removes it when the test ends.
func genDir(t *testing.T, root string) string {
	t.Helper()
	parent := filepath.Join(root, "internal", "doccheck", "testdata")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove(parent) // only if empty: nothing else lives there
	})
	return dir
}

// slug names a block's package directory: README.md:40 → readme_md_40.
func slug(b block) string {
	s := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(b.doc, "_"))
	return fmt.Sprintf("%s_%d", s, b.line)
}

// pkgPath is the package of block b in gen, as a path from the module root: ./internal/....
func pkgPath(root, gen string, b block) string {
	rel, _ := filepath.Rel(root, filepath.Join(gen, slug(b)))
	return "./" + filepath.ToSlash(rel)
}

// diagnostic is a compiler or vet message: "README.md:45:3: undefined: ctx".
var diagnostic = regexp.MustCompile(`(?m)^(?:vet: )?(\S+\.md):(\d+)(?::\d+)?: .*$`)

// TestGoBlocks compiles and vets every ```go block of README.md and docs/*.md, and runs the
// programs marked "run", comparing their output with the "output" block after them.
func TestGoBlocks(t *testing.T) {
	root := moduleRoot(t)
	docs := documents(t, root)
	imports := importTable(t, root)
	gen := genDir(t, root)

	var sources []goSource
	failed := make(map[string]string) // block name → why it could not be made a package
	outputs := make(map[string]block) // run block name → its output block
	for _, name := range docNames(docs) {
		var lastRun *block
		for _, b := range docs[name] {
			switch {
			case b.marker == "output":
				if lastRun == nil {
					t.Errorf("%s: an output block follows no Go block marked run", b.name())
				} else {
					outputs[lastRun.name()] = b
				}
				lastRun = nil
				continue
			case b.lang != "go":
				lastRun = nil
				continue
			}
			lastRun = nil
			if strings.HasPrefix(b.marker, "skip:") {
				sources = append(sources, goSource{block: b, kind: "skipped"})
				continue
			}
			s, err := makeSource(b, filepath.Join(root, filepath.FromSlash(b.doc)), imports)
			if err != nil {
				failed[b.name()] = err.Error()
			} else {
				if err := os.MkdirAll(filepath.Join(gen, slug(b)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(gen, slug(b), "doc.go"), s.src, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sources = append(sources, s)
			if b.marker == "run" {
				if !s.main {
					t.Errorf("%s: marked run, but not a package main", b.name())
				}
				lastRun = &b
			}
		}
	}
	if len(sources) == 0 {
		t.Fatal("no Go blocks found")
	}

	// One go vet for every package: it compiles them too. Its messages name the documents' lines.
	var pkgs []string
	for _, s := range sources {
		if s.kind != "skipped" && failed[s.name()] == "" {
			pkgs = append(pkgs, pkgPath(root, gen, s.block))
		}
	}
	vetOut, vetErr := goRun(root, append([]string{"vet"}, pkgs...)...)
	messages := make(map[string][]string) // block name → its messages
	unplaced := vetOut
	for _, m := range diagnostic.FindAllStringSubmatch(vetOut, -1) {
		path := m[1]
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		doc, _ := filepath.Rel(root, path)
		line, _ := strconv.Atoi(m[2])
		for _, s := range sources {
			first, last := s.line, s.line+strings.Count(s.text, "\n")+1
			if s.markerLine > 0 {
				first = s.markerLine // a statement block's signature
			}
			if filepath.ToSlash(doc) == s.doc && first <= line && line <= last {
				messages[s.name()] = append(messages[s.name()], m[0])
				unplaced = strings.Replace(unplaced, m[0], "", 1)
				break
			}
		}
	}
	unplaced = strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(unplaced, ""))
	switch {
	case vetErr != nil && unplaced != "":
		t.Errorf("go vet: %v, saying of no block:\n%s", vetErr, vetOut)
	case vetErr != nil && len(messages) == 0:
		t.Errorf("go vet: %v, with no message placed in a block:\n%s", vetErr, vetOut)
	}

	var runs []goSource
	for _, s := range sources {
		t.Run(s.name()+" "+s.kind, func(t *testing.T) {
			switch {
			case s.kind == "skipped":
				t.Skipf("not compiled: %s", strings.TrimSpace(strings.TrimPrefix(s.marker, "skip:")))
			case failed[s.name()] != "":
				t.Fatalf("%s: %s", s.name(), failed[s.name()])
			case len(messages[s.name()]) > 0:
				t.Fatalf("%s does not compile or vet (package doccheck says how blocks are compiled):\n%s\ngenerated:\n%s",
					s.name(), strings.Join(messages[s.name()], "\n"), s.src)
			}
			// A reader copies the block: as gofmt would leave it, which also keeps the generated
			// file's lines where the document has them.
			if formatted, err := format.Source([]byte(s.text)); err == nil && !bytes.Equal(formatted, []byte(s.text)) {
				t.Errorf("%s is not gofmt-formatted; gofmt would write:\n%s", s.name(), formatted)
			}
		})
		if s.marker == "run" && failed[s.name()] == "" && len(messages[s.name()]) == 0 {
			runs = append(runs, s)
		}
	}

	for _, s := range runs {
		t.Run(s.name()+" runs", func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "prog")
			goCommand(t, root, "build", "-o", bin, pkgPath(root, gen, s.block))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bin)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\n%s%s", s.name(), err, stdout.String(), stderr.String())
			}
			out, ok := outputs[s.name()]
			if !ok {
				t.Fatalf("%s is marked run but no block marked output follows it", s.name())
			}
			if stdout.String() != out.text {
				t.Errorf("%s printed\n%s\nbut %s says it prints\n%s", s.name(), stdout.String(), out.name(), out.text)
			}
		})
	}
}

func TestMakeSource(t *testing.T) {
	imports := map[string]string{"sluice": "github.com/sluicehq/sluice", "context": "context", "fmt": "fmt", "dup": ""}
	tests := []struct {
		name   string
		block  block
		kind   string
		main   bool
		has    []string // substrings of the generated file
		hasNot []string
		err    string
	}{
		{
			name:  "a program",
			block: block{line: 10, lang: "go", text: "package main\n\nfunc main() {}\n"},
			kind:  "file", main: true,
			has: []string{"//line d.md:10\n\npackage main\n"},
		},
		{
			name:  "declarations get their imports",
			block: block{line: 3, lang: "go", text: "func f(ctx context.Context) error { return ctx.Err() }\n"},
			kind:  "declarations",
			has:   []string{`import context "context"`, "//line d.md:3\n\nfunc f("},
		},
		{
			name:  "statements become a body, declared variables used",
			block: block{line: 5, lang: "go", marker: "func(ctx context.Context, lim *sluice.Limiter)", markerLine: 4, text: "d, err := lim.Check(ctx, \"api\", \"k\", 1) // a comment\n"},
			kind:  "statements",
			has: []string{`import sluice "github.com/sluicehq/sluice"`, `import context "context"`,
				"func _(ctx context.Context, lim *sluice.Limiter) {", "1) // a comment\n\t_, _ = d, err\n"},
		},
		{
			name:   "statements without a signature",
			block:  block{line: 1, lang: "go", text: "x := 1\nfmt.Println(x)\n"},
			kind:   "statements",
			has:    []string{"func _() {", "fmt.Println(x)\n\t_ = x\n", `import fmt "fmt"`},
			hasNot: []string{`"context"`},
		},
		{
			name:   "a local variable is not a package",
			block:  block{line: 1, lang: "go", text: "sluice := struct{ X int }{}\nfmt.Println(sluice.X)\n"},
			kind:   "statements",
			hasNot: []string{`"github.com/sluicehq/sluice"`},
		},
		{
			name:  "an ambiguous package name",
			block: block{line: 1, lang: "go", text: "dup.F()\n"},
			err:   "package name dup is ambiguous",
		},
		{
			name:  "neither declarations nor statements",
			block: block{line: 7, lang: "go", text: "x := := 1\n"},
			err:   "d.md:8",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.block.doc = "d.md"
			s, err := makeSource(tt.block, "d.md", imports)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.kind != tt.kind || s.main != tt.main {
				t.Errorf("kind %q main %v, want %q %v", s.kind, s.main, tt.kind, tt.main)
			}
			for _, want := range tt.has {
				if !strings.Contains(string(s.src), want) {
					t.Errorf("generated file lacks %q:\n%s", want, s.src)
				}
			}
			for _, unwanted := range tt.hasNot {
				if strings.Contains(string(s.src), unwanted) {
					t.Errorf("generated file has %q:\n%s", unwanted, s.src)
				}
			}
		})
	}
}
