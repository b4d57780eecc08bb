// Package batch coalesces concurrent checks into one call of a shared store: one script run on
// Redis, one statement and one commit on PostgreSQL. The store decides each check of a call as its
// own group, in arrival order, at one instant, exactly as the same checks sent one by one in that
// order would be decided.
//
// Keys map to lanes, and a lane has at most one call in flight. The first check to find no open
// batch in its lane leads one: it runs at once when the lane is free (a lone caller never waits
// for company), and otherwise waits for the lane while later checks of the lane join its batch.
// So concurrent checks of a hot key never race each other to the store, where they would queue
// on one row lock or one slot: they reach it together, as one call, one call after another. Only
// groups with the same explicit now (or 0) and the same number of steps share a batch.
//
// A batch gives up with the first of its callers to give up (its deadline is the earliest of
// theirs): a check must never be decided after its caller was told it was not, and the checks of
// one service share one store timeout, so their deadlines differ little.
package batch

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Config configures a Batcher of calls of type C, which Run answers with a reply of R.
type Config[C, R any] struct {
	// Max is the most checks one call decides. 0 means 32.
	Max int
	// Lanes is how many calls may be in flight at once, one per lane. 0 means 1.
	Lanes int
	// Lane maps a check's key to its lane, in [0, Lanes). Nil spreads keys over the lanes by a
	// hash. A store whose calls must stay within a shard (a Redis Cluster slot) maps by shard.
	Lane func(p *sluice.Policy, key string) int
	// Slots, when set, bounds the calls in flight across lanes: a call runs while it holds a token
	// of this buffered channel, which the caller may share with other work that is to count
	// against the same bound.
	Slots chan struct{}
	// NewCall starts a call of groups of n steps at now.
	NewCall func(now int64, n int) C
	// Run runs a call. It must return once ctx is done, whatever the store does after.
	Run func(ctx context.Context, c C) ([]R, error)
}

// A Batcher groups checks into calls. It is safe for concurrent use.
type Batcher[C, R any] struct {
	cfg   Config[C, R]
	seed  maphash.Seed
	lanes []lane[C, R]

	mu sync.Mutex // guards every lane's open batch and the making of its turn, and every field of an open batch
}

type lane[C, R any] struct {
	turn chan struct{} // a token while a call of the lane runs; made on the lane's first call
	open *batch[C, R]  // the batch new checks of the lane join; nil when none waits
}

type batch[C, R any] struct {
	now      int64
	steps    int // steps per group
	c        C
	checks   int
	deadline time.Time // the earliest of its checks' deadlines; zero: none had one
	done     chan struct{}
	reply    []R // written before done closes
	err      error
}

// New returns a Batcher.
func New[C, R any](cfg Config[C, R]) *Batcher[C, R] {
	if cfg.Max <= 0 {
		cfg.Max = 32
	}
	// A Redis Cluster's store has a lane per slot, 16384, few of which a process may use.
	return &Batcher[C, R]{cfg: cfg, seed: maphash.MakeSeed(), lanes: make([]lane[C, R], max(cfg.Lanes, 1))}
}

func (b *Batcher[C, R]) laneOf(p *sluice.Policy, key string) *lane[C, R] {
	switch {
	case len(b.lanes) == 1:
		return &b.lanes[0]
	case b.cfg.Lane != nil:
		return &b.lanes[b.cfg.Lane(p, key)]
	}
	return &b.lanes[maphash.String(b.seed, key)%uint64(len(b.lanes))]
}

// Group decides a group of n steps together, all or nothing, in a batch: one check of a policy of
// n limits, or a CheckAll of several items. add appends the group's steps to a call; p and key
// pick its lane. It returns the reply of its call and the group's index in the call. A context
// done first is an error matching sluice.ErrUnavailable.
func (b *Batcher[C, R]) Group(ctx context.Context, now int64, n int, p *sluice.Policy, key string, add func(C) C) (reply []R, i int, err error) {
	return b.Groups(ctx, now, n, 1, p, key, add)
}

// Groups is Group for count groups of n steps each, decided each on its own but sent in one call:
// a CheckMany of count keys. It returns the index of the first; the others follow it. A call
// holds more than Config.Max groups only when count alone exceeds it.
func (b *Batcher[C, R]) Groups(ctx context.Context, now int64, n, count int, p *sluice.Policy, key string, add func(C) C) (reply []R, first int, err error) {
	dl, hasDeadline := ctx.Deadline()
	ln := b.laneOf(p, key)
	b.mu.Lock()
	if ln.turn == nil {
		ln.turn = make(chan struct{}, 1)
	}
	bt := ln.open
	lead := bt == nil || bt.now != now || bt.steps != n || bt.checks+count > b.cfg.Max
	if lead {
		bt = &batch[C, R]{now: now, steps: n, c: b.cfg.NewCall(now, n), deadline: dl, done: make(chan struct{})}
		ln.open = bt
	} else if hasDeadline && (bt.deadline.IsZero() || dl.Before(bt.deadline)) {
		bt.deadline = dl
	}
	first = bt.checks
	bt.checks += count
	bt.c = add(bt.c)
	b.mu.Unlock()

	if !lead {
		select {
		case <-bt.done:
			return bt.reply, first, bt.err
		case <-ctx.Done():
			return nil, 0, unavailable(ctx.Err())
		}
	}
	select {
	case ln.turn <- struct{}{}:
	case <-ctx.Done():
		b.mu.Lock()
		if ln.open == bt {
			ln.open = nil
		}
		expired := !bt.deadline.IsZero() && !time.Now().Before(bt.deadline)
		b.mu.Unlock()
		if expired {
			// The batch's deadline has passed too: it will never be sent, so its callers need
			// not wait for the lane to learn that.
			bt.err = unavailable(context.DeadlineExceeded)
			close(bt.done)
		} else {
			// The checks that joined still need their call.
			go func() {
				ln.turn <- struct{}{}
				b.send(ln, bt)
			}()
		}
		return nil, 0, unavailable(ctx.Err())
	}
	b.send(ln, bt)
	return bt.reply, first, bt.err
}

// send closes bt to newcomers, runs it once it holds a slot, and gives back the lane's turn.
func (b *Batcher[C, R]) send(ln *lane[C, R], bt *batch[C, R]) {
	b.mu.Lock()
	if ln.open == bt {
		ln.open = nil
	}
	c, deadline := bt.c, bt.deadline
	b.mu.Unlock()
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	bt.err = b.acquire(ctx)
	// A batch whose deadline has passed is not sent: one of its callers has given up, and its check
	// must not consume budget after that caller was told it was not decided.
	if bt.err == nil && ctx.Err() != nil {
		bt.err = unavailable(ctx.Err())
		b.release()
	}
	if bt.err == nil {
		bt.reply, bt.err = b.cfg.Run(ctx, c)
		b.release()
	}
	cancel()
	<-ln.turn
	close(bt.done)
}

// acquire takes a slot, when slots are shared, before ctx is done.
func (b *Batcher[C, R]) acquire(ctx context.Context) error {
	if b.cfg.Slots == nil {
		return nil
	}
	select {
	case b.cfg.Slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return unavailable(ctx.Err())
	}
}

func (b *Batcher[C, R]) release() {
	if b.cfg.Slots != nil {
		<-b.cfg.Slots
	}
}

func unavailable(err error) error { return storeerr.Unavailable("", err) }
