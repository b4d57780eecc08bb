package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/conformance"
)

// wrongVectors has one right step and one whose remaining is deliberately wrong (the truth is 1).
const wrongVectors = `{"format": "sluice-vectors/1", "cases": [{
  "name": "wrong-case",
  "strategy": {"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3},
  "steps": [
    {"key": "k", "now": 1000, "cost": 1,
     "expect": {"allowed": true, "limit": 3, "remaining": 2, "resetAt": 1334, "retryAfterMs": 0}},
    {"key": "k", "now": 1000, "cost": 1,
     "expect": {"allowed": true, "limit": 3, "remaining": 5, "resetAt": 1667, "retryAfterMs": 0}}
  ]
}]}`

func TestRun(t *testing.T) {
	vectors, err := filepath.Glob("../../conformance/testdata/vectors/*.json")
	if err != nil || len(vectors) == 0 {
		t.Fatalf("no vector files in ../../conformance/testdata/vectors (err %v)", err)
	}
	allPassed := strconv.Itoa(countSteps(t, vectors...)) + " passed, 0 failed"
	dir := t.TempDir()
	wrong := writeFile(t, dir, "wrong.json", wrongVectors)
	badJSON := writeFile(t, dir, "bad.json", `{"format": "sluice-vectors/1", "cases": [`)
	missing := filepath.Join(dir, "missing.json")

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // substrings of stdout
		lastLine string   // the last line of stdout, when set
		stderr   []string // substrings of stderr
	}{
		{
			name:     "vectors flags",
			args:     append([]string{"conformance"}, flagEach("--vectors", vectors)...),
			lastLine: allPassed,
		},
		{
			name:     "positional files after flags",
			args:     append([]string{"conformance", "--store", "memory://", "--vectors", vectors[0]}, vectors[1:]...),
			lastLine: allPassed,
		},
		{
			name:     "flags after the file list",
			args:     append(append([]string{"conformance"}, vectors...), "--store", "memory://"),
			lastLine: allPassed,
		},
		{
			name:   "store after the file list is read as the store",
			args:   []string{"conformance", wrong, "--store", "mysql://localhost/sluice"},
			code:   2,
			stderr: []string{`"mysql://localhost/sluice"`, "supported: memory"},
		},
		{
			name:     "files after -- are files",
			args:     []string{"conformance", "--store", "memory", "--", wrong},
			code:     1,
			lastLine: "1 passed, 1 failed",
		},
		{
			name:     "wrong expectation",
			args:     []string{"conformance", "--vectors", wrong},
			code:     1,
			stdout:   []string{wrong + ": wrong-case step 1: remaining: want 5, got 1\n"},
			lastLine: "1 passed, 1 failed",
		},
		{
			name:     "same file twice starts afresh",
			args:     []string{"conformance", wrong, wrong},
			code:     1,
			lastLine: "2 passed, 2 failed",
		},
		{
			name:   "missing file",
			args:   []string{"conformance", "--vectors", missing},
			code:   2,
			stderr: []string{"missing.json"},
		},
		{
			name:   "bad JSON",
			args:   []string{"conformance", "--vectors", vectors[0], "--vectors", badJSON},
			code:   2,
			stderr: []string{badJSON + ": conformance: bad vector file"},
		},
		{
			name:   "unknown store scheme",
			args:   []string{"conformance", "--store", "mysql://localhost/sluice", "--vectors", wrong},
			code:   2,
			stderr: []string{`"mysql://localhost/sluice"`, "supported: memory"},
		},
		{
			name:     "no vector files: the built-in ones",
			args:     []string{"conformance"},
			code:     0,
			lastLine: "1454 passed, 0 failed",
		},
		{
			name:   "unknown flag",
			args:   []string{"conformance", "--bogus"},
			code:   2,
			stderr: []string{"-bogus", "usage: sluice conformance"},
		},
		{
			name:   "version",
			args:   []string{"version"},
			stdout: []string{"sluice ", runtime.Version()},
		},
		{
			name:   "help",
			args:   []string{"help"},
			stdout: []string{"usage: sluice", "conformance", "version"},
		},
		{
			name:   "no arguments",
			code:   2,
			stderr: []string{"usage: sluice"},
		},
		{
			name:   "unknown command",
			args:   []string{"sevre"},
			code:   2,
			stderr: []string{`unknown command "sevre"`, "usage: sluice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout.String(), stderr.String())
			}
			assertContains(t, "stdout", stdout.String(), tt.stdout)
			assertContains(t, "stderr", stderr.String(), tt.stderr)
			if tt.lastLine != "" {
				lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
				if last := lines[len(lines)-1]; last != tt.lastLine {
					t.Errorf("last line of stdout %q, want %q", last, tt.lastLine)
				}
			}
		})
	}
}

func TestOpenStore(t *testing.T) {
	tests := []struct {
		name string
		url  string
		ok   bool
	}{
		{name: "memory", url: "memory", ok: true},
		{name: "memory URL", url: "memory://", ok: true},
		{name: "empty", url: ""},
		{name: "redis", url: "redis://127.0.0.1:6379", ok: true},
		{name: "redis TLS", url: "rediss://127.0.0.1:6379", ok: true},
		{name: "mysql", url: "mysql://localhost/sluice"},
		{name: "memory with address", url: "memory://somewhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, closer, err := openStore(tt.url)
			if !tt.ok {
				if err == nil || !strings.Contains(err.Error(), "supported: memory") {
					t.Fatalf("openStore(%q) error %v, want one listing the supported stores", tt.url, err)
				}
				return
			}
			if err != nil || store == nil || closer == nil {
				t.Fatalf("openStore(%q) = %v, %v, %v", tt.url, store, closer, err)
			}
			if err := closer.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

func flagEach(flag string, values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, flag, v)
	}
	return out
}

func countSteps(t *testing.T, paths ...string) int {
	t.Helper()
	n := 0
	for _, path := range paths {
		f, err := conformance.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n += f.Steps()
	}
	return n
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func assertContains(t *testing.T, name, got string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", name, w, got)
		}
	}
}
