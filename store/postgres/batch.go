package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// A batcher coalesces concurrent Checks into one call of decide: one statement and one
// transaction, so one commit (one WAL flush) serves the whole batch. decide decides each check as
// its own group, in arrival order, at one instant, exactly as the same checks sent one by one in
// that order would be decided; a caller learns its decision only once the batch has committed, so
// batching forgets nothing in a crash that one-by-one checks would keep.
//
// The first check to find no open batch leads one: it runs at once when fewer than
// Config.InFlight batches are running (a lone caller never waits for company), and otherwise waits
// for one to end while later checks join its batch. Only checks with the same explicit now (or 0)
// and the same number of limits share a batch.
type batcher struct {
	s     *Store
	max   int           // checks per batch
	slots chan struct{} // a token per batch running

	mu   sync.Mutex // guards open and every field of the open batch
	open *batch     // the batch new checks join; nil when none waits
}

// batch is one call of decide for coalesced checks.
type batch struct {
	now    int64
	limits int // limits per check
	c      *call
	checks int
	// deadline is the earliest of its checks' deadlines (zero: none had one). The batch gives up
	// with its first caller to give up: a check must never be decided after its caller was told it
	// was not, and checks of one service share one store timeout, so their deadlines differ little.
	deadline time.Time
	done     chan struct{}
	reply    []float64 // written before done closes
	err      error
}

func newBatcher(s *Store, max, inFlight int) *batcher {
	return &batcher{s: s, max: max, slots: make(chan struct{}, inFlight)}
}

// check decides one check in a batch.
func (b *batcher) check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	n := len(p.Limits())
	dl, hasDeadline := ctx.Deadline()
	b.mu.Lock()
	bt := b.open
	lead := bt == nil || bt.now != now || bt.limits != n || bt.checks == b.max
	if lead {
		bt = &batch{now: now, limits: n, c: newCall(opCheck, now, n), deadline: dl, done: make(chan struct{})}
		b.open = bt
	} else if hasDeadline && (bt.deadline.IsZero() || dl.Before(bt.deadline)) {
		bt.deadline = dl
	}
	i := bt.checks
	bt.checks++
	bt.c.addPolicy(p, key, cost)
	b.mu.Unlock()

	if lead {
		select {
		case b.slots <- struct{}{}:
			b.send(bt)
		case <-ctx.Done():
			// The checks that joined still need their run.
			go func() {
				b.slots <- struct{}{}
				b.send(bt)
			}()
			return sluice.Decision{}, unavailable(ctx.Err())
		}
	} else {
		select {
		case <-bt.done:
		case <-ctx.Done():
			return sluice.Decision{}, unavailable(ctx.Err())
		}
	}
	if bt.err != nil {
		return sluice.Decision{}, bt.err
	}
	return combine(decisions(bt.reply[5*n*i : 5*n*(i+1)])), nil
}

// send closes bt to newcomers, runs it and releases its slot.
func (b *batcher) send(bt *batch) {
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
	// A batch whose deadline has passed is not sent: one of its callers has given up, and its
	// check must not consume budget after that caller was told it was not decided.
	if ctx.Err() != nil {
		bt.err = unavailable(ctx.Err())
	} else {
		bt.reply, bt.err = b.s.run(ctx, c)
	}
	cancel()
	<-b.slots
	close(bt.done)
}
