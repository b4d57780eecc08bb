package redisstore

import goredis "github.com/redis/go-redis/v9"

// Every script takes the key of one limit as KEYS[1] and the same leading arguments:
//
//	ARGV[1] now, epoch ms; 0 reads the server clock with TIME
//	ARGV[2] cost
//	ARGV[3] TTL slack, ms added to every expiry
//	ARGV[4…] the strategy's parameters, as Go's strconv.FormatFloat(x, 'g', -1, 64) writes them,
//	        which Lua's tonumber reads back as the same double
//
// and reply {allowed, limit, remaining, resetAt, retryAfterMs}. Redis turns each Lua number of the
// reply into an integer by truncation, which is how package algo converts too; floors and ceilings
// are taken in Lua with math.floor and math.ceil, as algo takes them with math.Floor and math.Ceil.
// The arithmetic is algo's, operation for operation, so that both round the same way. State is
// written as text with %.17g, which reads back as the same double.

// prelude resolves now, the cost and the TTL slack, and defines the helpers every script shares.
const prelude = `
local now = tonumber(ARGV[1])
if now == 0 then
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local cost = tonumber(ARGV[2])
local slack = tonumber(ARGV[3])
local function nonneg(x)
  if x < 0 then return 0 end
  return x
end
-- expiry: milliseconds until the state decides like a fresh key's, plus the slack.
local function expiry(ms)
  local px = math.ceil(ms) + slack
  if px < 1 then px = 1 end
  return string.format('%d', px)
end
local function num(x)
  return string.format('%.17g', x)
end
-- pair splits a stored "a b" into two numbers.
local function pair(s)
  local sp = string.find(s, ' ', 1, true)
  return tonumber(string.sub(s, 1, sp - 1)), tonumber(string.sub(s, sp + 1))
end
`

// gcraScript keeps the theoretical arrival time as one number. ARGV[4..6]: limit, periodMs, burst.
var gcraScript = goredis.NewScript(prelude + `
local burst = tonumber(ARGV[6])
local T = tonumber(ARGV[5]) / tonumber(ARGV[4])
local tau = T * burst
local tat = now
local held = redis.call('GET', KEYS[1])
if held then
  tat = tonumber(held)
  if tat < now then tat = now end
end
local new_tat = tat + T * cost
local allow_at = new_tat - tau
if now < allow_at then
  return {0, burst, nonneg(math.floor((tau - (tat - now)) / T)), math.ceil(tat), math.ceil(allow_at - now)}
end
redis.call('SET', KEYS[1], num(new_tat), 'PX', expiry(new_tat - now))
return {1, burst, nonneg(math.floor((tau - (new_tat - now)) / T)), math.ceil(new_tat), 0}
`)

// tokenBucketScript keeps "tokens last". ARGV[4..5]: capacity, refillPerSec.
var tokenBucketScript = goredis.NewScript(prelude + `
local capacity = tonumber(ARGV[4])
local per_ms = tonumber(ARGV[5]) / 1000
local tokens = capacity
local held = redis.call('GET', KEYS[1])
if held then
  local t, last = pair(held)
  local elapsed = now - last
  if elapsed < 0 then elapsed = 0 end
  tokens = t + elapsed * per_ms
  if tokens > capacity then tokens = capacity end
end
if tokens >= cost then
  local left = tokens - cost
  local to_full = math.ceil((capacity - left) / per_ms)
  redis.call('SET', KEYS[1], num(left) .. ' ' .. num(now), 'PX', expiry(to_full))
  return {1, capacity, nonneg(math.floor(left)), now + to_full, 0}
end
return {0, capacity, nonneg(math.floor(tokens)), now + math.ceil((capacity - tokens) / per_ms),
  math.ceil((cost - tokens) / per_ms)}
`)

// fixedWindowScript keeps "start count". ARGV[4..5]: limit, windowMs.
var fixedWindowScript = goredis.NewScript(prelude + `
local limit = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local start = math.floor(now / window) * window
local count = 0
local held = redis.call('GET', KEYS[1])
if held then
  local s, c = pair(held)
  if s == start then count = c end
end
local reset_at = start + window
local used = count + cost
if used <= limit then
  redis.call('SET', KEYS[1], num(start) .. ' ' .. num(used), 'PX', expiry(reset_at - now))
  return {1, limit, nonneg(limit - used), reset_at, 0}
end
return {0, limit, nonneg(limit - count), reset_at, math.ceil(reset_at - now)}
`)

// slidingWindowScript keeps a hash of S+1 slots, field j mod (S+1) holding "j count" for bucket j.
// ARGV[4..6]: limit, windowMs, buckets.
var slidingWindowScript = goredis.NewScript(prelude + `
local limit = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local S = tonumber(ARGV[6])
local slots = S + 1
local w = window / S
local b = math.floor(now / w)
local elapsed = now - b * w
if elapsed < 0 then elapsed = 0 end
local weight = (w - elapsed) / w
if weight < 0 then weight = 0 end
if weight > 1 then weight = 1 end
local buckets = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local j, c = pair(flat[i + 1])
  buckets[tonumber(flat[i])] = {j, c}
end
local function count(j)
  local e = buckets[j % slots]
  if e and e[1] == j then return e[2] end
  return 0
end
local full = 0
for j = b - S + 1, b do full = full + count(j) end
local oldest = count(b - S)
local estimate = full + oldest * weight
local reset_at = math.ceil((b + 1) * w + window)
local projected = estimate + cost
if projected <= limit then
  redis.call('HSET', KEYS[1], string.format('%d', b % slots), num(b) .. ' ' .. num(count(b) + cost))
  redis.call('PEXPIRE', KEYS[1], expiry(reset_at - now))
  return {1, limit, nonneg(math.floor(limit - projected)), reset_at, 0}
end
local d = projected - limit
local retry
if oldest > 0 and d <= oldest * weight then
  retry = math.ceil(d * w / oldest)
else
  retry = math.ceil((b + 1) * w - now)
end
if retry < 1 then retry = 1 end
return {0, limit, nonneg(math.floor(limit - estimate)), reset_at, retry}
`)

// slidingWindowLogScript keeps a sorted set of runs: member "at n" with score at, n units admitted
// at the instant at, one member per instant. ARGV[4..5]: limit, windowMs.
var slidingWindowLogScript = goredis.NewScript(prelude + `
local limit = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now - window))
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local at, n = {}, {}
local live = 0
for i, m in ipairs(members) do
  at[i], n[i] = pair(m)
  live = live + n[i]
end
local runs = #members
if live + cost <= limit then
  local merged = cost
  for i = 1, runs do
    if at[i] == now then
      redis.call('ZREM', KEYS[1], members[i])
      merged = n[i] + cost
    end
  end
  redis.call('ZADD', KEYS[1], num(now), num(now) .. ' ' .. num(merged))
  local first, last = now, now
  if runs > 0 then
    if at[1] < first then first = at[1] end
    if at[runs] > last then last = at[runs] end
  end
  redis.call('PEXPIRE', KEYS[1], expiry(last + window - now))
  return {1, limit, nonneg(limit - (live + cost)), math.ceil(first + window), 0}
end
local reset_at = math.ceil(now + window)
if runs > 0 then reset_at = math.ceil(at[1] + window) end
local retry
if live == 0 then
  retry = window
else
  local k = live + cost - limit
  if k < 1 then k = 1 end
  if k > live then k = live end
  local t = at[runs]
  for i = 1, runs do
    if k <= n[i] then
      t = at[i]
      break
    end
    k = k - n[i]
  end
  retry = math.ceil(t + window - now)
  if retry < 1 then retry = 1 end
end
return {0, limit, nonneg(limit - live), reset_at, retry}
`)
