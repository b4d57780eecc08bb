package console

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/topkeys"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzTopQuery: whatever the query string, the top route answers 200 with a list or 400/404
// with the error body, never anything else.
func FuzzTopQuery(f *testing.F) {
	for _, q := range []string{"", "window=1m", "window=1h&limit=100&policy=api", "limit=0", "policy=%zz", "a=b&a=c", "window=1m&window=1m", ";;", "limit=-1"} {
		f.Add(q)
	}
	cfg, err := config.Parse([]byte("policies:\n  api: {strategy: gcra, limit: 10, period: 1s, burst: 1}\n"))
	if err != nil {
		f.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	defer store.Close()
	keys, err := topkeys.New(topkeys.Config{})
	if err != nil {
		f.Fatal(err)
	}
	defer keys.Close()
	srv, err := server.New(cfg, store, server.Options{Local: true, Keys: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	keys.Observe("api", "k", true)
	c := &Console{cfg: Config{Server: srv, Keys: keys}}
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/v1/console/top", nil)
		req.URL.RawQuery = query
		w := httptest.NewRecorder()
		c.top(w, req)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%q: %d, not JSON: %s", query, w.Code, w.Body)
		}
		switch w.Code {
		case 200:
			if _, ok := body["policies"].([]any); !ok {
				t.Fatalf("%q: 200 without policies: %s", query, w.Body)
			}
		case 400, 404:
			if body["error"] == nil || body["code"] == nil {
				t.Fatalf("%q: %d without the error body: %s", query, w.Code, w.Body)
			}
		default:
			t.Fatalf("%q: status %d", query, w.Code)
		}
	})
}
