package lease

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
)

// storeTimeout bounds each store call of the background goroutine.
const storeTimeout = 5 * time.Second

// run is the Leaser's one goroutine: it takes the leases asked for ahead, ends expired leases and
// forgets idle keys.
func (l *Leaser) run() {
	defer close(l.done)
	ticker := time.NewTicker(l.every)
	defer ticker.Stop()
	for {
		select {
		case <-l.stop:
			return
		case r := <-l.renewals:
			if r.done != nil {
				close(r.done)
			} else {
				l.renew(r.s, r.ls)
			}
		case <-ticker.C:
			l.sweep(context.Background(), l.backgroundNow(), false) // failed refunds are counted in Stats
		}
	}
}

// backgroundNow is the instant the goroutine works at: Config.Now's or the process clock's.
func (l *Leaser) backgroundNow() int64 {
	if l.userNow != nil {
		return l.userNow().UnixMilli()
	}
	return l.clock.Now()
}

// storeCtx is the context of a store call of the goroutine: bounded, and at now if Config.Now is
// set (else at the store's clock).
func (l *Leaser) storeCtx(now int64) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	if l.userNow != nil {
		ctx = sluice.WithNow(ctx, now)
	}
	return ctx, cancel
}

// renew takes the lease after ls, the current lease of s, while ls still has units to spend.
func (l *Leaser) renew(s *slot, ls *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := l.backgroundNow()
	if l.closed.Load() || s.dead || s.next != nil || s.cur.Load() != ls || ls.ended || now >= ls.deadline {
		return
	}
	if p, ok := l.lim.Policy(s.t.name); !ok || !p.Equal(ls.info.policy) {
		return // the policy changed: the next check takes a lease under the new one
	}
	left := ls.units.Load()
	rate := s.estimate(ls, left, now, l.target)
	size := l.size(s, ls.info, rate, now, 1)
	if size < minAhead {
		return // the key cooled down
	}
	ctx, cancel := l.storeCtx(now)
	defer cancel()
	d, err := l.storeCheck(ctx, s.t.name, s.key, size)
	if err != nil || !d.Allowed {
		return // the check that runs ls out asks the store itself, and answers what it says
	}
	l.leases.Add(1)
	l.aheads.Add(1)
	s.rate = rate
	// Checks go on spending ls: from here on its spending counts from left.
	s.pending = -ls.used(left)
	s.last.Store(now)
	s.next = l.newLease(ls.info, d, now, size, rate)
	// Decisions answered from ls now count the store's newer remaining, and the units of next.
	ls.beside.Store(d.Remaining + size)
}

// sweep ends the leases past their deadline at now and forgets idle keys or, when final, ends
// every lease.
func (l *Leaser) sweep(ctx context.Context, now int64, final bool) error {
	var errs []error
	for _, t := range *l.tables.Load() {
		t.keys.each(func(s *slot) {
			if final {
				// Under the lock, so that a lease a check is taking right now is seen too.
				s.mu.Lock()
			} else {
				// A live lease that has not expired is the newest: a lease taken ahead ends later.
				if ls := s.cur.Load(); ls != nil && ls.units.Load() > 0 && now < ls.deadline {
					return
				}
				if !s.mu.TryLock() {
					return // a check is taking a lease: look again next time
				}
			}
			// Under the lock: no check is taking a lease or carrying units.
			var back [2]struct {
				in *info
				n  int64
			}
			if ls := s.cur.Load(); ls != nil && !ls.ended && (final || now >= ls.deadline) {
				left := ls.units.Swap(0)
				ls.finish(left)
				back[0].in, back[0].n = ls.info, left
			}
			if nx := s.next; nx != nil && (final || now >= nx.deadline) {
				s.next = nil
				back[1].in, back[1].n = nx.info, nx.start
			}
			ls := s.cur.Load()
			if !final && s.next == nil && (ls == nil || ls.units.Load() == 0) && !s.dead && now-s.last.Load() >= l.idle {
				s.dead = true
				t.keys.remove(s)
			}
			s.mu.Unlock()
			for _, b := range back {
				if b.n == 0 {
					continue
				}
				sctx, cancel := ctx, context.CancelFunc(func() {})
				if !final {
					sctx, cancel = l.storeCtx(now)
				}
				if err := l.giveBack(sctx, t.name, s.key, b.in, b.n); err != nil {
					errs = append(errs, err)
				}
				cancel()
			}
		})
	}
	return errors.Join(errs...)
}
