package redisstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
)

// The Redis store's sluice.Concurrency. The holders of one name and key are a sorted set, holder →
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
// Scores are whole milliseconds, exact as doubles (sluice.MaxConcurrencyTTLMs keeps now + ttlMs
// below 2⁵³), and are sent to Redis printed with %.0f: Lua would print a number past 14 digits in
// exponent form.

var _ sluice.Concurrency = (*Store)(nil)

// luaLeaseHead resolves the instant and defines ms, shared by the lease scripts. ARGV[1] is now
// (0: the server clock), ARGV[2] the holder, ARGV[3] the limit (Admit), ARGV[4] the TTL, ARGV[5] the
// slack, ARGV[6] the instant to give up (0: none; see luaClock in scripts.go), all in ms. Admit,
// which takes a slot, gives up: a slot taken for a caller told it failed would stay held until
// its lease ran out.
const luaLeaseHead = `
local key, holder = KEYS[1], ARGV[2]
local now, give_up = tonumber(ARGV[1]), tonumber(ARGV[6])
if now == 0 or give_up > 0 then
  local clock = redis.call('TIME')
  local ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  if give_up > 0 and ms >= give_up then return redis.error_reply('LATE sluice: past the instant to give up') end
  if now == 0 then now = ms end
end
local ttl, slack = tonumber(ARGV[4]), tonumber(ARGV[5])
local function ms(x) return string.format('%.0f', x) end
-- keep sets the set's TTL to its latest lease, plus the slack.
local function keep()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, ms(tonumber(last[2]) - now + slack))
end
`

// admitScript replies {allowed, in flight, retry after ms}.
var admitScript = newScript(luaLeaseHead + `
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', ms(now))
local n = redis.call('ZCARD', key)
local held = redis.call('ZSCORE', key, holder)
if not held then
  if n >= limit then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {0, n, tonumber(first[2]) - now}
  end
  n = n + 1
end
redis.call('ZADD', key, ms(now + ttl), holder)
keep()
return {1, n, 0}
`)

// heartbeatScript replies {1} if holder held an unexpired lease, now extended, else {0}.
var heartbeatScript = newScript(luaLeaseHead + `
local exp = redis.call('ZSCORE', key, holder)
if not exp then return {0} end
if tonumber(exp) <= now then
  redis.call('ZREM', key, holder)
  return {0}
end
redis.call('ZADD', key, 'XX', ms(now + ttl), holder)
keep()
return {1}
`)

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

// Admit implements sluice.Concurrency: one script.
func (s *Store) Admit(ctx context.Context, now int64, name, key, holder string, limit, ttlMs int64) (sluice.Admission, error) {
	if err := sluice.ValidateAdmit(name, key, holder, limit, ttlMs); err != nil {
		return sluice.Admission{}, err
	}
	if err := s.open(); err != nil {
		return sluice.Admission{}, err
	}
	v, err := s.runScript(ctx, admitScript, s.leaseKey(name, key),
		strconv.FormatInt(now, 10), holder, strconv.FormatInt(limit, 10), strconv.FormatInt(ttlMs, 10), s.slack,
		strconv.FormatInt(giveUpAt(ctx, 0), 10))
	if err == nil {
		err = replyLen(v, 3)
	}
	if err != nil {
		return sluice.Admission{}, err
	}
	return sluice.Admission{Allowed: v[0] == 1, InFlight: v[1], Limit: limit, RetryAfterMs: v[2]}, nil
}

// Release implements sluice.Concurrency: one ZREM.
func (s *Store) Release(ctx context.Context, name, key, holder string) error {
	if err := sluice.ValidateRelease(name, key, holder); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	return unavailable(s.do(ctx, s.client.B().Zrem().Key(s.leaseKey(name, key)).Member(holder).Build()).Error())
}

// Heartbeat implements sluice.Concurrency: one script.
func (s *Store) Heartbeat(ctx context.Context, now int64, name, key, holder string, ttlMs int64) error {
	if err := sluice.ValidateHeartbeat(name, key, holder, ttlMs); err != nil {
		return err
	}
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
		return sluice.ErrNotHeld
	}
	return nil
}
