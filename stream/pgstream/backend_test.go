package pgstream

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/streamtest"
	"github.com/sluicehq/sluice/stream"
)

// TestBackend runs the stream.Backend contract against the Engine, each test in a schema of its
// own. Leases expire by the database clock, which the skew moves forward for the test.
func TestBackend(t *testing.T) {
	streamtest.Run(t, func(t *testing.T) streamtest.Harness {
		e, pool, schema := pgEngine(t)
		return streamtest.Harness{
			Backend: e,
			Reopen: func() stream.Backend {
				e2, err := New(pool, Config{Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e2.Close() })
				return e2
			},
			Advance: func(ms int64) { e.skew.Add(ms) },
			Now:     func() int64 { return time.Now().UnixMilli() + e.skew.Load() },
			Slack:   60_000,
		}
	})
}
