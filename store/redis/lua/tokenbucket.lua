-- tokenbucket.lua: token bucket, letter t. Parameters (ARGV[a] on): capacity, refillPerSec.
--
-- State: {tokens, last}, the tokens the bucket held at instant last (epoch ms): '<dd', 16 bytes,
-- or on the server's clock 12 bytes '<dI4', tokens and last's low 32 bits (near.lua). Any other
-- value under 16 bytes is another strategy's, a fresh key.
-- Key: <prefix>:{<policy>:<key>}, or with :<i> after it for limit i of a composite (strategy.lua).
--@
local t = {}
S.t = t
function t.prep(a)
  local capacity, refill = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  return {cap = capacity, per_ms = refill / 1000, limit = capacity}
end
function t.load(text) return load_near(text, 2) end
function t.dump(st, px) return dump_near(st, px, 2) end
function t.tokens(q, st)
  if not st then return q.cap end
  local elapsed = now - st[2]
  if elapsed < 0 then elapsed = 0 end
  local n = st[1] + elapsed * q.per_ms
  if n > q.cap then n = q.cap end
  return n
end
function t.full_at(q, n)
  return now + ceil((q.cap - n) / q.per_ms)
end
function t.idle(q, st)
  return (q.cap - t.tokens(q, st)) / q.per_ms
end
--@ check
function t.check(q, st, cost)
  local n = t.tokens(q, st)
  if n >= cost then
    local left = n - cost
    return 1, q.limit, nonneg(floor(left)), t.full_at(q, left), 0, {left, now}
  end
  return 0, q.limit, nonneg(floor(n)), t.full_at(q, n), ceil((cost - n) / q.per_ms), st
end
--@ peek
function t.peek(q, st)
  local n = t.tokens(q, st)
  return peeked(n >= 1, q.limit, floor(n), t.full_at(q, n), ceil((1 - n) / q.per_ms))
end
--@ forecast
function t.forecast(q, st, cost)
  local n = t.tokens(q, st)
  local next_at = now
  if n < q.cap then
    next_at = now + ceil((math.min(floor(n) + 1, q.cap) - n) / q.per_ms)
  end
  return spendable(n, cost), next_at, t.full_at(q, n)
end
--@ refund
function t.refund(q, st, cost)
  if not st then return nil end
  local n = t.tokens(q, st) + cost
  if n > q.cap then n = q.cap end
  return {n, math.max(now, st[2])}
end
--@ debit
function t.debit(q, st, cost)
  local last = now
  if st and st[2] > now then last = st[2] end
  return {t.tokens(q, st) - cost, last}
end
--@ batch
-- The batch (batch.lua) of token bucket checks: ARGV[4..7] capacity, refillPerSec, 0, cost. n is
-- the tokens at now; before is each step's tokens before it. Every write sets a TTL: a state with
-- its expiry would take 16 bytes on the server's clock, past the 32-byte allocation class.
local capacity, per_ms, cost = tonumber(ARGV[4]), tonumber(ARGV[5]) / 1000, tonumber(ARGV[7])
local instant_first = false
--@ batch-read
-- Sets n to the tokens text holds at now (t.tokens, with t.load inlined).
n = capacity
if text then
  local v, at
  --> near.read
  if at then
    local elapsed = now - at
    if elapsed < 0 then elapsed = 0 end
    n = v + elapsed * per_ms
    if n > capacity then n = capacity end
  end
end
--@ batch-step
if n >= cost then next_n = n - cost end
--@ batch-write
-- Writes key's state: n tokens left at now (t.dump, inlined).
do
  local v, at, state = n, now
  local px, text = ttl(ceil((capacity - v) / per_ms) + slack)
  --> near.pack
  call('SET', key, state, 'PX', text)
end
