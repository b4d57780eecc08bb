package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/stream"
	"github.com/sluicehq/sluice/stream/pgstream"
)

// TestStreamMetricsCountEachStream interleaves two streams on one store, so that offsets (one
// log for every stream) run well past either stream's events, and reads /metrics: the events
// series counts each stream's own, and the offset is the log position it says it is.
func TestStreamMetricsCountEachStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) stream.Backend
	}{
		{"memory", func(t *testing.T) stream.Backend { return stream.NewMemory() }},
		{"postgres", func(t *testing.T) stream.Backend {
			t.Helper()
			e, err := pgstream.Open(context.Background(), postgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.open(t)
			defer b.Close()
			ctx := context.Background()
			queries := []stream.Query{
				{Name: "api-limiter", Stream: "api", WindowMs: 1000},
				{Name: "batch-limiter", Stream: "batch", WindowMs: 1000},
			}
			// 20 events on api and 46 on batch, interleaved: 66 offsets in all.
			for i := range 66 {
				s := "batch"
				if i%3 == 0 && i < 60 {
					s = "api"
				}
				if err := b.Append(ctx, []stream.Event{{Stream: s, Key: "k", At: 1_700_000_000_000}}); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range queries {
				for {
					n, err := b.Process(ctx, q, 1_700_000_000_000, 0)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						break
					}
				}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(streamCollector{b: b, queries: queries})
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			metrics := string(body)
			offsets := map[string]int64{}
			for _, q := range queries {
				st, err := b.Stats(ctx, q.Name)
				if err != nil {
					t.Fatal(err)
				}
				offsets[q.Name] = st.Offset
			}
			// The last api event is the 58th appended, the last batch one the 66th; with
			// PostgreSQL the log's sequence may have started elsewhere, hence Stats.
			if offsets["batch-limiter"] <= offsets["api-limiter"] || offsets["api-limiter"] <= 20 {
				t.Errorf("offsets %v: the two streams should share one log", offsets)
			}
			for _, want := range []string{
				`sluice_stream_events_total{query="api-limiter",stream="api"} 20` + "\n",
				`sluice_stream_events_total{query="batch-limiter",stream="batch"} 46` + "\n",
				fmt.Sprintf(`sluice_stream_offset{query="api-limiter",stream="api"} %d`+"\n", offsets["api-limiter"]),
				fmt.Sprintf(`sluice_stream_offset{query="batch-limiter",stream="batch"} %d`+"\n", offsets["batch-limiter"]),
				"# HELP sluice_stream_offset The log offset a query has consumed through. Offsets are shared by all streams",
				"# TYPE sluice_stream_events_total counter",
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q:\n%s", want, metrics)
				}
			}
		})
	}
}
