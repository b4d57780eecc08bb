package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stream"
)

const streamsConfig = `
streams:
  queries:
    limiter: {stream: api-requests, window: 1s, idleFlush: 200ms, quota: 2}
`

// TestServeStreams runs stream mode end to end in sluice serve: ingest, the runner's windows and
// decisions, the pull API, and a decision watch that ends when the server shuts down.
func TestServeStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, streamsConfig)
	r := startServe(t, "--config", path)
	base := "http://" + r.http

	var events []string
	for i := range 4 {
		events = append(events, fmt.Sprintf(`{"stream":"api-requests","key":"noisy","id":"n%d"}`, i))
	}
	events = append(events, `{"stream":"api-requests","key":"quiet"}`)
	resp, err := http.Post(base+"/v1/usage", "application/json", strings.NewReader(`{"events":[`+strings.Join(events, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	var appended struct{ Appended int }
	json.NewDecoder(resp.Body).Decode(&appended)
	resp.Body.Close()
	if resp.StatusCode != 200 || appended.Appended != 5 {
		t.Fatalf("usage: %d, %+v", resp.StatusCode, appended)
	}

	watch, err := http.Get(base + "/v1/streams/api-requests/decisions/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(watch.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	pull := func(kind string) []map[string]any {
		resp, err := http.Get(base + "/v1/streams/api-requests/" + kind + "?after=0&limit=10")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string][]map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return out[kind]
	}
	var windows []map[string]any
	eventually(t, "the runner to close the windows", func() bool {
		windows = pull("windows")
		return len(windows) >= 2
	})
	counts := map[any]any{}
	for _, w := range windows {
		counts[w["key"]] = w["count"]
	}
	if counts["noisy"] != 4.0 || counts["quiet"] != 1.0 {
		t.Errorf("windows %v", windows)
	}
	if ds := pull("decisions"); len(ds) != 1 || ds[0]["key"] != "noisy" || ds[0]["overBy"] != 2.0 {
		t.Errorf("decisions %v", ds)
	}

	// An event for a window that has closed is late: in no window, and counted on /metrics.
	late := fmt.Sprintf(`{"events":[{"stream":"api-requests","key":"quiet","at":%d}]}`, int64(windows[0]["start"].(float64)))
	if resp, err := http.Post(base+"/v1/usage", "application/json", strings.NewReader(late)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("late usage: %v %v", resp, err)
	}
	eventually(t, "the late event on /metrics", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `sluice_stream_late_events_total{query="limiter",stream="api-requests"} 1`)
	})

	got := ""
	for !strings.HasPrefix(got, "data: ") {
		select {
		case got = <-lines:
		case <-time.After(5 * time.Second):
			t.Fatal("no decision on the watch")
		}
	}
	if !strings.Contains(got, `"key":"noisy"`) {
		t.Errorf("watch: %s", got)
	}

	// Shutting down ends the watch at once rather than after the grace period.
	stopped := time.Now()
	r.stop()
	select {
	case code := <-r.exit:
		if code != 0 {
			t.Errorf("exit %d:\n%s", code, r.log.String())
		}
		r.exit <- code // for startServe's cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("sluice serve did not stop with a watch open")
	}
	for range lines { // the watch ended
	}
	if took := time.Since(stopped); took > 3*time.Second {
		t.Errorf("shutting down took %v", took)
	}
	if !strings.Contains(r.log.String(), "sluice serve: streams") {
		t.Errorf("log:\n%s", r.log.String())
	}
}

func TestServeStreamsRefusesBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, path, "streams:\n  queries:\n    q1: {stream: s, window: 1s, quota: -1}\n")
	var out syncBuffer
	if code := runServe(t.Context(), []string{"--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, &out, &out); code != 1 ||
		!strings.Contains(out.String(), "streams.queries.q1.quota") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

func TestStreamsNotConfiguredIs404(t *testing.T) {
	r := startServe(t)
	resp, err := http.Get("http://" + r.http + "/v1/streams/s/windows")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("status %d, want 404", resp.StatusCode)
	}
}

func TestStreamRunnerStopIsIdempotent(t *testing.T) {
	b := stream.NewMemory()
	defer b.Close()
	q := stream.Query{Name: "q", Stream: "s", WindowMs: 1000}
	if err := b.Register(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	r := startStreamRunner(b, []stream.Query{q}, slog.New(slog.DiscardHandler))
	r.stop()
	r.stop()
}

// A query stored in PostgreSQL with another definition is refused at start, naming the flag that
// resets it; --reset-query starts it afresh under the new one, and an unknown name is refused.
func TestServeResetQuery(t *testing.T) {
	url := postgresURL(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	withWindow := func(window string) {
		writeConfig(t, path, fmt.Sprintf("streams:\n  store: %q\n  queries:\n    limiter: {stream: api-requests, window: %s, quota: 2}\n", url, window))
	}
	serve := func(args ...string) (int, string) {
		t.Helper()
		var out syncBuffer
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		go func() {
			done <- runServe(ctx, append([]string{"--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...), &out, &out)
		}()
		select {
		case code := <-done: // refused at start
			cancel()
			return code, out.String()
		case <-time.After(2 * time.Second): // serving: stop it
			cancel()
			return <-done, out.String()
		}
	}
	withWindow("1s")
	if code, out := serve(); code != 0 {
		t.Fatalf("first start: exit %d\n%s", code, out)
	}
	withWindow("2s")
	if code, out := serve(); code != 1 || !strings.Contains(out, "--reset-query limiter") {
		t.Fatalf("start with a changed query: exit %d, want 1 naming --reset-query\n%s", code, out)
	}
	if code, out := serve("--reset-query", "nope"); code != 1 || !strings.Contains(out, "--reset-query nope: no such query") {
		t.Fatalf("reset of an unknown query: exit %d\n%s", code, out)
	}
	if code, out := serve("--reset-query", "limiter"); code != 0 || !strings.Contains(out, "stream query reset") {
		t.Fatalf("start with --reset-query: exit %d\n%s", code, out)
	}
	if code, out := serve(); code != 0 {
		t.Fatalf("start after the reset: exit %d\n%s", code, out)
	}
}
