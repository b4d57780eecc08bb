package sluicev1_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// aptLine installs protoc on CI (Debian).
const aptLine = "apt-get update && apt-get install -y protobuf-compiler"

// protocVersion matches the header lines naming protoc's version, which the test ignores: the
// committed files need not be regenerated for each protoc release, only when their code changes.
var protocVersion = regexp.MustCompile(`(?m)^// (\t|- )protoc +v[^\n]*$`)

// TestGeneratedUpToDate runs the //go:generate line of generate.go into a temporary directory and
// fails if the committed files differ from what it writes.
func TestGeneratedUpToDate(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("protoc is not on PATH; CI must install it (%s)", aptLine)
		}
		t.Skipf("protoc is not on PATH, so the generated code is not checked; install it with %s", aptLine)
	}
	script := generateScript(t)
	out := t.TempDir()
	const target = "_out=paths=source_relative:."
	if n := strings.Count(script, target+" "); n != 2 {
		t.Fatalf("the go:generate line writes %d outputs to %q, want 2 (--go_out, --go-grpc_out); update this test with it:\n%s", n, target, script)
	}
	script = strings.ReplaceAll(script, target+" ", "_out=paths=source_relative:"+shellQuote(out)+" ")

	cmd := exec.Command("sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go:generate line failed: %v\n%s", err, stderr.String())
	}
	for _, name := range []string{"sluice.pb.go", "sluice_grpc.pb.go"} {
		committed, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(protocVersion.ReplaceAll(committed, nil), protocVersion.ReplaceAll(fresh, nil)) {
			t.Errorf("%s is stale: run go generate ./proto/sluice/v1 and commit the result", name)
		}
	}
}

// generateScript returns the shell script of generate.go's //go:generate sh -c "…" line.
func generateScript(t *testing.T) string {
	t.Helper()
	f, err := os.Open("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const prefix = "//go:generate sh -c "
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			script, err := strconv.Unquote(rest)
			if err != nil {
				t.Fatalf("go:generate argument %s: %v", rest, err)
			}
			return script
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("generate.go has no line starting %q", prefix)
	return ""
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
