package client_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// An accepted stream outlives start, Options.Timeout and the http.Client's Timeout, and carries
// the token and the caller's headers; ctx still ends it.
func TestStreamLives(t *testing.T) {
	next := make(chan struct{})
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, line := range []string{"first\n", "second\n"} {
			_, _ = w.Write([]byte(line))
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(next) }) // runs first
	// A Timeout of 1 ns fails every other call: Stream must do without it.
	c := newClient(t, srv.URL, client.Options{Token: "secret", Timeout: time.Nanosecond, HTTPClient: &http.Client{Timeout: time.Nanosecond}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start, endStart := context.WithTimeout(context.Background(), 5*time.Second)
	h := http.Header{}
	h.Set("Last-Event-ID", "7")
	resp, err := c.Stream(ctx, start, "/v1/streams/api/decisions/watch?after=7", h)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	defer resp.Body.Close()
	if got := <-seen; got.Get("Authorization") != "Bearer secret" || got.Get("Last-Event-ID") != "7" {
		t.Errorf("the server saw headers %v, want the token and Last-Event-ID", got)
	}
	endStart() // the answer came: start no longer matters
	body := bufio.NewReader(resp.Body)
	for _, want := range []string{"first\n", "second\n"} {
		line, err := body.ReadString('\n')
		if line != want || err != nil {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
		next <- struct{}{}
	}
	cancel()
	if _, err := body.ReadString('\n'); err == nil {
		t.Error("a read succeeded after ctx ended")
	}
}

func TestStreamErrors(t *testing.T) {
	answer := func(status int, body string) *httptest.Server {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // runs first
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	tests := []struct {
		name    string
		url     string
		opts    client.Options
		want    func(error) bool
		wantMsg string // the message begins so
	}{
		{"refused token", answer(401, `{"error":"bad or missing bearer token","code":"unauthorized"}`).URL, client.Options{},
			func(err error) bool { return errors.Is(err, client.ErrUnauthorized) }, "client: /v1/watch: 401"},
		{"no such route", answer(404, `404 page not found`).URL, client.Options{}, func(err error) bool {
			var ce *client.Error
			return errors.As(err, &ce) && ce.Status == 404 && ce.Code == "not_found"
		}, "client: /v1/watch: 404"},
		{"server error", answer(503, `{"error":"store down","code":"unavailable"}`).URL, client.Options{},
			func(err error) bool { return errors.Is(err, sluice.ErrUnavailable) }, "client: /v1/watch: 503"},
		{"no answer within Options.Timeout", hang.URL, client.Options{Timeout: 20 * time.Millisecond},
			func(err error) bool {
				return errors.Is(err, sluice.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded)
			}, "client: /v1/watch: context deadline exceeded"},
		{"unreachable", gone.URL, client.Options{},
			func(err error) bool { return errors.Is(err, sluice.ErrUnavailable) }, "client: /v1/watch: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.url, tt.opts)
			resp, err := c.Stream(context.Background(), context.Background(), "/v1/watch?after=0", nil)
			if err == nil {
				resp.Body.Close()
				t.Fatal("Stream succeeded, want an error")
			}
			if !tt.want(err) || !strings.HasPrefix(err.Error(), tt.wantMsg) {
				t.Errorf("Stream: %v (%#v), want one that begins %q", err, err, tt.wantMsg)
			}
		})
	}
}
