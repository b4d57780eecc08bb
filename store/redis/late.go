package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// A script sent before its caller's deadline can reach Redis after it: Redis was stalled (a fork,
// a slow script, a paused VM), or the network was. Its caller has given up by then and been told
// the call failed, and a check that Redis counted anyway would spend a limit on something that was
// never admitted. So every script that consumes carries an instant to give up (giveUpAt), which it
// compares with Redis's clock before it touches a key, and past which it answers LATE and counts
// nothing (lua/clock.lua). What is left is a reply that takes longer than the margin to
// come back; docs/redis.md has that bound.

// consumes reports whether a script of operation o spends a limit: those carry an instant to give
// up and, with Config.WaitReplicas, are followed by WAIT. A refund gives back and must land even
// late (CheckAll refunds what a slot reserved after another failed).
func consumes(o op) bool { return o == opCheck || o == opDebit }

// answerBy is when a call must have its answer for it to reach the caller within ctx's deadline:
// an eighth of the time left (at most 50 ms) before it, the margin for the answer's way back. ok is
// false without a deadline.
func answerBy(ctx context.Context) (by time.Time, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	return dl.Add(-min(max(time.Until(dl), 0)/8, 50*time.Millisecond)), true
}

// giveUpAt is the instant (epoch ms) by which Redis must start a script that consumes, or 0 for no
// deadline: answerBy, less after, the time the WAIT that follows the script may take
// (Config.WaitTimeout). Redis compares it with its own clock, so the margin also absorbs skew
// between this host's clock and Redis's.
func giveUpAt(ctx context.Context, after time.Duration) int64 {
	by, ok := answerBy(ctx)
	if !ok {
		return 0
	}
	return max(by.Add(-after).UnixMilli(), 1)
}

// setGiveUp sets the instant to give up that c's script is sent with (0: none).
func (c *call) setGiveUp(at int64) { c.head[2] = strconv.FormatInt(at, 10) }

// errLate is what a script that reached Redis past its instant to give up reports: the caller's
// deadline, all but expired, as Redis's clock sees it.
var errLate = fmt.Errorf("%w: redis store: the script reached Redis after its instant to give up: %w",
	sluice.ErrUnavailable, context.DeadlineExceeded)

// late reports whether r is a script's LATE answer (lua/clock.lua).
func late(r rueidis.RedisResult) bool {
	e, ok := rueidis.IsRedisErr(r.Error())
	return ok && strings.HasPrefix(e.Error(), "LATE")
}

// linger is how long a script that consumes may take past its caller's deadline before the client
// gives up on its reply. The caller is answered at its deadline either way (boundedLate); reading
// the reply of a script that ran in time but answers late counts it in Late, and spares the
// connection it came on, which the client would otherwise tear down, and a new one costs the next
// calls a dial and a handshake. A reply later than that is from a Redis that stopped answering.
const linger = time.Second

// lingering is the context a script is sent with: ctx's values, and ctx's deadline
// plus linger; ctx itself when it has no deadline.
func lingering(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), dl.Add(linger))
}

func (s *Store) countLate() { s.late.Add(1) }

// Late is how many store calls that consume (a batched run of checks is one call) succeeded after
// their callers were answered that they failed: calls whose scripts ran before the instant to give
// up but whose replies came back slower than the margin, the bound the instant leaves. Each
// counted its checks though its callers were told otherwise; a metric of it says how often.
func (s *Store) Late() uint64 { return s.late.Load() }
