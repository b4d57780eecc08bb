-- concurrency.lua: leases (sluice.Concurrency's Admit and Heartbeat; Release is a plain ZREM).
-- A script is clock.lua, the fragment lease, then admit or heartbeat.
--
-- Key: the holders of one name and key are a sorted set under
--
--   <prefix>:{<name>:<key>}:c<length of name in bytes>
--
-- whose hash tag is the one a policy of that name gives the key (strategy.lua), so that it lives in
-- one Cluster slot, and whose length suffix keeps ("a:b", "c") and ("a", "b:c") apart. Members are
-- holders; a member's score is its lease's expiry, epoch ms, a whole ms printed with %.0f. The
-- set's TTL is its latest lease plus the slack, so that a key whose holders all died vanishes by
-- itself.
--
-- KEYS[1] is the set. ARGV[1] now (0: the server's clock), ARGV[2] the holder, ARGV[3] the limit
-- (admit; heartbeat sends 0), ARGV[4] the lease's TTL, ARGV[5] the slack, ARGV[6] the instant to
-- give up (0: none; clock.lua), all in ms. Admit, which takes a slot, gives up: a slot taken for a
-- caller told it failed would stay held until its lease ran out.
--@ lease
local key, holder = KEYS[1], ARGV[2]
local now = resolve(tonumber(ARGV[1]), tonumber(ARGV[6]))
if not now then return late() end
local ttl, slack = tonumber(ARGV[4]), tonumber(ARGV[5])
local function ms(x) return string.format('%.0f', x) end
-- keep sets the set's TTL to its latest lease, plus the slack.
local function keep()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, ms(tonumber(last[2]) - now + slack))
end
--@ admit
-- Prunes the expired holders, then adds or renews holder if it holds a lease or the set has room.
-- Reply: {allowed (1 or 0), holders in flight, retryAfterMs (until the oldest lease ends)}.
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
--@ heartbeat
-- Extends holder's lease if it holds one that has not expired. Reply: {1}, or {0} if it held none.
local exp = redis.call('ZSCORE', key, holder)
if not exp then return {0} end
if tonumber(exp) <= now then
  redis.call('ZREM', key, holder)
  return {0}
end
redis.call('ZADD', key, 'XX', ms(now + ttl), holder)
keep()
return {1}
