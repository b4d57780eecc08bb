package docs_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is this module's path: the patterns of architecture.md are relative to it.
const module = "github.com/sluicehq/sluice"

// rule is one row of architecture.md's table "What may import what".
type rule struct {
	pattern string   // a package relative to the module ("." for the root), or a prefix ending in /...
	may     []string // patterns of this module's packages it may import
	never   []string // module paths it must not link, directly or not
}

// TestImportRules checks every package of the module against the table of docs/architecture.md:
// its imports from this module are listed in its row, and it links nothing its row forbids.
func TestImportRules(t *testing.T) {
	rules := readRules(t)
	imports := listImports(t)
	for pkg, direct := range imports {
		rel, ok := relative(pkg)
		if !ok {
			continue
		}
		r, ok := ruleFor(rules, rel)
		if !ok {
			t.Errorf("%s has no row in docs/architecture.md's import rules", rel)
			continue
		}
		for _, imp := range direct {
			if irel, ok := relative(imp); ok && !slices.ContainsFunc(r.may, func(p string) bool { return matches(p, irel) }) {
				t.Errorf("%s imports %s, which its row (%s) does not allow", rel, irel, r.pattern)
			}
		}
		for dep := range closure(imports, pkg) {
			for _, never := range r.never {
				if dep == never || strings.HasPrefix(dep, never+"/") {
					t.Errorf("%s links %s (row %s forbids %s)", rel, dep, r.pattern, never)
				}
			}
		}
	}
}

// readRules parses the table under "## What may import what".
func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## What may import what")
	if !ok {
		t.Fatal(`architecture.md has no section "What may import what"`)
	}
	code := regexp.MustCompile("`([^`]+)`")
	cells := func(s string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var rules []rule
	for line := range strings.SplitSeq(section, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) != 5 || !strings.Contains(cols[1], "`") {
			continue // not a row, or the header
		}
		pkg := cells(cols[1])
		if len(pkg) != 1 {
			t.Fatalf("a row names %d packages, want one: %s", len(pkg), line)
		}
		rules = append(rules, rule{pattern: pkg[0], may: cells(cols[2]), never: cells(cols[3])})
	}
	if len(rules) < 10 {
		t.Fatalf("read %d rules from architecture.md; is the table still there?", len(rules))
	}
	return rules
}

// listImports maps every package the module's packages link (standard library aside) to its
// direct imports, tests left out: the rules are about what a program links.
func listImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{join .Imports \" \"}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	return imports
}

// closure is every package pkg links, pkg aside.
func closure(imports map[string][]string, pkg string) map[string]bool {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(p string) {
		for _, d := range imports[p] {
			if !seen[d] {
				seen[d] = true
				visit(d)
			}
		}
	}
	visit(pkg)
	return seen
}

// relative is pkg relative to the module ("." for the root), if pkg is one of its packages.
func relative(pkg string) (string, bool) {
	if pkg == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(pkg, module+"/")
	return rel, ok
}

// matches reports whether the package rel matches pattern: the same, or below a prefix/... ("..."
// alone matches everything).
func matches(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == prefix || strings.HasPrefix(rel, prefix+"/")
	}
	return pattern == rel
}

// ruleFor is the rule of the longest pattern matching rel.
func ruleFor(rules []rule, rel string) (rule, bool) {
	best, found := rule{}, false
	for _, r := range rules {
		if matches(r.pattern, rel) && (!found || len(r.pattern) > len(best.pattern)) {
			best, found = r, true
		}
	}
	return best, found
}
