// Package console is sluice serve's operator console: a browser UI at /ui/ (its assets embedded
// in the binary) and the routes under /v1/console/ that feed it (docs/console.md).
//
// A Console samples the server's counts once a second (server.Totals) into a 15-minute history
// and pushes each second to the browsers that follow its live feed, so that no chart polls. Top
// keys come from a topkeys.Tracker the server tells of every check (server.Options.Keys), off
// the check's path. The HTTP front end (package httpapi) mounts the routes behind its own
// authentication: every route needs a check-scope token, and the console acts only through the
// API's admin routes.
package console

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/topkeys"
	"github.com/sluicehq/sluice/stream"
)

// Defaults of Config.
const (
	// DefaultMaxFeeds is how many live feeds a server holds at once when Config.MaxFeeds is 0.
	DefaultMaxFeeds = 64
	// feedBuffer is how many seconds a feed may fall behind before it is cut off.
	feedBuffer = 8
	step       = time.Second
)

// Config configures a Console.
type Config struct {
	// Server is the server the console shows; required.
	Server *server.Server
	// Keys is the tracker the server feeds (server.Options.Keys); nil means top keys are off and
	// their route answers 501.
	Keys *topkeys.Tracker
	// Store names the kind of store for the overview: "memory", "redis" or "postgres".
	Store string
	// Streams and Queries are stream mode's backend and queries; nil when stream mode is off.
	Streams stream.Backend
	Queries []stream.Query
	// MaxFeeds bounds the live feeds held at once; 0 means DefaultMaxFeeds. One more is answered 503.
	MaxFeeds int
}

// Console is the console of one server. Its methods are safe for concurrent use.
type Console struct {
	cfg  Config
	stop context.CancelFunc
	done chan struct{}

	mu     sync.Mutex         // guards the fields below
	hist   history            // the last 15 minutes
	last   server.Totals      // the reading hist's newest point ends at
	ready  error              // the server's readiness at the last reading
	feeds  map[*feed]struct{} // the live feeds, each sent every point
	closed bool               // Close has run: no new feeds
}

// feed is one browser's live feed: the events to write, dropped when it falls behind.
type feed struct {
	ch chan []byte // closed when the console drops the feed
}

// New starts the console's sampler: one goroutine, stopped by Close.
func New(cfg Config) (*Console, error) {
	if cfg.Server == nil {
		return nil, fmt.Errorf("console: Config.Server is required")
	}
	if cfg.MaxFeeds <= 0 {
		cfg.MaxFeeds = DefaultMaxFeeds
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Console{cfg: cfg, stop: stop, done: make(chan struct{}), feeds: map[*feed]struct{}{}}
	first, err := cfg.Server.Totals()
	if err != nil {
		stop()
		return nil, fmt.Errorf("console: reading the server's counts: %w", err)
	}
	c.last = first
	go c.sample(ctx)
	return c, nil
}

// Close stops the sampler and ends every live feed. It is idempotent.
func (c *Console) Close() {
	c.stop()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for f := range c.feeds {
		delete(c.feeds, f)
		close(f.ch)
	}
}

// sample reads the server's counts every second until ctx ends.
func (c *Console) sample(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.read(ctx, now)
		}
	}
}

// read takes one reading at now, adds its point and sends it to the feeds.
func (c *Console) read(ctx context.Context, now time.Time) {
	cur, err := c.cfg.Server.Totals()
	if err != nil {
		return // a collector failed: the next second's point covers both
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	ready := c.cfg.Server.Ready(rctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := diff(now.Truncate(step).UnixMilli(), c.last, cur)
	c.last, c.ready = cur, ready
	c.fill(p.t)
	c.hist.add(p)
	data, err := jsonEvent("tick", p.tick(ready))
	if err != nil {
		return
	}
	for f := range c.feeds {
		select {
		case f.ch <- data:
		default: // behind by feedBuffer seconds: cut off; it reconnects and gets the history
			delete(c.feeds, f)
			close(f.ch)
		}
	}
}

// fill adds an empty point for each second missed before t (a stalled sampler), so that the
// history's points stay one step apart. The caller holds mu.
func (c *Console) fill(t int64) {
	if len(c.hist.ring) == 0 {
		return
	}
	newest := c.hist.ring[(c.hist.next+len(c.hist.ring)-1)%len(c.hist.ring)].t
	ms := step.Milliseconds()
	for at, n := newest+ms, 0; at < t && n < historyLen; at, n = at+ms, n+1 {
		c.hist.add(point{t: at})
	}
}

// subscribe adds a feed and returns it with the history event to send first; ok is false when
// MaxFeeds are held already or the console is closed.
func (c *Console) subscribe() (f *feed, history []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.feeds) >= c.cfg.MaxFeeds {
		return nil, nil, false
	}
	data, err := encodeHistory(c.hist.points(), step.Milliseconds())
	if err != nil {
		return nil, nil, false
	}
	f = &feed{ch: make(chan []byte, feedBuffer)}
	c.feeds[f] = struct{}{}
	return f, event("history", data), true
}

// unsubscribe drops f, if the console has not already.
func (c *Console) unsubscribe(f *feed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.feeds[f]; ok {
		delete(c.feeds, f)
		close(f.ch)
	}
}
