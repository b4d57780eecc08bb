package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
)

const tokensConfig = "policies:\n  a: {strategy: fixedWindow, limit: 100, window: 1h}\n"

// postAs posts a JSON body with a bearer token ("" for none) and returns the status.
func (r *running) postAs(t *testing.T, path, body, token string) int {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+r.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func writeTokens(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServeTokenFileRefusedAtStart(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"unknown scope", "check:c1\nwrite:w1\n", "line 2: unknown scope"},
		{"empty token", "admin:\n", "line 1: empty token"},
		{"whitespace in a token", "# ops\ncheck:a b\n", "line 2: the token holds ' '"},
		{"two scopes", "t\ncheck:t\n", "line 2: the token is given two scopes"},
		{"no token", "# nothing\n", "holds no token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			writeTokens(t, path, tc.file)
			var out bytes.Buffer
			code := runServe(context.Background(), []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--auth-token-file", path}, &out, &out)
			if code != 2 || !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), "--auth-token-file") || strings.Contains(out.String(), "listening") {
				t.Fatalf("exit %d, output %q: want 2, naming the flag and %q, before listening", code, out.String(), tc.want)
			}
		})
	}
}

func TestServeTokenScopes(t *testing.T) {
	dir := t.TempDir()
	cfg, tokens := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "tokens")
	writeConfig(t, cfg, tokensConfig)
	writeTokens(t, tokens, "# ops\ncheck:c1\nadmin:a1\nbare1\n")
	r := startServe(t, "--config", cfg, "--auth-token-file", tokens)
	const key = `{"policy":"a","key":"k"}`
	httpCases := []struct {
		name, path, body, token string
		want                    int
	}{
		{"check token checks", "/v1/check", key, "c1", 200},
		{"check token cannot reset", "/v1/reset", key, "c1", 403},
		{"check token cannot refund", "/v1/refund", `{"policy":"a","key":"k","cost":1}`, "c1", 403},
		{"check token cannot settle", "/v1/settle", `{"policy":"a","key":"k","reserved":2,"actual":1}`, "c1", 403},
		{"admin token checks", "/v1/check", key, "a1", 200},
		{"admin token resets", "/v1/reset", key, "a1", 200},
		{"bare token resets", "/v1/reset", key, "bare1", 200},
		{"unknown token", "/v1/check", key, "zz", 401},
	}
	for _, tc := range httpCases {
		t.Run("http/"+tc.name, func(t *testing.T) {
			if got := r.postAs(t, tc.path, tc.body, tc.token); got != tc.want {
				t.Errorf("POST %s as %q: %d, want %d", tc.path, tc.token, got, tc.want)
			}
		})
	}
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := sluicev1.NewRateLimiterClient(conn)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
	}
	grpcCases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"check token checks", func() error {
			_, err := rl.Check(as("c1"), &sluicev1.CheckRequest{Policy: "a", Key: "k"})
			return err
		}, codes.OK},
		{"check token cannot reset", func() error {
			_, err := rl.Reset(as("c1"), &sluicev1.ResetRequest{Policy: "a", Key: "k"})
			return err
		}, codes.PermissionDenied},
		{"admin token resets", func() error {
			_, err := rl.Reset(as("a1"), &sluicev1.ResetRequest{Policy: "a", Key: "k"})
			return err
		}, codes.OK},
		{"unknown token", func() error {
			_, err := rl.Check(as("zz"), &sluicev1.CheckRequest{Policy: "a", Key: "k"})
			return err
		}, codes.Unauthenticated},
	}
	for _, tc := range grpcCases {
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != tc.want {
				t.Errorf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestServeReloadsTokens changes the token file under a running sluice serve: the new tokens
// serve after SIGHUP or the next look, the removed one gets 401, and a malformed file is refused
// with the last good tokens kept.
func TestServeReloadsTokens(t *testing.T) {
	tests := []struct {
		name    string
		every   string
		trigger func(t *testing.T)
	}{
		{"SIGHUP", "1h", func(t *testing.T) {
			t.Helper()
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}},
		{"reload-every", "20ms", func(*testing.T) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, tokens := filepath.Join(dir, "sluice.yaml"), filepath.Join(dir, "tokens")
			writeConfig(t, cfg, tokensConfig)
			writeTokens(t, tokens, "admin:old-token\n")
			r := startServe(t, "--config", cfg, "--auth-token-file", tokens, "--reload-every", tc.every)
			const key = `{"policy":"a","key":"k"}`
			if got := r.postAs(t, "/v1/reset", key, "old-token"); got != 200 {
				t.Fatalf("old token at start: %d, want 200", got)
			}

			writeTokens(t, tokens, "check:new\n")
			tc.trigger(t)
			eventually(t, "the new token", func() bool { return r.postAs(t, "/v1/check", key, "new") == 200 })
			if got := r.postAs(t, "/v1/check", key, "old-token"); got != 401 {
				t.Errorf("removed token: %d, want 401", got)
			}
			if got := r.postAs(t, "/v1/reset", key, "new"); got != 403 {
				t.Errorf("new check token resets: %d, want 403", got)
			}

			// A malformed file is refused: the last good tokens keep serving.
			writeTokens(t, tokens, "check:new\nadmin:two words\n")
			tc.trigger(t)
			eventually(t, "the refusal in the log", func() bool {
				return strings.Contains(r.log.String(), "token file rejected") && strings.Contains(r.log.String(), "line 2")
			})
			if got := r.postAs(t, "/v1/check", key, "new"); got != 200 {
				t.Errorf("kept token after a refused reload: %d, want 200", got)
			}
			time.Sleep(50 * time.Millisecond) // a later look must not pick it up either
			if got := r.postAs(t, "/v1/check", key, "two"); got != 401 {
				t.Errorf("token of the refused file: %d, want 401", got)
			}
		})
	}
}
