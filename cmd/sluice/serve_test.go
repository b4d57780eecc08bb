package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jackc/pgx/v5"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/stream"
	"github.com/sluicehq/sluice/stream/pgstream"
)

// syncBuffer is a bytes.Buffer safe for the server's logger and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond until it holds, for at most 10 s: the server runs in its own goroutines.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type running struct {
	http, grpc string
	log        *syncBuffer
	stop       context.CancelFunc
	exit       chan int
}

// startServe runs sluice serve in this process on free loopback ports.
func startServe(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{log: &syncBuffer{}, stop: cancel, exit: make(chan int, 1)}
	args = append([]string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...)
	go func() { r.exit <- runServe(ctx, args, r.log, r.log) }()
	listening := regexp.MustCompile(`listening"? http=(\S+) grpc=(\S+)`)
	eventually(t, "sluice serve to listen", func() bool {
		m := listening.FindStringSubmatch(r.log.String())
		if m != nil {
			r.http, r.grpc = m[1], m[2]
		}
		return m != nil
	})
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.exit:
		case <-time.After(15 * time.Second):
			t.Error("sluice serve did not stop")
		}
	})
	return r
}

func (r *running) check(t *testing.T, policy, key string) (int, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
	resp, err := http.Post("http://"+r.http+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServeSampleConfig(t *testing.T) {
	r := startServe(t, "--config", "../../examples/serve/sluice.yaml")
	for i := range 100 {
		if code, d := r.check(t, "partner-api", "acme"); code != 200 || d["allowed"] != true {
			t.Fatalf("check %d: %d %v", i, code, d)
		}
	}
	// The bucket refills a token every 0.6 s: on a busy machine the 100 checks may have earned a
	// few, but no more than a few.
	for i := 101; ; i++ {
		_, d := r.check(t, "partner-api", "acme")
		if d["allowed"] == false {
			if d["retryAfterMs"].(float64) < 1 {
				t.Fatalf("check %d: %v, want denied with a retry", i, d)
			}
			break
		}
		if i == 110 {
			t.Fatalf("check %d still allowed: the capacity of 100 did not hold", i)
		}
	}
	if code, _ := r.check(t, "no-such-model", "acme"); code != 404 {
		t.Errorf("unknown policy: %d, want 404", code)
	}

	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v, %v", h, err)
	}
	d, err := sluicev1.NewRateLimiterClient(conn).Check(context.Background(), &sluicev1.CheckRequest{Policy: "api", Key: "k"})
	if err != nil || !d.GetAllowed() {
		t.Fatalf("gRPC check: %v, %v", d, err)
	}
}

func TestServeReloadsAndShutsDown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  a: {strategy: fixedWindow, limit: 2, window: 1h}\n")
	r := startServe(t, "--config", path, "--reload-every", "20ms")
	r.check(t, "a", "k")

	// A changed file swaps in atomically; the unchanged policy keeps its state.
	writeConfig(t, path, "policies:\n  a: {strategy: fixedWindow, limit: 2, window: 1h}\n  b: {strategy: gcra, limit: 1, period: 1s, burst: 1}\n")
	eventually(t, "the new policy", func() bool { code, _ := r.check(t, "b", "k"); return code == 200 })
	if _, d := r.check(t, "a", "k"); d["remaining"] != float64(0) {
		t.Errorf("a after the reload: %v, want its second check of two (remaining 0)", d)
	}

	// An invalid file is rejected and the old config keeps serving.
	writeConfig(t, path, "policies:\n  b: {strategy: gcra, limit: 0, period: 1s, burst: 1}\n")
	eventually(t, "the rejection to be logged", func() bool {
		return strings.Contains(r.log.String(), "config rejected")
	})
	if code, _ := r.check(t, "a", "k"); code != 200 {
		t.Errorf("a after an invalid reload: %d, want the old config still serving", code)
	}
	if !strings.Contains(r.log.String(), "policies.b.limit") {
		t.Errorf("the rejection does not name the offending path:\n%s", r.log.String())
	}

	r.stop()
	select {
	case code := <-r.exit:
		if code != 0 {
			t.Errorf("exit %d after a graceful shutdown, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("sluice serve did not stop")
	}
	r.exit <- 0 // for the cleanup
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeConfig(t, bad, "policies:\n  api: {strategy: tokenBucket, capacity: 10, refillPerSec: -1}\n")
	idle := filepath.Join(dir, "idle.yaml")
	writeConfig(t, idle, "policies:\n  hot: {strategy: gcra, limit: 1, period: 1s, burst: 1, lease: true, nearCache: true}\n")
	streamsOnly := filepath.Join(dir, "streams.yaml")
	writeConfig(t, streamsOnly, "streams:\n  queries:\n    rate-limiter: {stream: api, window: 2s, quota: 5}\n    audit: {stream: api, window: 1m}\n")
	pgStreams := filepath.Join(dir, "pg.yaml")
	writeConfig(t, pgStreams, "streams:\n  store: postgres://u:s3cret@db/sluice\n  queries:\n    q: {stream: api, window: 2s}\n")
	badStore := filepath.Join(dir, "badstore.yaml")
	writeConfig(t, badStore, "store: mysql://db/sluice\n")
	plans := filepath.Join(dir, "plans.yaml")
	writeConfig(t, plans, "policies:\n  api:\n    plan: free\n    plans:\n      free: {strategy: gcra, limit: 10, period: 1m, burst: 1}\n      pro: {limits: [{strategy: tokenBucket, capacity: 100, refillPerSec: 1}]}\n")
	badPlan := filepath.Join(dir, "badplan.yaml")
	writeConfig(t, badPlan, "policies:\n  api:\n    plan: free\n    plans:\n      free: {strategy: gcra, limit: 10, period: 1m, burst: 1}\n      pro: {strategy: gcra, limit: -100, period: 1m, burst: 1}\n")
	noPlan := filepath.Join(dir, "noplan.yaml")
	writeConfig(t, noPlan, "policies:\n  api:\n    plan: fre\n    plans: {free: {strategy: gcra, limit: 10, period: 1m, burst: 1}}\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"lease on memory warns", []string{"--config", idle}, 0, "warning: policies.hot.lease: does nothing on the embedded store"},
		{"nearCache on memory warns", []string{"--config", idle}, 0, "warning: policies.hot.nearCache: does nothing on the embedded store"},
		{"lease over redis is quiet", []string{"--config", idle, "--store", "redis://127.0.0.1:6379"}, 0, "ok, 1 policies\n"},
		{"streams-only names its queries", []string{"--config", streamsOnly}, 0, `ok, 0 policies, 2 stream queries ["audit" "rate-limiter"]`},
		{"stored definitions not checked", []string{"--config", pgStreams}, 0, "not checked without --connect: whether streams.store postgres://u:xxxxx@db/sluice holds a query under another definition"},
		{"unsupported store", []string{"--config", badStore}, 1, `unsupported store "mysql://db/sluice"`},
		{"unsupported --store", []string{"--config", idle, "--store", "redis:/typo"}, 1, "unsupported store"},
		{"sample config", []string{"--config", "../../examples/serve/sluice.yaml"}, 0, "ok, 7 policies"},
		{"plans", []string{"--config", plans}, 0, "ok, 1 policies\n"},
		{"names the offending plan's path", []string{"--config", badPlan}, 1, "policies.api.plans.pro.limit: must be above 0"},
		{"names the default plan's path", []string{"--config", noPlan}, 1, `policies.api.plan: names no plan of this policy, got "fre"`},
		{"names the offending path", []string{"--config", bad}, 1, "policies.api.refillPerSec"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, 1, "no such file"},
		{"no --config", nil, 2, "pass --config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(append([]string{"validate"}, tt.args...), &out, &out); code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, out.String())
			}
			if !strings.Contains(out.String(), tt.contains) {
				t.Errorf("output %q lacks %q", out.String(), tt.contains)
			}
		})
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key, returning their paths.
func writeCert(t *testing.T, dir, name string) (certPath, keyPath string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeConfig(t, certPath, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeConfig(t, keyPath, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return certPath, keyPath, cert
}

func TestServeMutualTLSAndTokens(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey, srvX509 := writeCert(t, dir, "server")
	cliCert, cliKey, _ := writeCert(t, dir, "client")
	tokens := filepath.Join(dir, "tokens")
	writeConfig(t, tokens, "# one a line\ns3cret\n")
	cfg := filepath.Join(dir, "sluice.yaml")
	writeConfig(t, cfg, "policies:\n  api: {strategy: fixedWindow, limit: 5, window: 1m}\n")
	r := startServe(t, "--config", cfg, "--tls-cert", srvCert, "--tls-key", srvKey,
		"--tls-client-ca", cliCert, "--auth-token-file", tokens)

	roots := x509.NewCertPool()
	roots.AddCert(srvX509)
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	post := func(certs []tls.Certificate, token string) (int, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
		req, _ := http.NewRequest("POST", "https://"+r.http+"/v1/check", strings.NewReader(`{"policy":"api","key":"k"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post([]tls.Certificate{pair}, "s3cret"); err != nil || code != 200 {
		t.Errorf("client certificate and token: %d, %v; want 200", code, err)
	}
	if code, err := post([]tls.Certificate{pair}, "wrong"); err != nil || code != 401 {
		t.Errorf("a wrong token: %d, %v; want 401", code, err)
	}
	if _, err := post(nil, "s3cret"); err == nil {
		t.Error("a client without a certificate was served")
	}
	if resp, err := http.Post("http://"+r.http+"/v1/check", "application/json", strings.NewReader(`{}`)); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS port: %d, want 400", resp.StatusCode)
		}
	}
}

func TestServeReloadsOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "policies:\n  a: {strategy: fixedWindow, limit: 2, window: 1h}\n")
	r := startServe(t, "--config", path, "--reload-every", "1h") // only the signal reloads
	writeConfig(t, path, "policies:\n  b: {strategy: fixedWindow, limit: 2, window: 1h}\n")
	if code, _ := r.check(t, "b", "k"); code != 404 {
		t.Fatalf("b before the signal: %d, want 404", code)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reload on SIGHUP", func() bool { code, _ := r.check(t, "b", "k"); return code == 200 })
}

// TestValidateConnectStreams: validate --connect compares the config's stream queries with the
// definitions streams.store holds, as serve does at start, and changes nothing.
func TestValidateConnectStreams(t *testing.T) {
	url := postgresURL(t)
	dir := t.TempDir()
	e, err := pgstream.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(context.Background(), stream.Query{Name: "q", Stream: "api", WindowMs: 2000}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	config := func(name, queries string) string {
		path := filepath.Join(dir, name)
		writeConfig(t, path, "streams:\n  store: "+url+"\n  queries:\n"+queries)
		return path
	}
	tests := []struct {
		name     string
		config   string
		code     int
		contains string
	}{
		{"the stored definition", config("same.yaml", "    q: {stream: api, window: 2s}\n"), 0, "the stream queries agree with streams.store"},
		{"a query not stored yet", config("new.yaml", "    q: {stream: api, window: 2s}\n    other: {stream: api, window: 1m}\n"), 0, "agree"},
		{"a changed window", config("changed.yaml", "    q: {stream: api, window: 3s}\n"), 1, `query definition changed: "q"`},
		{"a changed stream", config("stream.yaml", "    q: {stream: web, window: 2s}\n"), 1, "--reset-query NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run([]string{"validate", "--config", tt.config, "--connect"}, &out, &out); code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, out.String())
			}
			if !strings.Contains(out.String(), tt.contains) {
				t.Errorf("output %q lacks %q", out.String(), tt.contains)
			}
		})
	}
	// Nothing was registered by validate: "other" is still unknown to the store.
	var n int
	at := strings.Index(url, "sluice_schema=")
	conn, err := pgx.Connect(context.Background(), url[:at-1]) // the option is sluice's, not the server's
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	schema := url[at+len("sluice_schema="):]
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "queries"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d stored queries (%v), want the 1 registered before", n, err)
	}
}
