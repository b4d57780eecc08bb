-- fixedwindow.lua: fixed window, letter f. Parameters (ARGV[a] on): limit, windowMs, and with
-- windowMs 0 (a calendar window) b0 to b3: the bounds of three calendar windows in a row around
-- the caller's clock, which Redis's clock is within a window of.
--
-- State: {start, count}, what the window that starts at start (epoch ms) has spent: '<dd', 16
-- bytes, or on the server's clock 12 bytes '<dI4', count and start's low 32 bits (near.lua). Any
-- other value under 16 bytes is another strategy's, a fresh key.
-- Key: <prefix>:{<policy>:<key>}, or with :<i> after it for limit i of a composite (strategy.lua).
--@
local f = {}
S.f = f
-- Windows are window ms long, or with window 0 the calendar windows b0 to b3.
function f.prep(a)
  local limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  if window > 0 then return {limit = limit, window = window} end
  local b0, b1, b2, b3 = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  return {limit = limit, window = window, b = {b0, b1, b2, b3}}
end
function f.load(text) return load_near(text, 1) end
function f.dump(st, px) return dump_near(st, px, 1) end
-- bounds returns the start and end of the window holding now.
function f.bounds(q)
  if q.window > 0 then
    local start = floor(now / q.window) * q.window
    return start, start + q.window
  end
  local b = q.b
  for i = 1, 3 do
    if now >= b[i] and now < b[i + 1] then return b[i], b[i + 1] end
  end
  error('sluice: the Redis clock is a calendar window away from the caller\'s')
end
-- count is the bounds of now's window and what the key has spent in it.
function f.count(q, st)
  local start, stop = f.bounds(q)
  if not st or st[1] ~= start then return start, stop, 0 end
  return start, stop, st[2]
end
function f.idle(q, st)
  local start, stop = f.bounds(q)
  if st[2] == 0 or st[1] < start then return 0 end
  return st[1] + (stop - start) - now
end
--@ check
function f.check(q, st, cost)
  local start, reset_at, count = f.count(q, st)
  local c = count + cost
  if c <= q.limit then
    return 1, q.limit, nonneg(q.limit - c), reset_at, 0, {start, c}
  end
  return 0, q.limit, nonneg(q.limit - count), reset_at, ceil(reset_at - now), st
end
--@ peek
function f.peek(q, st)
  local _, reset_at, count = f.count(q, st)
  local full = now
  if count > 0 then full = reset_at end
  return peeked(count + 1 <= q.limit, q.limit, q.limit - count, full, ceil(reset_at - now))
end
--@ forecast
function f.forecast(q, st, cost)
  local _, stop, count = f.count(q, st)
  local full = now
  if count > 0 then full = ceil(stop) end
  return spendable(q.limit - count, cost), full, full
end
--@ refund
function f.refund(q, st, cost)
  local start, _, count = f.count(q, st)
  if count <= 0 then return nil end
  return {start, nonneg(count - cost)}
end
--@ debit
function f.debit(q, st, cost)
  local start, _, count = f.count(q, st)
  return {start, count + cost}
end
--@ batch
-- The batch (batch.lua) of checks of a fixed window of windowMs > 0 (a calendar window takes the
-- general script): ARGV[4..7] limit, windowMs, 0, cost. n is what the key has spent in now's
-- window; before is each step's n before it. Every write sets a TTL, as a token bucket's does.
local limit, window, cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local start = floor(now / window) * window
local stop = start + window
local instant_first = true
--@ batch-read
-- Sets n to what text has spent in now's window (f.count, with f.load inlined).
n = 0
if text then
  local v, at
  --> near.read
  if at == start then n = v end
end
--@ batch-step
if n + cost <= limit then next_n = n + cost end
--@ batch-write
-- Writes key's state: n spent in now's window (f.dump, inlined).
do
  local v, at, state = n, start
  local px, text = ttl(ceil(stop - now) + slack)
  --> near.pack
  call('SET', key, state, 'PX', text)
end
