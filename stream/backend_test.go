package stream_test

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/streamtest"
	"github.com/sluicehq/sluice/stream"
)

// TestMemoryBackend runs the Backend contract against MemoryEngine, on a clock the test moves.
func TestMemoryBackend(t *testing.T) {
	streamtest.Run(t, func(t *testing.T) streamtest.Harness {
		var clock atomic.Int64
		clock.Store(streamtest.T0)
		m := stream.NewMemoryWith(stream.MemoryConfig{Now: clock.Load})
		t.Cleanup(func() { m.Close() })
		return streamtest.Harness{
			Backend: m,
			Reopen:  func() stream.Backend { return m },
			Advance: func(ms int64) { clock.Add(ms) },
			Now:     clock.Load,
		}
	})
}
