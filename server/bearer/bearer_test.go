package bearer_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server/bearer"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    map[string]bearer.Scope // tokens and their scopes; others must be None
		wantErr string                  // substring; "" means no error
	}{
		{name: "bare token is admin", file: "s3cret\n", want: map[string]bearer.Scope{"s3cret": bearer.Admin}},
		{name: "scopes", file: "check:c1\nadmin:a1\n", want: map[string]bearer.Scope{"c1": bearer.Check, "a1": bearer.Admin}},
		{name: "comments blanks and CRLF", file: "# ops\r\n\r\n  check:c1  \r\n\t# x\nadmin:a1", want: map[string]bearer.Scope{"c1": bearer.Check, "a1": bearer.Admin}},
		{name: "same token same scope twice", file: "a1\nadmin:a1\n", want: map[string]bearer.Scope{"a1": bearer.Admin}},
		{name: "colon inside a scoped token", file: "check:a:b\n", want: map[string]bearer.Scope{"a:b": bearer.Check}},
		{name: "hash inside a token", file: "check:a#b\n", want: map[string]bearer.Scope{"a#b": bearer.Check}},
		{name: "scope name is not a token", file: "check:c1\n", want: map[string]bearer.Scope{"c1": bearer.Check, "check:c1": bearer.None, "check": bearer.None}},
		{name: "empty file", file: "", wantErr: "holds no token"},
		{name: "only comments", file: "# a\n\n# b\n", wantErr: "holds no token"},
		{name: "unknown scope", file: "check:c1\nwrite:w1\n", wantErr: `line 2: unknown scope "write"`},
		{name: "scope names are lower case", file: "Admin:a1\n", wantErr: `line 1: unknown scope "Admin"`},
		{name: "unknown scope not echoed when it may be a secret", file: "ab12:cd\n", wantErr: "line 1: unknown scope (not shown)"},
		{name: "empty scoped token", file: "\n\nadmin:\n", wantErr: "line 3: empty token"},
		{name: "empty scope", file: ":tok\n", wantErr: `line 1: unknown scope ""`},
		{name: "space inside a token", file: "check:a b\n", wantErr: "line 1: the token holds ' '"},
		{name: "space after the colon", file: "check: ab\n", wantErr: "line 1: the token holds ' '"},
		{name: "tab inside a bare token", file: "a\tb\n", wantErr: "line 1: the token holds '\\t'"},
		{name: "control character", file: "ok\nab\x00c\n", wantErr: "line 2: the token holds '\\x00'"},
		{name: "two scopes", file: "check:t\n# x\nadmin:t\n", wantErr: "line 3: the token is given two scopes, check and admin"},
		{name: "two scopes with a bare line", file: "t\ncheck:t\n", wantErr: "line 2: the token is given two scopes, admin and check"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := bearer.Parse([]byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: error %v, want one holding %q", err, tc.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "bearer: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			n := 0
			for tok, want := range tc.want {
				if got := s.Lookup(tok); got != want {
					t.Errorf("Lookup(%q) = %v, want %v", tok, got, want)
				}
				if want != bearer.None {
					n++
				}
			}
			if s.Len() != n {
				t.Errorf("Len() = %d, want %d", s.Len(), n)
			}
			if got := s.Lookup(""); got != bearer.None {
				t.Errorf(`Lookup("") = %v, want none`, got)
			}
		})
	}
}

func TestParseEmptyIsErrNoToken(t *testing.T) {
	if _, err := bearer.Parse([]byte("\n# none\n")); !errors.Is(err, bearer.ErrNoToken) {
		t.Fatalf("Parse: %v, want ErrNoToken", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	writeFile(t, good, "check:c1\nadmin:a1\n")
	s, err := bearer.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lookup("c1") != bearer.Check || s.Lookup("a1") != bearer.Admin {
		t.Errorf("scopes: c1 %v, a1 %v", s.Lookup("c1"), s.Lookup("a1"))
	}
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, "nope:x\n")
	if _, err := bearer.ReadFile(bad); err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadFile(bad): %v, want the line and the path", err)
	}
	if _, err := bearer.ReadFile(filepath.Join(dir, "missing")); err == nil || !strings.HasPrefix(err.Error(), "bearer: ") {
		t.Errorf("ReadFile(missing): %v", err)
	}
}

func TestAuthorize(t *testing.T) {
	live := bearer.NewLive(bearer.MustParse(t, "check:c1\nadmin:a1\nbare\n"))
	tests := []struct {
		name  string
		live  *bearer.Live
		token string
		need  bearer.Scope
		want  bearer.Decision
	}{
		{"check token checks", live, "c1", bearer.Check, bearer.Allowed},
		{"check token cannot admin", live, "c1", bearer.Admin, bearer.Forbidden},
		{"admin token checks", live, "a1", bearer.Check, bearer.Allowed},
		{"admin token admins", live, "a1", bearer.Admin, bearer.Allowed},
		{"bare token admins", live, "bare", bearer.Admin, bearer.Allowed},
		{"unknown token", live, "zz", bearer.Check, bearer.Unauthenticated},
		{"no token", live, "", bearer.Check, bearer.Unauthenticated},
		{"prefix of a token", live, "a", bearer.Check, bearer.Unauthenticated},
		{"auth off: nil", nil, "", bearer.Admin, bearer.Allowed},
		{"auth off: no set", bearer.NewLive(nil), "", bearer.Admin, bearer.Allowed},
		{"empty set allows nothing", bearer.NewLive(bearer.Of("")), "", bearer.Check, bearer.Unauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.live.Authorize(tc.token, tc.need); got != tc.want {
				t.Errorf("Authorize(%q, %v) = %v, want %v", tc.token, tc.need, got, tc.want)
			}
		})
	}
}

func TestLiveSwap(t *testing.T) {
	live := bearer.NewLive(bearer.Of("old"))
	live.Store(bearer.Of("new"))
	if live.Authorize("old", bearer.Check) != bearer.Unauthenticated || live.Authorize("new", bearer.Admin) != bearer.Allowed {
		t.Error("the swapped set is not the one in force")
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse checks that Parse never panics, and that what it accepts it can look up: every token
// it kept has a scope, and a reparse agrees.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "tok\n", "check:c\nadmin:a\n", "# c\n\n  check:x \r\n", "check:\n", "bad:x", "a b", "t\ncheck:t",
		"check:a:b", ":", "\x00", "admin:\xff\xfe", strings.Repeat("x", 1000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := bearer.Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "bearer: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		if s.Len() == 0 {
			t.Fatal("accepted a file with no token")
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			token, want := line, bearer.Admin
			if name, rest, ok := strings.Cut(line, ":"); ok {
				token = rest
				if name == "check" {
					want = bearer.Check
				}
			}
			if got := s.Lookup(token); got != want {
				t.Fatalf("line %q: Lookup(%q) = %v, want %v", line, token, got, want)
			}
		}
	})
}
