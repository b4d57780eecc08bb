package console

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memory"
)

// TestSlowFeedDropped: a browser that stops reading is cut off once it is feedBuffer seconds
// behind, and the others go on.
func TestSlowFeedDropped(t *testing.T) {
	cfg, err := config.Parse([]byte("policies:\n  api: {strategy: gcra, limit: 10, period: 1s, burst: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Config{SweepInterval: -1})
	defer store.Close()
	srv, err := server.New(cfg, store, server.Options{Local: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // no sampler: this test takes the readings
	c.closed = false
	slow, _, ok1 := c.subscribe()
	fast, _, ok2 := c.subscribe()
	if !ok1 || !ok2 {
		t.Fatal("subscribe refused")
	}
	at := time.UnixMilli(1_700_000_000_000)
	for i := range feedBuffer + 1 {
		c.read(context.Background(), at.Add(time.Duration(i)*time.Second))
		<-fast.ch
	}
	for range feedBuffer {
		<-slow.ch
	}
	if _, open := <-slow.ch; open {
		t.Error("the slow feed is still open")
	}
	if _, held := c.feeds[fast]; !held || len(c.feeds) != 1 {
		t.Errorf("feeds held: %d, want the fast one only", len(c.feeds))
	}
	c.unsubscribe(slow) // idempotent after the drop
	c.Close()
	if _, open := <-fast.ch; open {
		t.Error("Close left a feed open")
	}
}
