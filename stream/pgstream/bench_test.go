package pgstream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stream"
)

// BenchmarkAppendProcess is end-to-end throughput on PostgreSQL: one goroutine appends b.N
// events in batches of 1000 over 1000 keys while another processes them in batches of 10 000;
// events/s counts an event once it is processed.
func BenchmarkAppendProcess(b *testing.B) {
	e, _, _ := pgEngine(b)
	ctx := context.Background()
	q := stream.Query{Name: "bench", Stream: "s", WindowMs: 1000, Quota: 100}
	const batch = 1000
	evs := make([]stream.Event, batch)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < b.N; i += batch {
			for j := range evs {
				n := i + j
				evs[j] = stream.Event{Stream: "s", Key: fmt.Sprint("k", n%1000), At: t0 + int64(n/50)}
			}
			if err := e.Append(ctx, evs[:min(batch, b.N-i)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	done := 0
	for done < b.N && !b.Failed() {
		n, err := e.Process(ctx, q, 0, 10_000)
		if err != nil {
			b.Fatal(err)
		}
		done += n
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkDecisionDelay measures, in real time, how long after a window's end its decision is
// read by a gateway polling every 10 ms: 200 keys each over quota, 250 ms windows closed by the
// watermark or an idle flush of 100 ms, a processor looping on the wall clock. It reports the
// p50 and p99 delay from window end to the gateway reading the decision (the window closes at
// its end at the earliest, grace being 0).
func BenchmarkDecisionDelay(b *testing.B) {
	e, _, _ := pgEngine(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := stream.Query{Name: "delay", Stream: "s", WindowMs: 250, IdleFlushMs: 100, Quota: 2}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { // traffic: every key, 3 requests per 50 ms
		for ctx.Err() == nil {
			evs := make([]stream.Event, 0, 600)
			for k := range 200 {
				for range 3 {
					evs = append(evs, stream.Event{Stream: "s", Key: fmt.Sprint("k", k)})
				}
			}
			if err := e.Append(ctx, evs); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Go(func() { // the processor
		for ctx.Err() == nil {
			n, err := e.Process(ctx, q, time.Now().UnixMilli(), 10_000)
			if err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
			if n == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	})
	var delays []float64
	b.ResetTimer()
	for after := int64(0); len(delays) < 2000 && !b.Failed(); {
		ds, err := e.Decisions(ctx, "s", after, 1000)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now().UnixMilli()
		for _, d := range ds {
			delays = append(delays, float64(now-d.WindowEnd))
			after = d.Offset
		}
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(delays)
	b.ReportMetric(delays[len(delays)/2], "p50-ms")
	b.ReportMetric(delays[len(delays)*99/100], "p99-ms")
}
