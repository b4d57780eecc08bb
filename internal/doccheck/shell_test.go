package doccheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// command is one command of a shell block: its logical line (continuations joined), where it
// starts, and the JSON output a comment right after it promises, if any.
type command struct {
	text string
	line int
	want string // "" when no JSON comment follows
}

// commands splits a shell block into its commands.
func commands(b block) []command {
	var out []command
	lines := strings.Split(strings.TrimSuffix(b.text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		c := command{line: b.line + 1 + i}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			line = strings.TrimSpace(strings.TrimSuffix(line, "\\")) + " " + strings.TrimSpace(lines[i+1])
			i++
		}
		c.text = line
		var want []string
		for j := i + 1; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "# "); j++ {
			want = append(want, strings.TrimPrefix(strings.TrimSpace(lines[j]), "# "))
		}
		if w := strings.Join(want, "\n"); json.Valid([]byte(w)) && (strings.HasPrefix(w, "{") || strings.HasPrefix(w, "[")) {
			c.want = w
		}
		out = append(out, c)
	}
	return out
}

// sameJSON reports whether got is the JSON want shows, an instant (a number from 10^12, epoch ms)
// in want matching any instant in got.
func sameJSON(got, want any) bool {
	switch w := want.(type) {
	case float64:
		g, ok := got.(float64)
		return ok && (g == w || g >= 1e12 && w >= 1e12)
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !sameJSON(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

var (
	goRunSluice = regexp.MustCompile(`^go run \./cmd/sluice\b`)
	serveCmd    = regexp.MustCompile(`^\S*sluice serve\b`)
	listening   = regexp.MustCompile(`listening"? http=(\S+) grpc=(\S+)`)
	storeAddr   = regexp.MustCompile(`(?:redis|postgres(?:ql)?)://(?:[^@\s/]*@)?([^/\s?]+)`)
)

// server is a sluice serve a document started.
type server struct {
	cmd        *exec.Cmd
	log        *syncBuffer
	http, grpc string
	done       chan struct{} // closed when the process has exited
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe starts cmdline, a sluice serve, on free ports, and stops it when owner ends (t is
// the test under way, a subtest of owner).
func startServe(t, owner *testing.T, root, cmdline string) *server {
	t.Helper()
	cmdline = serveCmd.ReplaceAllStringFunc(cmdline, func(s string) string {
		return s + " --http 127.0.0.1:0 --grpc 127.0.0.1:0"
	})
	s := &server{log: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command("bash", "-c", "exec "+cmdline)
	s.cmd.Dir = root
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exit error
	go func() {
		exit = s.cmd.Wait()
		close(s.done)
	}()
	owner.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			owner.Errorf("%s did not stop on SIGTERM within 15 s", cmdline)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := listening.FindStringSubmatch(s.log.String()); m != nil {
			s.http, s.grpc = m[1], m[2]
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited before listening: %v\n%s", cmdline, exit, s.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within 30 s:\n%s", cmdline, s.log.String())
		}
	}
}

// missing says why cmdline cannot run here ("" when it can): its program is not installed, or a
// store it names does not answer.
func missing(cmdline string) string {
	fields := strings.Fields(cmdline)
	for len(fields) > 0 && strings.Contains(fields[0], "=") { // VAR=value prefixes
		fields = fields[1:]
	}
	if len(fields) > 0 && !strings.Contains(fields[0], "/") {
		if _, err := exec.LookPath(fields[0]); err != nil {
			return fields[0] + " is not installed"
		}
	}
	for _, m := range storeAddr.FindAllStringSubmatch(cmdline, -1) {
		addr := m[1]
		if _, _, err := net.SplitHostPort(addr); err != nil {
			port := "6379"
			if strings.HasPrefix(m[0], "postgres") {
				port = "5432"
			}
			addr = net.JoinHostPort(addr, port)
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return fmt.Sprintf("nothing answers at %s", addr)
		}
		c.Close()
	}
	return ""
}

// TestShellBlocks runs the shell blocks of README.md and docs/*.md marked run (package doccheck
// says how), and checks the commands' documented JSON output.
func TestShellBlocks(t *testing.T) {
	root := moduleRoot(t)
	docs := documents(t, root)
	var sluiceBin string
	binDir := t.TempDir()
	buildSluice := func(t *testing.T) string {
		t.Helper()
		if sluiceBin == "" {
			bin := filepath.Join(binDir, "sluice")
			goCommand(t, root, "build", "-o", bin, "./cmd/sluice")
			sluiceBin = bin
		}
		return sluiceBin
	}
	ran := 0
	for _, name := range docNames(docs) {
		var runs []block
		for _, b := range docs[name] {
			if slices.Contains(shellLangs, b.lang) && b.marker == "run" {
				runs = append(runs, b)
			}
		}
		if len(runs) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			doc := t
			var srv *server // the document's sluice serve, once a block starts one
			for _, b := range runs {
				t.Run(fmt.Sprint(b.line), func(t *testing.T) {
					for _, c := range commands(b) {
						cmdline := c.text
						if goRunSluice.MatchString(cmdline) {
							cmdline = goRunSluice.ReplaceAllString(cmdline, buildSluice(t))
						}
						if why := missing(cmdline); why != "" {
							t.Logf("%s:%d: not run: %s", b.doc, c.line, why)
							continue
						}
						ran++
						if serveCmd.MatchString(cmdline) {
							if srv != nil {
								t.Fatalf("%s:%d: a second sluice serve in one document", b.doc, c.line)
							}
							// Started in the document's test, so that it serves its later blocks.
							srv = startServe(t, doc, root, cmdline)
							continue
						}
						if srv != nil {
							cmdline = strings.NewReplacer(
								"localhost:8080", srv.http, "127.0.0.1:8080", srv.http,
								"localhost:8081", srv.grpc, "127.0.0.1:8081", srv.grpc).Replace(cmdline)
						}
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmdline)
						cmd.Dir = root
						var stdout, stderr bytes.Buffer
						cmd.Stdout, cmd.Stderr = &stdout, &stderr
						err := cmd.Run()
						cancel()
						if err != nil {
							t.Errorf("%s:%d: %s: %v\n%s%s", b.doc, c.line, c.text, err, stdout.String(), stderr.String())
							continue
						}
						if c.want == "" {
							continue
						}
						var got, want any
						if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
							t.Errorf("%s:%d: %s printed %q, not the JSON the document shows: %v", b.doc, c.line, c.text, stdout.String(), err)
						} else if json.Unmarshal([]byte(c.want), &want); !sameJSON(got, want) {
							t.Errorf("%s:%d: %s printed\n%s\nbut the document shows\n%s", b.doc, c.line, c.text, stdout.String(), c.want)
						}
					}
				})
			}
		})
	}
	if ran == 0 {
		t.Error("no shell command ran: README.md's quick start is marked run")
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []command
	}{
		{
			name: "commands, comments and a JSON output",
			text: "# a note\ncurl -s x --json '{}'\n# {\"allowed\":true}\n\nls   # trailing\n",
			want: []command{{`curl -s x --json '{}'`, 3, `{"allowed":true}`}, {"ls   # trailing", 6, ""}},
		},
		{
			name: "an output over several comment lines",
			text: "cmd\n# {\"a\": 1,\n#  \"b\": 2}\n",
			want: []command{{"cmd", 2, "{\"a\": 1,\n \"b\": 2}"}},
		},
		{
			name: "a comment that is prose is no output",
			text: "cmd\n# then this\n",
			want: []command{{"cmd", 2, ""}},
		},
		{
			name: "continued lines",
			text: "a \\\n  b \\\n  c\nd\n",
			want: []command{{"a b c", 2, ""}, {"d", 5, ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := commands(block{line: 1, text: tt.text})
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSameJSON(t *testing.T) {
	tests := []struct {
		name      string
		got, want string
		same      bool
	}{
		{"equal", `{"a":1,"b":[true,"x"]}`, `{"b":[true,"x"],"a":1}`, true},
		{"instants match any instant", `{"resetAt":1764451200600}`, `{"resetAt":1700000000000}`, true},
		{"a count is not an instant", `{"remaining":98}`, `{"remaining":99}`, false},
		{"an instant is not a count", `{"resetAt":5}`, `{"resetAt":1700000000000}`, false},
		{"a member more", `{"a":1,"b":2}`, `{"a":1}`, false},
		{"a member less", `{"a":1}`, `{"a":1,"b":2}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want any
			if err := json.Unmarshal([]byte(tt.got), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if sameJSON(got, want) != tt.same {
				t.Errorf("sameJSON(%s, %s) = %v, want %v", tt.got, tt.want, !tt.same, tt.same)
			}
		})
	}
}
