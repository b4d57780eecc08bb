package redisstore

import (
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
)

// The store's Lua is assembled from the fragments below into one script per operation and set of
// strategies (a check of GCRA keys only carries GCRA's check): Redis runs a script's whole body on
// every call, defining each function again, so a script that holds only what the call uses costs
// Redis a fraction of the time.
//
// Every script decides a list of steps, each one limit of one key: KEYS[i] is step i's key, and
// the arguments are
//
//	ARGV[1] now, epoch ms; 0 reads the server clock with TIME
//	ARGV[2] TTL slack, ms added to every expiry
//	ARGV[3] the instant to give up, epoch ms on the server's clock; 0 for none (see luaClock)
//	ARGV[4] steps per group (check only): each group is all or nothing, groups are independent
//	ARGV[5] the number of limits the steps use, then seven per limit: its strategy (g t f s l) and
//	        up to six parameters, as Go's strconv.FormatFloat(x, 'g', -1, 64) writes them,
//	        which Lua's tonumber reads back as the same double
//	then two per step: the limit (1-based) and the cost; only once when every step has the same
//
// A check decides the steps of a group in order, each against the state the earlier steps of the
// call left (a key checked twice sees its first check), and writes the group's new states, one SET
// with a TTL per key, only if every step of it was allowed.
// The reply is five numbers per step for a check or a peek (allowed, limit, remaining, resetAt,
// retryAfterMs), three for a forecast (spendableNow, nextReplenishAt, fullAt), none for a refund;
// a batch of GCRA checks (luaGCRABatch) replies with a string the caller computes the five from.
//
// Redis turns each Lua number of a reply into an integer by truncation, which is how package algo
// converts too; floors and ceilings are math.floor and math.ceil as algo's are math.Floor and
// math.Ceil, and the arithmetic is algo's, operation for operation, so that both round alike.
// States are little-endian IEEE 754 doubles, packed with Lua's struct library (an exact copy of
// the double, and a tenth of the time of printing it):
//
//	gcra (g)              tat              or 12 bytes: tat, its key's expiry's low 32 bits
//	tokenBucket (t)       tokens, last     or 12 bytes: tokens, last's low 32 bits (see luaPairs)
//	fixedWindow (f)       start, count     or 12 bytes: count, start's low 32 bits
//	slidingWindow (s)     j, count for each bucket that holds a count
//	slidingWindowLog (l)  at, n for each run of n units admitted at instant at, oldest first
//
// Every write sets a TTL: the time until the state decides like a fresh key's, plus the slack, or
// (luaGCRABatch) keeps one that is known to cover that.

// op is an operation of the scripts.
type op int

const (
	opCheck op = iota
	opPeek
	opForecast
	opRefund
	opDebit
	numOps
)

// kinds are the strategies' letters, in the order of their bits in a kind set.
const kinds = "gtfsl"

// luaClock starts every script: now, the slack and the constants of instants stored as their low
// 32 bits. A script that reaches Redis at or past its instant to give up (ARGV[3], see giveUpAt in
// redis.go) answers the error LATE and touches nothing: its caller has been, or is about to be,
// told the call failed, so it must count nothing.
const luaClock = `
local now = tonumber(ARGV[1])
local server_clock = now == 0 -- now is the server's clock, not an instant the caller passed
local give_up = tonumber(ARGV[3])
if server_clock or give_up > 0 then
  local clock = redis.call('TIME')
  local ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  if give_up > 0 and ms >= give_up then return redis.error_reply('LATE sluice: past the instant to give up') end
  if server_clock then now = ms end
end
local slack = tonumber(ARGV[2])
-- Instants near the server's clock are stored as their low 32 bits (see luaPairs and luaGCRAWrite).
local span, wrap = 1073741824, 4294967296
local floor, ceil = math.floor, math.ceil
local pack, unpack_struct = struct.pack, struct.unpack
-- ttl returns a TTL of at least ms, in ms and printed: rounded up to 16 ms, so that the keys of a
-- run share a few printed TTLs.
local printed_px = {}
local function ttl(ms)
  local px = ceil(ms / 16) * 16
  if px < 16 then px = 16 end
  local text = printed_px[px]
  if not text then
    text = string.format('%d', px)
    printed_px[px] = text
  end
  return px, text
end
`

const luaHeader = luaClock + `
local per_group = tonumber(ARGV[4])
local function nonneg(x)
  if x < 0 then return 0 end
  return x
end
-- Each strategy X has prep(a), which reads its parameters from ARGV[a] on (only those it uses: a
-- tonumber costs Redis about as much as a step's arithmetic), load(text, q) and dump(state, px),
-- idle(q, st) (ms until st decides like a fresh key's), and the operation's function:
-- check(q, st, cost) returning the decision's five numbers and the new state, peek, forecast,
-- refund returning the new state or nil when nothing changes, or debit returning the new state. A
-- nil state is a fresh key. No function changes a state it was given.
`

// Helpers that only some scripts need: a script defines only what it uses, as Redis runs every
// definition on every call.
const (
	// luaPairs reads and writes states of two doubles (every strategy but GCRA).
	luaPairs = `
-- pair reads a state of two doubles; a shorter one is another strategy's (the policy changed
-- strategy under its name) and reads as a fresh key.
local function pair(text)
  if #text < 16 then return nil end
  local a, b = unpack_struct('<dd', text)
  return {a, b}
end
local function pack2(st) return pack('<dd', st[1], st[2]) end
-- A state of a double and an instant (token bucket: tokens, last; fixed window: count, start)
-- takes 12 bytes instead of 16 when the instant is a whole ms near the server's clock: its low 32
-- bits, read back against the server's clock. A 12-byte string fits Redis's 32-byte allocation
-- class where 16 bytes take 48. It is written only on the server's clock, and only when the
-- instant stays within 2^30 ms (12 days) of that clock for as long as the key lives (its TTL), so
-- it reads back exactly even if the server's clock steps back by as much again; a read at an
-- instant the caller passed still expands it against the server's clock.
local server_ms = server_clock and now
local function near(at, px)
  return server_clock and at == floor(at) and math.abs(at - now) + px <= span
end
local function expand(low)
  if not server_ms then
    local clock = redis.call('TIME')
    server_ms = tonumber(clock[1]) * 1000 + floor(tonumber(clock[2]) / 1000)
  end
  local d = low - server_ms % wrap
  if d >= wrap / 2 then d = d - wrap elseif d < -wrap / 2 then d = d + wrap end
  return server_ms + d
end
-- load_near and dump_near read and write a pair whose element i is the instant.
local function load_near(text, i)
  if #text ~= 12 then return pair(text) end
  local v, low = unpack_struct('<dI4', text)
  local st = {v, v}
  st[i] = expand(low)
  return st
end
local function dump_near(st, px, i)
  if near(st[i], px) then return pack('<dI4', st[3 - i], st[i] % wrap) end
  return pack2(st)
end
`
	// luaLists reads states that are lists of pairs (the sliding windows).
	luaLists = `
local function pairs_of(text)
  local list = {}
  for at = 1, #text - 15, 16 do
    local a, b = unpack_struct('<dd', text, at)
    list[#list + 1] = {a, b}
  end
  return list
end
`
	// luaPeeked is what a peek reports: whether a check of cost 1 would pass, and what is left now.
	luaPeeked = `
local function peeked(ok, limit, remaining, reset_at, retry)
  if ok then return 1, limit, nonneg(remaining), reset_at, 0 end
  return 0, limit, nonneg(remaining), reset_at, retry
end
`
	luaSpendable = `
local function spendable(avail, cost)
  return nonneg(floor(avail / cost))
end
`
)

// luaStrategy is one strategy's Lua: what every operation needs, and each operation's function.
type luaStrategy struct {
	common string
	ops    [numOps]string
}

var luaStrategies = map[byte]luaStrategy{
	'g': {
		common: `
local g = {}
function g.prep(a)
  local limit, period, burst = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local T = period / limit
  return {T = T, tau = T * burst, limit = burst}
end
function g.load(text)
  if #text < 8 then return nil end -- another strategy's state (an empty list): a fresh key
  return (unpack_struct('<d', text))
end
function g.dump(st) return pack('<d', st) end
function g.idle(q, st) return st - now end
`,
		ops: [numOps]string{
			opCheck: `
function g.check(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  local new_tat = tat + q.T * cost
  local allow_at = new_tat - q.tau
  if now < allow_at then
    return 0, q.limit, nonneg(floor((q.tau - (tat - now)) / q.T)), ceil(tat), ceil(allow_at - now), st
  end
  return 1, q.limit, nonneg(floor((q.tau - (new_tat - now)) / q.T)), ceil(new_tat), 0, new_tat
end
`,
			opPeek: `
function g.peek(q, st)
  local tat = st or 0
  if tat < now then tat = now end
  local allow_at = tat + q.T - q.tau
  return peeked(now >= allow_at, q.limit, floor((q.tau - (tat - now)) / q.T), ceil(tat), ceil(allow_at - now))
end
`,
			opForecast: `
function g.forecast(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  local avail = (q.tau - (tat - now)) / q.T
  local next_at = now
  if tat > now then
    next_at = math.min(ceil(now + (floor(avail) + 1 - avail) * q.T), ceil(tat))
  end
  return spendable(avail, cost), next_at, ceil(tat)
end
`,
			opRefund: `
function g.refund(q, st, cost)
  if not st then return nil end
  local tat = st
  if tat < now then tat = now end
  tat = tat - q.T * cost
  if tat < now then tat = now end
  return tat
end
`,
			opDebit: `
function g.debit(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  return tat + q.T * cost
end
`,
		},
	},
	't': {
		common: `
local t = {}
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
`,
		ops: [numOps]string{
			opCheck: `
function t.check(q, st, cost)
  local n = t.tokens(q, st)
  if n >= cost then
    local left = n - cost
    return 1, q.limit, nonneg(floor(left)), t.full_at(q, left), 0, {left, now}
  end
  return 0, q.limit, nonneg(floor(n)), t.full_at(q, n), ceil((cost - n) / q.per_ms), st
end
`,
			opPeek: `
function t.peek(q, st)
  local n = t.tokens(q, st)
  return peeked(n >= 1, q.limit, floor(n), t.full_at(q, n), ceil((1 - n) / q.per_ms))
end
`,
			opForecast: `
function t.forecast(q, st, cost)
  local n = t.tokens(q, st)
  local next_at = now
  if n < q.cap then
    next_at = now + ceil((math.min(floor(n) + 1, q.cap) - n) / q.per_ms)
  end
  return spendable(n, cost), next_at, t.full_at(q, n)
end
`,
			opRefund: `
function t.refund(q, st, cost)
  if not st then return nil end
  local n = t.tokens(q, st) + cost
  if n > q.cap then n = q.cap end
  return {n, math.max(now, st[2])}
end
`,
			opDebit: `
function t.debit(q, st, cost)
  local last = now
  if st and st[2] > now then last = st[2] end
  return {t.tokens(q, st) - cost, last}
end
`,
		},
	},
	'f': {
		common: `
local f = {}
-- Windows are window ms long, or with window 0 the calendar windows b0 to b3 (three in a row
-- around the caller's clock, which Redis's clock is within a window of).
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
`,
		ops: [numOps]string{
			opCheck: `
function f.check(q, st, cost)
  local start, reset_at, count = f.count(q, st)
  local c = count + cost
  if c <= q.limit then
    return 1, q.limit, nonneg(q.limit - c), reset_at, 0, {start, c}
  end
  return 0, q.limit, nonneg(q.limit - count), reset_at, ceil(reset_at - now), st
end
`,
			opPeek: `
function f.peek(q, st)
  local _, reset_at, count = f.count(q, st)
  local full = now
  if count > 0 then full = reset_at end
  return peeked(count + 1 <= q.limit, q.limit, q.limit - count, full, ceil(reset_at - now))
end
`,
			opForecast: `
function f.forecast(q, st, cost)
  local _, stop, count = f.count(q, st)
  local full = now
  if count > 0 then full = ceil(stop) end
  return spendable(q.limit - count, cost), full, full
end
`,
			opRefund: `
function f.refund(q, st, cost)
  local start, _, count = f.count(q, st)
  if count <= 0 then return nil end
  return {start, nonneg(count - cost)}
end
`,
			opDebit: `
function f.debit(q, st, cost)
  local start, _, count = f.count(q, st)
  return {start, count + cost}
end
`,
		},
	},
	's': {
		// A sliding window's state maps slot j % (S+1) to {j, count}.
		common: `
local s = {}
function s.prep(a)
  local limit, window, buckets = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  return {limit = limit, window = window, S = buckets, slots = buckets + 1, w = window / buckets}
end
function s.load(text, q)
  local st = {}
  for _, e in ipairs(pairs_of(text)) do
    local slot = e[1] % q.slots
    if not st[slot] or e[1] > st[slot][1] then st[slot] = e end
  end
  return st
end
function s.dump(st)
  local parts = {}
  for _, e in pairs(st) do
    if e[2] > 0 then parts[#parts + 1] = pack2(e) end
  end
  return table.concat(parts)
end
function s.get(q, st, j)
  if not st then return 0 end
  local e = st[j % q.slots]
  if e and e[1] == j then return e[2] end
  return 0
end
function s.reset_at(q, j)
  return ceil((j + 1) * q.w + q.window)
end
-- newest is the newest bucket with a count that still counts in bucket c or later.
function s.newest(q, st, c)
  local newest
  if st then
    for _, e in pairs(st) do
      if e[2] > 0 and e[1] >= c - q.S and (not newest or e[1] > newest) then newest = e[1] end
    end
  end
  return newest
end
function s.idle(q, st)
  local j = s.newest(q, st, floor(now / q.w))
  if not j then return 0 end
  return s.reset_at(q, j) - now
end
function s.copy(st)
  local c = {}
  if st then
    for k, e in pairs(st) do c[k] = {e[1], e[2]} end
  end
  return c
end
function s.view(q, st)
  local c = floor(now / q.w)
  local elapsed = now - c * q.w
  if elapsed < 0 then elapsed = 0 end
  local weight = (q.w - elapsed) / q.w
  if weight < 0 then weight = 0 end
  if weight > 1 then weight = 1 end
  local full = 0
  for j = c - q.S + 1, c do full = full + s.get(q, st, j) end
  local oldest = s.get(q, st, c - q.S)
  return {c = c, weight = weight, oldest = oldest, estimate = full + oldest * weight}
end
function s.retry(q, v, cost)
  local d = v.estimate + cost - q.limit
  local r
  if v.oldest > 0 and d <= v.oldest * v.weight then
    r = ceil(d * q.w / v.oldest)
  else
    r = ceil((v.c + 1) * q.w - now)
  end
  if r < 1 then r = 1 end
  return r
end
function s.full_at(q, st, v)
  local j = s.newest(q, st, v.c)
  if j then return s.reset_at(q, j) end
  return now
end
`,
		ops: [numOps]string{
			opCheck: `
function s.check(q, st, cost)
  local v = s.view(q, st)
  local projected = v.estimate + cost
  if projected <= q.limit then
    local next_st = s.copy(st)
    next_st[v.c % q.slots] = {v.c, s.get(q, st, v.c) + cost}
    return 1, q.limit, nonneg(floor(q.limit - projected)), s.reset_at(q, v.c), 0, next_st
  end
  return 0, q.limit, nonneg(floor(q.limit - v.estimate)), s.reset_at(q, v.c), s.retry(q, v, cost), st
end
`,
			opPeek: `
function s.peek(q, st)
  local v = s.view(q, st)
  return peeked(v.estimate + 1 <= q.limit, q.limit, floor(q.limit - v.estimate), s.full_at(q, st, v), s.retry(q, v, 1))
end
`,
			opForecast: `
function s.forecast(q, st, cost)
  local v = s.view(q, st)
  local fc = {spendable(q.limit - v.estimate, cost), now, s.full_at(q, st, v)}
  if fc[3] == now then return fc[1], fc[2], fc[3] end
  -- Follow the estimate bucket by bucket as the oldest counts slide out, until it falls to
  -- target: one more whole unit.
  local target = q.limit - (floor(q.limit - v.estimate) + 1)
  local full = v.estimate - v.oldest * v.weight
  local oldest, stop = v.oldest, (v.c + 1) * q.w
  for j = v.c, v.c + q.S do
    if full <= target then
      if oldest <= 0 then
        fc[2] = now
      else
        fc[2] = math.max(ceil(stop - (target - full) * q.w / oldest), now)
      end
      return fc[1], fc[2], fc[3]
    end
    oldest = s.get(q, st, j - q.S + 1)
    full = full - oldest
    stop = stop + q.w
  end
  return fc[1], fc[3], fc[3]
end
`,
			opRefund: `
function s.refund(q, st, cost)
  if not st then return nil end
  local next_st = s.copy(st)
  local left = cost
  local c = floor(now / q.w)
  local j = c
  while j >= c - q.S and left > 0 do
    local e = next_st[j % q.slots]
    if e and e[1] == j and e[2] > 0 then
      local take = math.min(e[2], left)
      e[2] = e[2] - take
      left = left - take
    end
    j = j - 1
  end
  return next_st
end
`,
			opDebit: `
function s.debit(q, st, cost)
  local c = floor(now / q.w)
  local next_st = s.copy(st)
  next_st[c % q.slots] = {c, s.get(q, st, c) + cost}
  return next_st
end
`,
		},
	},
	'l': {
		// A sliding log's state is a list of runs {at, n}, oldest first.
		common: `
local l = {}
function l.prep(a)
  local limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  return {limit = limit, window = window}
end
l.load = pairs_of
function l.dump(st)
  local parts = {}
  for i, r in ipairs(st) do parts[i] = pack2(r) end
  return table.concat(parts)
end
function l.idle(q, st)
  if #st == 0 then return 0 end
  return st[#st][1] + q.window - now
end
-- live is the runs still inside the window, and their count.
function l.live(q, st)
  local runs, count = {}, 0
  if st then
    local start = now - q.window
    for _, r in ipairs(st) do
      if r[1] > start then
        runs[#runs + 1] = r
        count = count + r[2]
      end
    end
  end
  return runs, count
end
-- add returns runs with cost more units at now, in order of instant.
function l.add(runs, cost)
  local next_st, placed = {}, false
  for _, r in ipairs(runs) do
    if not placed and r[1] >= now then
      if r[1] == now then
        r = {r[1], r[2] + cost}
      else
        next_st[#next_st + 1] = {now, cost}
      end
      placed = true
    end
    next_st[#next_st + 1] = r
  end
  if not placed then next_st[#next_st + 1] = {now, cost} end
  return next_st
end
function l.full_at(q, runs)
  if #runs == 0 then return now end
  return ceil(runs[#runs][1] + q.window)
end
function l.retry(q, runs, count, cost)
  if count == 0 then return q.window end
  local k = count + cost - q.limit
  if k < 1 then k = 1 end
  if k > count then k = count end
  local at = runs[#runs][1]
  for _, r in ipairs(runs) do
    if k <= r[2] then
      at = r[1]
      break
    end
    k = k - r[2]
  end
  local retry = ceil(at + q.window - now)
  if retry < 1 then retry = 1 end
  return retry
end
`,
		ops: [numOps]string{
			opCheck: `
function l.reset_at(q, runs)
  local oldest = now
  if #runs > 0 then oldest = runs[1][1] end
  return ceil(oldest + q.window)
end
function l.check(q, st, cost)
  local runs, count = l.live(q, st)
  if count + cost <= q.limit then
    local next_st = l.add(runs, cost)
    return 1, q.limit, nonneg(q.limit - (count + cost)), l.reset_at(q, next_st), 0, next_st
  end
  return 0, q.limit, nonneg(q.limit - count), l.reset_at(q, runs), l.retry(q, runs, count, cost), st
end
`,
			opPeek: `
function l.peek(q, st)
  local runs, count = l.live(q, st)
  return peeked(count + 1 <= q.limit, q.limit, q.limit - count, l.full_at(q, runs), l.retry(q, runs, count, 1))
end
`,
			opForecast: `
function l.forecast(q, st, cost)
  local runs, count = l.live(q, st)
  local next_at = now
  if #runs > 0 then next_at = ceil(runs[1][1] + q.window) end
  return spendable(q.limit - count, cost), next_at, l.full_at(q, runs)
end
`,
			opRefund: `
function l.refund(q, st, cost)
  if not st then return nil end
  local runs = l.live(q, st)
  local next_st = {}
  for i, r in ipairs(runs) do next_st[i] = {r[1], r[2]} end
  while cost > 0 and #next_st > 0 do
    local last = next_st[#next_st]
    local take = math.min(last[2], cost)
    last[2] = last[2] - take
    cost = cost - take
    if last[2] == 0 then next_st[#next_st] = nil end
  end
  return next_st
end
`,
			opDebit: `
function l.debit(q, st, cost)
  return l.add((l.live(q, st)), cost)
end
`,
		},
	},
}

// luaSingle is the body of a check of one step, the most common call: what luaMainHead and
// luaMain[opCheck] do, without what several steps need.
const luaSingle = `
local x = S[ARGV[6]]
local q = x.prep(7)
local key = KEYS[1]
local text = redis.call('GET', key)
local st
if text then st = x.load(text, q) end
local ok, limit, remaining, reset_at, retry, next_st = x.check(q, st, tonumber(ARGV[14]))
if ok == 1 then
  local px = ceil(x.idle(q, next_st)) + slack
  if px < 1 then px = 1 end
  redis.call('SET', key, x.dump(next_st, px), 'PX', px)
end
return {ok, limit, remaining, reset_at, retry}
`

// luaGCRABatchHead starts the scripts of a batch of GCRA checks: steps of one GCRA limit and cost,
// each a group of its own (concurrent Checks of one policy, batched, and CheckMany), the call a
// busy service sends most. With luaClock, it and luaGCRABatch or luaGCRABatchDistinct are the
// whole script, with g.check's admission and the main loop's reads and writes inlined: defining
// the strategy's functions and the main loop's helpers, and every call from Lua to Lua or C, costs
// Redis about as much as a step's arithmetic.
//
// On the server's clock, luaGCRAWrite spares most writes their TTL, which costs Redis more than the
// rest of the SET: it writes 12 bytes, the TAT and the low 32 bits of the key's expiry E (on the
// server's clock; Redis expires the key at E or a ms later), with a TTL of the key's idle time plus
// twice the slack. A later write whose key must live until need (idle time plus the slack) keeps
// that TTL while need <= E <= need + slack, so a key outlives its state by at least the slack and
// by at most twice the slack. An 8-byte state (written at an explicit instant, by another operation
// or by an older sluice) has no known expiry and is written with a TTL anew.
//
// The reply is what the caller needs to compute each decision with package algo (see batchReply in
// redis.go): five integers per step would cost Redis more than the step.
const luaGCRABatchHead = `
local limit, period, burst, cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local T = period / limit
local tau = T * burst
local inc = T * cost
` + luaBatchKeys

// luaBatchKeys reads every key's state with one MGET (GET in the loop past 4000 keys, as an MGET
// of more would need a Lua stack that deep), and starts the reply's lists: before holds each step's
// state before it, admitted a '1' or '0' per step.
const luaBatchKeys = `
local keys, call = KEYS, redis.call
local texts = false
if #keys <= 4000 then texts = call('MGET', unpack(keys)) end
local before, admitted = {}, {}
local server_ms = server_clock and now -- the server's clock, read once where a state needs it
`

// luaGCRARead sets tat and low to the state of step i's key as MGET found it: its TAT (0: a fresh
// key) and, where the state holds them, its expiry's low 32 bits (else false). It and
// luaGCRAWrite are pasted into the loops of both batch scripts: as functions they would cost
// Redis 6% more.
const luaGCRARead = `
do
  local text
  if texts then text = texts[i] else text = call('GET', key) end
  tat, low = 0, false
  if text then
    local len = #text
    if len == 12 then
      tat, low = unpack_struct('<dI4', text)
    elseif len >= 8 then
      tat = unpack_struct('<d', text)
    end
  end
end
`

// luaGCRAWrite writes the new TAT tat of key, whose state held low (or false).
const luaGCRAWrite = `
do
  local idle = ceil(tat - now)
  if not server_clock then
    local _, text = ttl(idle + slack)
    call('SET', key, pack('<d', tat), 'PX', text)
  else
    local need, kept = now + idle + slack, false
    if low then
      local at` + luaNearInstant + `if at >= need and at <= need + slack then
        call('SET', key, pack('<dI4', tat, low), 'KEEPTTL')
        kept = true
      end
    end
    if not kept then
      local px, text = ttl(idle + 2 * slack)
      if px <= span then
        call('SET', key, pack('<dI4', tat, (now + px) % wrap), 'PX', text)
      else
        call('SET', key, pack('<d', tat), 'PX', text)
      end
    end
  end
end
`

// luaBatchReply returns now, then each step's before (GCRA: its TAT before it, 0 for a fresh key;
// token bucket: the tokens it found; fixed window: what the key had spent in the window) as
// little-endian doubles, then a byte per step, '1' where it was admitted. The caller computes each
// decision from these with package algo, exactly as the strategy's check would (the same
// operations), and checks it against the byte.
const luaBatchReply = `
local n = #before
if n <= 1000 then
  return pack('<' .. string.rep('d', n + 1), now, unpack(before)) .. table.concat(admitted)
end
-- unpack puts its values on Lua's stack, which holds a few thousand.
local parts = {pack('<d', now)}
for first = 1, n, 1000 do
  local last = math.min(first + 999, n)
  parts[#parts + 1] = pack('<' .. string.rep('d', last - first + 1), unpack(before, first, last))
end
parts[#parts + 1] = table.concat(admitted)
return table.concat(parts)
`

// luaGCRABatch is the body of a batch that may check a key more than once: each check of a key sees
// the ones before it, and each key is written once, at the end.
const luaGCRABatch = `
local written, order, expiry = {}, {}, {}
local w = 0
for i = 1, #keys do
  local key = keys[i]
  local tat, low = written[key], false
  if not tat then` + luaGCRARead + `end
  before[i] = tat
  if tat < now then tat = now end
  tat = tat + inc
  if now < tat - tau then
    admitted[i] = '0'
  else
    admitted[i] = '1'
    if not written[key] then
      w = w + 1
      order[w], expiry[w] = key, low
    end
    written[key] = tat
  end
end
for j = 1, w do
  local key, low = order[j], expiry[j]
  local tat = written[key]` + luaGCRAWrite + `end
` + luaBatchReply

// luaGCRABatchDistinct is the body of a batch whose keys are all different (the caller checks):
// each step reads and writes its key on its own.
const luaGCRABatchDistinct = `
for i = 1, #keys do
  local key = keys[i]
  local tat, low` + luaGCRARead + `before[i] = tat
  if tat < now then tat = now end
  tat = tat + inc
  if now < tat - tau then
    admitted[i] = '0'
  else
    admitted[i] = '1'` + luaGCRAWrite + `end
end
` + luaBatchReply

// luaNearInstant sets at to the instant whose low 32 bits are low, the one nearest the server's
// clock (see luaPairs' expand), reading that clock once per script where the call passed its own.
// It is pasted into the batch scripts' reads, and into GCRA's write for the key's expiry.
const luaNearInstant = `
if not server_ms then
  local clock = call('TIME')
  server_ms = tonumber(clock[1]) * 1000 + floor(tonumber(clock[2]) / 1000)
end
do
  local d = low - server_ms % wrap
  if d >= wrap / 2 then d = d - wrap elseif d < -wrap / 2 then d = d + wrap end
  at = server_ms + d
end
`

// luaBucketBatchHead, with luaClock and a body of countedBatch, is the script of a batch of token
// bucket checks, as luaGCRABatchHead is GCRA's. Its writes always set a TTL: a
// token bucket's state with its expiry would take 16 bytes on the server's clock, past the 32-byte
// allocation class its 12 take now.
const luaBucketBatchHead = `
local capacity, per_ms, cost = tonumber(ARGV[4]), tonumber(ARGV[5]) / 1000, tonumber(ARGV[7])
` + luaBatchKeys

// luaBucketRead sets n to the tokens step i's key holds at now, as MGET found its state (t.tokens,
// with t.load's two forms inlined).
var luaBucketRead = `
do
  local text
  if texts then text = texts[i] else text = call('GET', key) end
  n = capacity
  if text then
    local v, at` + nearPairRead("v, at") + `if at then
      local elapsed = now - at
      if elapsed < 0 then elapsed = 0 end
      n = v + elapsed * per_ms
      if n > capacity then n = capacity end
    end
  end
end
`

// luaBucketWrite writes key's state: v tokens left at now (t.dump, inlined).
var luaBucketWrite = nearPairWrite("ceil((capacity - v) / per_ms) + slack", "now", "v, at")

// nearPairRead sets v and at from text, the state of a value v as of an instant at: 12 bytes hold
// v and at's low 32 bits (see luaPairs), 16 the two doubles in the order wide names. It leaves
// both nil for a state of another strategy.
func nearPairRead(wide string) string {
	return `
local len = #text
if len == 12 then
  local low
  v, low = unpack_struct('<dI4', text)` + luaNearInstant + `elseif len >= 16 then
  ` + wide + ` = unpack_struct('<dd', text)
end
`
}

// nearPairWrite writes key's state of v as of the instant at (an expression), with a TTL of ms:
// 12 bytes where at is a whole ms that stays near the server's clock for the key's life (luaPairs'
// near), else 16 in the order wide names.
func nearPairWrite(ms, at, wide string) string {
	return `
do
  local at = ` + at + `
  local px, text = ttl(` + ms + `)
  local d = at - now
  if d < 0 then d = -d end
  if server_clock and at % 1 == 0 and d + px <= span then
    call('SET', key, pack('<dI4', v, at % wrap), 'PX', text)
  else
    call('SET', key, pack('<dd', ` + wide + `), 'PX', text)
  end
end
`
}

// luaWindowBatchHead, with luaClock and a body of countedBatch, is the script of a batch of fixed
// window checks (windows of windowMs; a calendar window takes the general
// script), as luaGCRABatchHead is GCRA's. Its writes always set a TTL, as a token bucket's do.
const luaWindowBatchHead = `
local limit, window, cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local start = floor(now / window) * window
local stop = start + window
` + luaBatchKeys

// luaWindowRead sets n to what step i's key has spent in now's window, as MGET found its state
// (f.count, with f.load's two forms inlined).
var luaWindowRead = `
do
  local text
  if texts then text = texts[i] else text = call('GET', key) end
  n = 0
  if text then
    local v, at` + nearPairRead("at, v") + `if at == start then n = v end
  end
end
`

// luaWindowWrite writes key's state: v spent in now's window (f.dump, inlined).
var luaWindowWrite = nearPairWrite("ceil(stop - now) + slack", "start", "at, v")

// luaMainHead reads every key's state with one MGET (a call from Lua costs Redis more than the
// work of most steps) and every limit's parameters.
const luaMainHead = `
local n = #KEYS
local texts = false
if n <= 4000 then texts = redis.call('MGET', unpack(KEYS)) end
local limits = {}
for d = 1, tonumber(ARGV[5]) do
  local a = 7 * d - 2
  local x = S[ARGV[a + 1]]
  limits[d] = {x, x.prep(a + 2)}
end
local base = 5 + 7 * #limits
-- Steps that all use one limit and cost send that pair once. (A tonumber costs Redis about as
-- much as a step's arithmetic: uniform steps read their pair once.)
local uniform = #ARGV == base + 2
local ux, uq, ucost
if uniform then
  local l = limits[tonumber(ARGV[base + 1])]
  ux, uq, ucost = l[1], l[2], tonumber(ARGV[base + 2])
end
`

// luaMainSteps defines how a step is read and a state is written. states holds the states the
// call has written so far (false: a fresh key).
const luaMainSteps = `
local states, reply = {}, {}
local function state_of(i, key, x, q)
  local st = states[key]
  if st ~= nil then return st or nil end
  local text
  if texts then text = texts[i] else text = redis.call('GET', key) end
  if text then return x.load(text, q) end
  return nil
end
-- save records st as key's new state; flush writes each saved key once, at the end, so a key
-- checked many times in one run (a hot key in a batch) costs one SET.
local dirty, dirty_x, dirty_q = {}, {}, {}
local function save(key, x, q, st)
  if states[key] == nil then
    local d = #dirty + 1
    dirty[d], dirty_x[d], dirty_q[d] = key, x, q
  end
  states[key] = st
end
local function flush()
  for d = 1, #dirty do
    local key, x, q = dirty[d], dirty_x[d], dirty_q[d]
    local st = states[key]
    local px, text = ttl(ceil(x.idle(q, st)) + slack)
    redis.call('SET', key, x.dump(st, px), 'PX', text)
  end
end
-- step returns step i's key, strategy, parameters and cost.
local function step(i)
  if uniform then return KEYS[i], ux, uq, ucost end
  local a = base + 2 * i
  local l = limits[tonumber(ARGV[a - 1])]
  return KEYS[i], l[1], l[2], tonumber(ARGV[a])
end
local r = 0
`

// luaMain is each operation's body.
var luaMain = [numOps]string{
	opCheck: `
if per_group == 1 then
  for i = 1, n do
    local key, x, q, cost = step(i)
    local ok, limit, remaining, reset_at, retry, st = x.check(q, state_of(i, key, x, q), cost)
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok, limit, remaining, reset_at, retry
    r = r + 5
    if ok == 1 then save(key, x, q, st) end
  end
else
  for first = 1, n, per_group do
    -- pending holds the group's new states until every step of it is allowed.
    local pending, order, all = {}, {}, true
    for i = first, math.min(first + per_group - 1, n) do
      local key, x, q, cost = step(i)
      local st = pending[key]
      if st == nil then st = state_of(i, key, x, q) else st = st or nil end
      local ok, limit, remaining, reset_at, retry, next_st = x.check(q, st, cost)
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok, limit, remaining, reset_at, retry
      r = r + 5
      if ok == 1 then
        if pending[key] == nil then order[#order + 1] = {key, x, q} end
        pending[key] = next_st or false
      else
        all = false
      end
    end
    if all then
      for _, w in ipairs(order) do save(w[1], w[2], w[3], pending[w[1]]) end
    end
  end
end
flush()
return reply
`,
	opPeek: `
for i = 1, n do
  local key, x, q = step(i)
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = x.peek(q, state_of(i, key, x, q))
  r = r + 5
end
flush()
return reply
`,
	opForecast: `
for i = 1, n do
  local key, x, q, cost = step(i)
  reply[r + 1], reply[r + 2], reply[r + 3] = x.forecast(q, state_of(i, key, x, q), cost)
  r = r + 3
end
flush()
return reply
`,
	opRefund: `
for i = 1, n do
  local key, x, q, cost = step(i)
  local st = x.refund(q, state_of(i, key, x, q), cost)
  if st ~= nil then save(key, x, q, st) end
end
flush()
return reply
`,
	opDebit: `
for i = 1, n do
  local key, x, q, cost = step(i)
  save(key, x, q, x.debit(q, state_of(i, key, x, q), cost))
end
flush()
return reply
`,
}

// source assembles the script of operation o over the strategies of the kind set (bit i: kinds[i]);
// single is a check of one step.
func source(o op, set uint8, single bool) string {
	var b strings.Builder
	b.WriteString(luaHeader)
	if set&^1 != 0 {
		b.WriteString(luaPairs)
	}
	if set&(1<<3|1<<4) != 0 {
		b.WriteString(luaLists)
	}
	switch o {
	case opPeek:
		b.WriteString(luaPeeked)
	case opForecast:
		b.WriteString(luaSpendable)
	}
	var table []string
	for i := range len(kinds) {
		if set&(1<<i) == 0 {
			continue
		}
		k := kinds[i]
		b.WriteString(luaStrategies[k].common)
		b.WriteString(luaStrategies[k].ops[o])
		table = append(table, string(k)+" = "+string(k))
	}
	b.WriteString("local S = {" + strings.Join(table, ", ") + "}\n")
	if single {
		b.WriteString(luaSingle)
	} else {
		b.WriteString(luaMainHead)
		b.WriteString(luaMainSteps)
		b.WriteString(luaMain[o])
	}
	return b.String()
}

// scripts holds every script, made on first use: by operation and kind set, the checks of one
// step by kind set, and the batches of one strategy by kind set and whether keys repeat.
var (
	scripts [numOps][1 << len(kinds)]lazyScript
	singles [1 << len(kinds)]lazyScript
	batches [1 << len(kinds)][2]lazyScript
)

type lazyScript struct {
	once sync.Once
	s    *script
}

func (e *lazyScript) get(source func() string) *script {
	e.once.Do(func() { e.s = newScript(source()) })
	return e.s
}

// batchBodies are the scripts of a batch of one strategy (see luaGCRABatchHead) by kind set: the
// head, then the body for keys that may repeat and for distinct keys.
var batchBodies = map[uint8][3]string{
	1 << 0: {luaGCRABatchHead, luaGCRABatch, luaGCRABatchDistinct},
	1 << 1: countedBatch(luaBucketBatchHead, luaBucketRead, "n >= cost", "n - cost", luaBucketWrite),
	1 << 2: countedBatch(luaWindowBatchHead, luaWindowRead, "n + cost <= limit", "n + cost", luaWindowWrite),
}

// countedBatch returns the head and two bodies of a batch of a strategy whose state after a check
// is one number v of now (a token bucket's tokens, a fixed window's count): read sets n from step
// i's key, admits is whether n admits the step, next is v after it, and write writes v to key. The
// first body lets a key checked twice see its first check and writes each key once, at the end;
// the second, for keys all different, reads, decides and writes each in one pass.
func countedBatch(head, read, admits, next, write string) [3]string {
	repeats := `
local written, order = {}, {}
local w = 0
for i = 1, #keys do
  local key = keys[i]
  local n = written[key]
  if not n then` + read + `end
  before[i] = n
  if ` + admits + ` then
    admitted[i] = '1'
    if not written[key] then
      w = w + 1
      order[w] = key
    end
    written[key] = ` + next + `
  else
    admitted[i] = '0'
  end
end
for j = 1, w do
  local key = order[j]
  local v = written[key]` + write + `end
` + luaBatchReply
	distinct := `
for i = 1, #keys do
  local key = keys[i]
  local n` + read + `before[i] = n
  if ` + admits + ` then
    admitted[i] = '1'
    local v = ` + next + write + `
  else
    admitted[i] = '0'
  end
end
` + luaBatchReply
	return [3]string{head, repeats, distinct}
}

// batchBody returns the head and bodies of c's script (batchBodies) when c is a batch of checks
// with a script of their own (luaGCRABatchHead), one check included: steps of one GCRA, token
// bucket or fixed window (not a calendar one) limit and cost, each its own group. steps is
// c.stepArgs().
func (c *call) batchBody(steps []string) ([3]string, bool) {
	if c.op != opCheck || c.perGroup != 1 || len(steps) != 2 {
		return [3]string{}, false
	}
	if c.set == 1<<2 && c.defs[2] == "0" { // windowMs 0: a calendar window
		return [3]string{}, false
	}
	body, ok := batchBodies[c.set]
	return body, ok
}

// plan returns the script that runs c and its arguments: for a batch now, the slack, the instant
// to give up, the limit's first three parameters and the cost; for any other call, as the top of
// this file describes.
func (c *call) plan() (*script, []string) {
	steps := c.stepArgs()
	if body, ok := c.batchBody(steps); ok {
		d := 0
		if distinct(c.keys) {
			d = 1
		}
		sc := batches[c.set][d].get(func() string { return luaClock + body[0] + body[1+d] })
		return sc, []string{c.head[0], c.head[1], c.head[2], c.defs[1], c.defs[2], c.defs[3], c.steps[1]}
	}
	single := c.op == opCheck && len(c.keys) == 1
	e := &scripts[c.op][c.set]
	if single {
		e = &singles[c.set]
	}
	sc := e.get(func() string { return source(c.op, c.set, single) })
	argv := make([]string, 0, len(c.head)+1+len(c.defs)+len(steps))
	argv = append(append(argv, c.head...), strconv.Itoa(len(c.limits)))
	return sc, append(append(argv, c.defs...), steps...)
}

// seed hashes keys for distinct.
var seed = maphash.MakeSeed()

// distinct reports whether keys holds no key twice. Two keys whose hashes collide count as the
// same, which costs a batch only its faster script.
func distinct(keys []string) bool {
	if len(keys) > 64 {
		seen := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			if _, ok := seen[k]; ok {
				return false
			}
			seen[k] = struct{}{}
		}
		return true
	}
	var table [128]uint64 // open addressing; 0 is an empty slot
	for _, k := range keys {
		h := maphash.String(seed, k) | 1
		for i := h % 128; ; i = (i + 1) % 128 {
			if table[i] == 0 {
				table[i] = h
				break
			}
			if table[i] == h {
				return false
			}
		}
	}
	return true
}
