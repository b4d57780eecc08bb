package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/stream"
)

// streamCollector exposes each stream query's progress on /metrics, read from the backend's Stats
// when Prometheus scrapes: how far the query has consumed its stream (as a log position and as a
// count of the stream's events), its open windows, and the events that came after their window
// had closed, which are in no window (late: counted, never silently dropped).
type streamCollector struct {
	b       stream.Backend
	queries []stream.Query
}

var (
	// Offsets number one log that every stream of the store shares, so the offset is no count of
	// a stream's events; the events series is.
	streamOffsetDesc = prometheus.NewDesc("sluice_stream_offset",
		"The log offset a query has consumed through. Offsets are shared by all streams of the streams store: this is a position, not a count of the stream's events (see sluice_stream_events_total).",
		[]string{"query", "stream"}, nil)
	streamEventsDesc = prometheus.NewDesc("sluice_stream_events_total",
		"Events of its stream a query has consumed, since it was first registered or last reset.", []string{"query", "stream"}, nil)
	streamOpenDesc = prometheus.NewDesc("sluice_stream_open_windows",
		"Windows a query holds open.", []string{"query", "stream"}, nil)
	streamLateDesc = prometheus.NewDesc("sluice_stream_late_events_total",
		"Events that arrived after their window had closed: counted here, in no window.", []string{"query", "stream"}, nil)
	streamLateCostDesc = prometheus.NewDesc("sluice_stream_late_cost_total",
		"The cost of the late events.", []string{"query", "stream"}, nil)
	streamStatsErrorsDesc = prometheus.NewDesc("sluice_stream_stats_errors",
		"Queries whose progress could not be read at this scrape.", nil, nil)
)

// scrapeTimeout bounds the Stats calls of one scrape.
const scrapeTimeout = 2 * time.Second

func (c streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamOffsetDesc, streamEventsDesc, streamOpenDesc, streamLateDesc, streamLateCostDesc, streamStatsErrorsDesc} {
		ch <- d
	}
}

func (c streamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	failed := 0
	for _, q := range c.queries {
		st, err := c.b.Stats(ctx, q.Name)
		if err != nil {
			failed++
			continue
		}
		ch <- prometheus.MustNewConstMetric(streamOffsetDesc, prometheus.GaugeValue, float64(st.Offset), q.Name, q.Stream)
		ch <- prometheus.MustNewConstMetric(streamEventsDesc, prometheus.CounterValue, float64(st.Events), q.Name, q.Stream)
		ch <- prometheus.MustNewConstMetric(streamOpenDesc, prometheus.GaugeValue, float64(st.Open), q.Name, q.Stream)
		ch <- prometheus.MustNewConstMetric(streamLateDesc, prometheus.CounterValue, float64(st.Late), q.Name, q.Stream)
		ch <- prometheus.MustNewConstMetric(streamLateCostDesc, prometheus.CounterValue, float64(st.LateSum), q.Name, q.Stream)
	}
	ch <- prometheus.MustNewConstMetric(streamStatsErrorsDesc, prometheus.GaugeValue, float64(failed))
}
