// Package batch coalesces concurrent checks into one call of a shared store: one script run on
// Redis, one statement and one commit on PostgreSQL. The store decides each check of a call as its
// own group, in arrival order, at one instant, exactly as the same checks sent one by one in that
// order would be decided.
//
// The first check to find no open batch leads one: it runs at once when a slot is free (a lone
// caller never waits for company), and otherwise waits for one while later checks join its batch.
// Only checks with the same explicit now (or 0) and the same number of limits share a batch.
//
// A batch gives up with the first of its callers to give up (its deadline is the earliest of
// theirs): a check must never be decided after its caller was told it was not, and the checks of
// one service share one store timeout, so their deadlines differ little.
package batch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// A Batcher groups checks into calls of type C, which run answers with a reply of R. It is safe for
// concurrent use.
type Batcher[C, R any] struct {
	max     int
	slots   chan struct{} // a token per call running
	newCall func(now int64, limits int) C
	add     func(c C, p *sluice.Policy, key string, cost int64) C
	run     func(ctx context.Context, c C) ([]R, error)

	mu   sync.Mutex   // guards open and every field of the open batch
	open *batch[C, R] // the batch new checks join; nil when none waits
}

type batch[C, R any] struct {
	now      int64
	limits   int // limits per check
	c        C
	checks   int
	deadline time.Time // the earliest of its checks' deadlines; zero: none had one
	done     chan struct{}
	reply    []R // written before done closes
	err      error
}

// New returns a Batcher of at most max checks a call. A call runs while it holds a token of slots
// (a buffered channel: its capacity is how many calls run at once), which the caller may share
// with other work that is to count against the same bound. newCall starts a call of checks of
// limits limits at now, add appends a check to it, and run runs it.
func New[C, R any](max int, slots chan struct{}, newCall func(now int64, limits int) C,
	add func(c C, p *sluice.Policy, key string, cost int64) C, run func(ctx context.Context, c C) ([]R, error)) *Batcher[C, R] {
	return &Batcher[C, R]{max: max, slots: slots, newCall: newCall, add: add, run: run}
}

// Check decides one check in a batch, and returns the reply of its call and the check's index in
// the call. A context done first is an error matching sluice.ErrUnavailable.
func (b *Batcher[C, R]) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (reply []R, i int, err error) {
	n := len(p.Limits())
	dl, hasDeadline := ctx.Deadline()
	b.mu.Lock()
	bt := b.open
	lead := bt == nil || bt.now != now || bt.limits != n || bt.checks == b.max
	if lead {
		bt = &batch[C, R]{now: now, limits: n, c: b.newCall(now, n), deadline: dl, done: make(chan struct{})}
		b.open = bt
	} else if hasDeadline && (bt.deadline.IsZero() || dl.Before(bt.deadline)) {
		bt.deadline = dl
	}
	i = bt.checks
	bt.checks++
	bt.c = b.add(bt.c, p, key, cost)
	b.mu.Unlock()

	if lead {
		select {
		case b.slots <- struct{}{}:
			b.send(bt)
		case <-ctx.Done():
			b.mu.Lock()
			if b.open == bt {
				b.open = nil
			}
			expired := !bt.deadline.IsZero() && !time.Now().Before(bt.deadline)
			b.mu.Unlock()
			if expired {
				// The batch's deadline has passed too: it will never be sent, so its callers need
				// not wait for a slot to learn that.
				bt.err = unavailable(context.DeadlineExceeded)
				close(bt.done)
			} else {
				// The checks that joined still need their call.
				go func() {
					b.slots <- struct{}{}
					b.send(bt)
				}()
			}
			return nil, 0, unavailable(ctx.Err())
		}
	} else {
		select {
		case <-bt.done:
		case <-ctx.Done():
			return nil, 0, unavailable(ctx.Err())
		}
	}
	return bt.reply, i, bt.err
}

// send closes bt to newcomers, runs it and releases its slot.
func (b *Batcher[C, R]) send(bt *batch[C, R]) {
	b.mu.Lock()
	if b.open == bt {
		b.open = nil
	}
	c, deadline := bt.c, bt.deadline
	b.mu.Unlock()
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	// A batch whose deadline has passed is not sent: one of its callers has given up, and its check
	// must not consume budget after that caller was told it was not decided.
	if ctx.Err() != nil {
		bt.err = unavailable(ctx.Err())
	} else {
		bt.reply, bt.err = b.run(ctx, c)
	}
	cancel()
	<-b.slots
	close(bt.done)
}

func unavailable(err error) error { return fmt.Errorf("%w: %w", sluice.ErrUnavailable, err) }
