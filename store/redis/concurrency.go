package redisstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/concurrency"
)

// The Redis store's concurrency.Store. The holders of one name and key are a sorted set, holder →
// the lease's expiry (epoch ms) as its score, under
//
//	<prefix>:{<name>:<key>}:c<length of name in bytes>
//
// whose hash tag is the one a policy of that name gives the key, so that it lives in one Cluster
// slot, and whose length suffix keeps ("a:b", "c") and ("a", "b:c") apart (a limit's key never ends
// with "c" and digits). Admit and Heartbeat are each one script, one atomic step: prune the expired
// holders (ZREMRANGEBYSCORE up to now), count (ZCARD), add or renew (ZADD), and set the set's TTL
// (PEXPIRE) to its latest lease plus Config.TTLSlack, so that a key whose holders all died vanishes
// by itself. Release is one ZREM. now = 0 reads the server clock (TIME) inside the script.
//
// Scores are whole milliseconds, exact as doubles (concurrency.MaxTTLMs keeps now + ttlMs
// below 2⁵³), and are sent to Redis printed with %.0f: Lua would print a number past 14 digits in
// exponent form.

var _ concurrency.Store = (*Store)(nil)

// admitScript and heartbeatScript are lua/concurrency.lua's: admitScript replies {allowed, in
// flight, retry after ms}, heartbeatScript {1} if holder held an unexpired lease, now extended,
// else {0}.
var (
	admitScript     = fixedScript("admit", "clock", "concurrency.lease", "concurrency.admit")
	heartbeatScript = fixedScript("heartbeat", "clock", "concurrency.lease", "concurrency.heartbeat")
)

// leaseKey is where the holders of name and key are kept.
func (s *Store) leaseKey(name, key string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(name) + len(key) + 12)
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(name)
	b.WriteByte(':')
	b.WriteString(key)
	b.WriteString("}:c")
	b.WriteString(strconv.Itoa(len(name)))
	return b.String()
}

// runScript runs sc on one key with args (EVALSHA, then EVAL where Redis lacks it) and returns its
// reply.
func (s *Store) runScript(ctx context.Context, sc *script, key string, args ...string) ([]int64, error) {
	return bounded(ctx, func() ([]int64, error) {
		r := s.client.Do(ctx, s.client.B().Evalsha().Sha1(sc.sha).Numkeys(1).Key(key).Arg(args...).Build().ToPipe())
		if noScript(r) {
			r = s.client.Do(ctx, s.client.B().Eval().Script(sc.source).Numkeys(1).Key(key).Arg(args...).Build().ToPipe())
		}
		if late(r) {
			return nil, errLate
		}
		return ints(r)
	})
}

// Admit implements concurrency.Store: one script.
func (s *Store) Admit(ctx context.Context, now int64, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	if err := s.open(); err != nil {
		return concurrency.Admission{}, err
	}
	v, err := s.runScript(ctx, admitScript, s.leaseKey(name, key),
		strconv.FormatInt(now, 10), holder, strconv.FormatInt(limit, 10), strconv.FormatInt(ttlMs, 10), s.slack,
		strconv.FormatInt(giveUpAt(ctx, 0), 10))
	if err == nil {
		err = replyLen(v, 3)
	}
	if err != nil {
		return concurrency.Admission{}, err
	}
	return concurrency.Admission{Allowed: v[0] == 1, InFlight: v[1], Limit: limit, RetryAfterMs: v[2]}, nil
}

// Release implements concurrency.Store: one ZREM.
func (s *Store) Release(ctx context.Context, name, key, holder string) error {
	if err := s.open(); err != nil {
		return err
	}
	return unavailable(s.do(ctx, s.client.B().Zrem().Key(s.leaseKey(name, key)).Member(holder).Build()).Error())
}

// Heartbeat implements concurrency.Store: one script.
func (s *Store) Heartbeat(ctx context.Context, now int64, name, key, holder string, ttlMs int64) error {
	if err := s.open(); err != nil {
		return err
	}
	v, err := s.runScript(ctx, heartbeatScript, s.leaseKey(name, key),
		strconv.FormatInt(now, 10), holder, "0", strconv.FormatInt(ttlMs, 10), s.slack, "0")
	if err == nil {
		err = replyLen(v, 1)
	}
	switch {
	case err != nil:
		return err
	case v[0] != 1:
		return concurrency.ErrNotHeld
	}
	return nil
}
