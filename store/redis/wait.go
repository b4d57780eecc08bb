package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Redis replicates asynchronously: a master acknowledges a script's writes before any replica
// has them, and a master that dies before they reach a replica takes them with it, so the replica
// promoted in its place has forgotten admissions its callers were told about. Config.WaitReplicas
// narrows that window: each script that consumes is followed, on the same connection, by WAIT,
// which returns once that many replicas hold everything the connection wrote, or after
// Config.WaitTimeout. The decision stands either way: it was made and counted on the master, and
// answering it with an error would only hand it to a fail mode, which could admit what the
// master denied. A WAIT that times out or fails is counted (Unreplicated) for an operator to see.
//
// The script and its WAIT are two round trips on a connection taken for the call (runWaited), not
// one pipelined pair: Redis ends a WAIT that times out on its next cron tick (every 100 ms at the
// default hz 10), so a WAIT can outlast both its timeout and the caller's deadline, and the pair's
// replies come back together or not at all. Sent apart, the script's answer is in hand before the
// WAIT starts, and the WAIT is cut off at the caller's deadline, so a decision that was counted is
// always answered.

// replication is the WAIT after each consuming script; replicas 0 sends none.
type replication struct {
	replicas int64
	timeout  time.Duration // whole ms, at least 1: WAIT 0 would wait forever
}

// defaultWaitTimeout is Config.WaitTimeout's default: a replica on the same network acknowledges
// in well under a millisecond, and the store's deadline must hold the WAIT beside the script.
const defaultWaitTimeout = 10 * time.Millisecond

func replicationOf(cfg Config) replication {
	if cfg.WaitReplicas <= 0 {
		return replication{}
	}
	t := cfg.WaitTimeout
	if t <= 0 {
		t = defaultWaitTimeout
	}
	return replication{replicas: int64(cfg.WaitReplicas), timeout: (t + time.Millisecond - 1).Truncate(time.Millisecond)}
}

// waits reports whether c's script is followed by WAIT.
func (s *Store) waits(c call) bool { return s.wait.replicas > 0 && consumes(c.op) }

// waitAfter is the WAIT that follows c's script, sent to the node of c's keys.
func (s *Store) waitAfter(c call) rueidis.Completed {
	return s.client.B().Wait().Numreplicas(s.wait.replicas).Timeout(s.wait.timeout.Milliseconds()).Build().SetSlot(c.keys[0])
}

// runWaited runs c's script, then WAIT, on a connection of its own (WAIT counts what its own
// connection wrote), and returns the script's reply. The script gives up Config.WaitTimeout
// earlier than others (giveUpAt), so that its WAIT has that long; the WAIT is cut off at answerBy
// if Redis holds it longer.
func (s *Store) runWaited(ctx context.Context, c call) ([]int64, error) {
	by, hasBy := answerBy(ctx)
	c.setGiveUp(giveUpAt(ctx, s.wait.timeout))
	// Dedicate takes a connection without a context: where it must dial a host that does not
	// answer, the call's bounded gives up at ctx's deadline and this goroutine ends at the dial's.
	d, release := s.client.Dedicate()
	defer release()
	qctx, cancel := lingering(ctx)
	defer cancel()
	r := d.Do(qctx, s.evalsha(c))
	if noScript(r) {
		r = d.Do(qctx, s.eval(c))
	}
	v, err := numbers(c, r)
	if err != nil {
		return nil, err
	}
	// Counted: from here the decision is answered, whatever WAIT does.
	wctx := ctx
	if hasBy {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, by)
		defer cancel()
	}
	s.waited(d.Do(wctx, s.waitAfter(c)))
	return v, nil
}

// runAllWaited runs each call as runWaited does, side by side, and returns the replies in order
// and the first error, as runAllNow does.
func (s *Store) runAllWaited(ctx context.Context, calls []call) ([][]int64, error) {
	out, errs := make([][]int64, len(calls)), make([]error, len(calls))
	if len(calls) == 1 {
		out[0], errs[0] = s.runWaited(ctx, calls[0])
	} else {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { out[i], errs[i] = s.runWaited(ctx, calls[i]) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// waited counts a WAIT that saw fewer replicas than asked for, or failed.
func (s *Store) waited(r rueidis.RedisResult) {
	if n, err := r.AsInt64(); err != nil || n < s.wait.replicas {
		s.unreplicated.Add(1)
	}
}

// Unreplicated is how many script runs that consumed were answered while fewer than
// Config.WaitReplicas replicas had acknowledged their writes within Config.WaitTimeout (or their
// WAIT failed): decisions that stand, but that a failover of their master before the replicas
// caught up would forget. It is 0 without WaitReplicas. A metric of it tells how often the
// replicas fall behind.
func (s *Store) Unreplicated() uint64 { return s.unreplicated.Load() }
