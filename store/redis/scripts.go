package redisstore

// decideSource is the one Lua script behind every operation. It decides a list of steps, each one
// limit of one key: KEYS[i] is step i's key, and the arguments are
//
//	ARGV[1] now, epoch ms; 0 reads the server clock with TIME
//	ARGV[2] TTL slack, ms added to every expiry
//	ARGV[3] the operation: c check, p peek, f forecast, r refund
//	ARGV[4] steps per group (check only): each group is all or nothing, groups are independent
//	then five per step: strategy (g t f s l), cost, and up to three parameters, as Go's
//	strconv.FormatFloat(x, 'g', -1, 64) writes them, which Lua's tonumber reads back as the same
//	double
//
// A check decides the steps of a group in order, each against the state the earlier steps of the
// call left (a key checked twice sees its first check), and keeps the group's new states only if
// every step of it was allowed. Only then, at the end, are states written: one SET with a TTL per
// changed key. It replies five numbers per step for a check or a peek (allowed, limit, remaining,
// resetAt, retryAfterMs), three for a forecast (spendableNow, nextReplenishAt, fullAt), none for a
// refund.
//
// Redis turns each Lua number of a reply into an integer by truncation, which is how package algo
// converts too; floors and ceilings are math.floor and math.ceil as algo's are math.Floor and
// math.Ceil, and the arithmetic is algo's, operation for operation, so that both round alike.
// States are text, numbers written with %.17g (which reads back as the same double):
//
//	gcra (g)              "tat"
//	tokenBucket (t)       "tokens last"
//	fixedWindow (f)       "start count"
//	slidingWindow (s)     "j count j count …" for the buckets that hold a count
//	slidingWindowLog (l)  "at n at n …", runs of n units admitted at instant at, oldest first
//
// Every write sets a TTL: the time until the state decides like a fresh key's, plus the slack.
const decideSource = `
local now = tonumber(ARGV[1])
if now == 0 then
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local slack = tonumber(ARGV[2])
local op = ARGV[3]
local per_group = tonumber(ARGV[4])
local floor, ceil = math.floor, math.ceil

local function nonneg(x)
  if x < 0 then return 0 end
  return x
end
local function num(x)
  return string.format('%.17g', x)
end
local function numbers(s)
  local t = {}
  for w in string.gmatch(s, '%S+') do t[#t + 1] = tonumber(w) end
  return t
end
-- peeked is what a peek reports: whether a check of cost 1 would pass, and what is left now.
local function peeked(ok, limit, remaining, reset_at, retry)
  if ok then return {1, limit, nonneg(remaining), reset_at, 0} end
  return {0, limit, nonneg(remaining), reset_at, retry}
end
local function spendable(avail, cost)
  return nonneg(floor(avail / cost))
end

-- Each strategy: prep(a, b, c) the parameters; load(text) and dump(state); check(q, st, cost)
-- returning the decision and the new state; peek; forecast; refund returning the new state or nil
-- when nothing changes; idle(q, st), ms until st decides like a fresh key. A nil state is a fresh
-- key. No function changes a state it was given.
local S = {}

S.g = {
  prep = function(limit, period, burst)
    local T = period / limit
    return {T = T, tau = T * burst, limit = burst}
  end,
  load = function(text) return tonumber(text) end,
  dump = num,
  check = function(q, st, cost)
    local tat = st or 0
    if tat < now then tat = now end
    local new_tat = tat + q.T * cost
    local allow_at = new_tat - q.tau
    if now < allow_at then
      return {0, q.limit, nonneg(floor((q.tau - (tat - now)) / q.T)), ceil(tat), ceil(allow_at - now)}, st
    end
    return {1, q.limit, nonneg(floor((q.tau - (new_tat - now)) / q.T)), ceil(new_tat), 0}, new_tat
  end,
  peek = function(q, st)
    local tat = st or 0
    if tat < now then tat = now end
    local allow_at = tat + q.T - q.tau
    return peeked(now >= allow_at, q.limit, floor((q.tau - (tat - now)) / q.T), ceil(tat), ceil(allow_at - now))
  end,
  forecast = function(q, st, cost)
    local tat = st or 0
    if tat < now then tat = now end
    local avail = (q.tau - (tat - now)) / q.T
    local next_at = now
    if tat > now then
      next_at = math.min(ceil(now + (floor(avail) + 1 - avail) * q.T), ceil(tat))
    end
    return {spendable(avail, cost), next_at, ceil(tat)}
  end,
  refund = function(q, st, cost)
    if not st then return nil end
    local tat = st
    if tat < now then tat = now end
    tat = tat - q.T * cost
    if tat < now then tat = now end
    return tat
  end,
  idle = function(q, st)
    return st - now
  end,
}

local function tokens(q, st)
  if not st then return q.cap end
  local elapsed = now - st[2]
  if elapsed < 0 then elapsed = 0 end
  local t = st[1] + elapsed * q.per_ms
  if t > q.cap then t = q.cap end
  return t
end
local function full_at(q, t)
  return now + ceil((q.cap - t) / q.per_ms)
end
S.t = {
  prep = function(capacity, refill)
    return {cap = capacity, per_ms = refill / 1000, limit = capacity}
  end,
  load = numbers,
  dump = function(st) return num(st[1]) .. ' ' .. num(st[2]) end,
  check = function(q, st, cost)
    local t = tokens(q, st)
    if t >= cost then
      local left = t - cost
      return {1, q.limit, nonneg(floor(left)), full_at(q, left), 0}, {left, now}
    end
    return {0, q.limit, nonneg(floor(t)), full_at(q, t), ceil((cost - t) / q.per_ms)}, st
  end,
  peek = function(q, st)
    local t = tokens(q, st)
    return peeked(t >= 1, q.limit, floor(t), full_at(q, t), ceil((1 - t) / q.per_ms))
  end,
  forecast = function(q, st, cost)
    local t = tokens(q, st)
    local next_at = now
    if t < q.cap then
      next_at = now + ceil((math.min(floor(t) + 1, q.cap) - t) / q.per_ms)
    end
    return {spendable(t, cost), next_at, full_at(q, t)}
  end,
  refund = function(q, st, cost)
    if not st then return nil end
    local t = tokens(q, st) + cost
    if t > q.cap then t = q.cap end
    return {t, math.max(now, st[2])}
  end,
  idle = function(q, st)
    return (q.cap - tokens(q, st)) / q.per_ms
  end,
}

local function window_count(q, st)
  local start = floor(now / q.window) * q.window
  if not st or st[1] ~= start then return start, 0 end
  return start, st[2]
end
S.f = {
  prep = function(limit, window)
    return {limit = limit, window = window}
  end,
  load = numbers,
  dump = function(st) return num(st[1]) .. ' ' .. num(st[2]) end,
  check = function(q, st, cost)
    local start, count = window_count(q, st)
    local reset_at = start + q.window
    local c = count + cost
    if c <= q.limit then
      return {1, q.limit, nonneg(q.limit - c), reset_at, 0}, {start, c}
    end
    return {0, q.limit, nonneg(q.limit - count), reset_at, ceil(reset_at - now)}, st
  end,
  peek = function(q, st)
    local start, count = window_count(q, st)
    local reset_at = start + q.window
    local full = now
    if count > 0 then full = reset_at end
    return peeked(count + 1 <= q.limit, q.limit, q.limit - count, full, ceil(reset_at - now))
  end,
  forecast = function(q, st, cost)
    local start, count = window_count(q, st)
    local full = now
    if count > 0 then full = ceil(start + q.window) end
    return {spendable(q.limit - count, cost), full, full}
  end,
  refund = function(q, st, cost)
    local start, count = window_count(q, st)
    if count <= 0 then return nil end
    return {start, nonneg(count - cost)}
  end,
  idle = function(q, st)
    if st[2] == 0 or st[1] < floor(now / q.window) * q.window then return 0 end
    return st[1] + q.window - now
  end,
}

-- A sliding window's state maps slot j % (S+1) to {j, count}.
local function sw_get(q, st, j)
  if not st then return 0 end
  local e = st[j % q.slots]
  if e and e[1] == j then return e[2] end
  return 0
end
local function sw_view(q, st)
  local c = floor(now / q.w)
  local elapsed = now - c * q.w
  if elapsed < 0 then elapsed = 0 end
  local weight = (q.w - elapsed) / q.w
  if weight < 0 then weight = 0 end
  if weight > 1 then weight = 1 end
  local full = 0
  for j = c - q.S + 1, c do full = full + sw_get(q, st, j) end
  local oldest = sw_get(q, st, c - q.S)
  return {c = c, weight = weight, oldest = oldest, estimate = full + oldest * weight}
end
local function sw_reset_at(q, j)
  return ceil((j + 1) * q.w + q.window)
end
local function sw_retry(q, v, cost)
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
-- sw_newest is the newest bucket with a count that still counts at v's instant or later.
local function sw_newest(q, st, v)
  local newest
  if st then
    for _, e in pairs(st) do
      if e[2] > 0 and e[1] >= v.c - q.S and (not newest or e[1] > newest) then newest = e[1] end
    end
  end
  return newest
end
local function sw_full_at(q, st, v)
  local j = sw_newest(q, st, v)
  if j then return sw_reset_at(q, j) end
  return now
end
local function sw_copy(st)
  local c = {}
  if st then
    for k, e in pairs(st) do c[k] = {e[1], e[2]} end
  end
  return c
end
S.s = {
  prep = function(limit, window, buckets)
    return {limit = limit, window = window, S = buckets, slots = buckets + 1, w = window / buckets}
  end,
  load = function(s, q)
    local n, st = numbers(s), {}
    for i = 1, #n, 2 do
      local slot = n[i] % q.slots
      local e = st[slot]
      if not e or n[i] > e[1] then st[slot] = {n[i], n[i + 1]} end
    end
    return st
  end,
  dump = function(st)
    local parts = {}
    for _, e in pairs(st) do
      if e[2] > 0 then
        parts[#parts + 1] = num(e[1])
        parts[#parts + 1] = num(e[2])
      end
    end
    return table.concat(parts, ' ')
  end,
  check = function(q, st, cost)
    local v = sw_view(q, st)
    local projected = v.estimate + cost
    if projected <= q.limit then
      local next_st = sw_copy(st)
      next_st[v.c % q.slots] = {v.c, sw_get(q, st, v.c) + cost}
      return {1, q.limit, nonneg(floor(q.limit - projected)), sw_reset_at(q, v.c), 0}, next_st
    end
    return {0, q.limit, nonneg(floor(q.limit - v.estimate)), sw_reset_at(q, v.c), sw_retry(q, v, cost)}, st
  end,
  peek = function(q, st)
    local v = sw_view(q, st)
    return peeked(v.estimate + 1 <= q.limit, q.limit, floor(q.limit - v.estimate), sw_full_at(q, st, v), sw_retry(q, v, 1))
  end,
  forecast = function(q, st, cost)
    local v = sw_view(q, st)
    local fc = {spendable(q.limit - v.estimate, cost), now, sw_full_at(q, st, v)}
    if fc[3] == now then return fc end
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
        return fc
      end
      oldest = sw_get(q, st, j - q.S + 1)
      full = full - oldest
      stop = stop + q.w
    end
    fc[2] = fc[3]
    return fc
  end,
  refund = function(q, st, cost)
    if not st then return nil end
    local next_st = sw_copy(st)
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
  end,
  idle = function(q, st)
    local v = {c = floor(now / q.w)}
    local j = sw_newest(q, st, v)
    if not j then return 0 end
    return sw_reset_at(q, j) - now
  end,
}

-- A sliding log's state is a list of runs {at, n}, oldest first.
local function log_live(q, st)
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
local function log_reset_at(q, runs)
  local oldest = now
  if #runs > 0 then oldest = runs[1][1] end
  return ceil(oldest + q.window)
end
local function log_full_at(q, runs)
  if #runs == 0 then return now end
  return ceil(runs[#runs][1] + q.window)
end
local function log_retry(q, runs, count, cost)
  if count == 0 then return q.window end
  local k = count + cost - q.limit
  if k < 1 then k = 1 end
  if k > count then k = count end
  local t = runs[#runs][1]
  for _, r in ipairs(runs) do
    if k <= r[2] then
      t = r[1]
      break
    end
    k = k - r[2]
  end
  local retry = ceil(t + q.window - now)
  if retry < 1 then retry = 1 end
  return retry
end
S.l = {
  prep = function(limit, window)
    return {limit = limit, window = window}
  end,
  load = function(s)
    local n, st = numbers(s), {}
    for i = 1, #n, 2 do st[#st + 1] = {n[i], n[i + 1]} end
    return st
  end,
  dump = function(st)
    local parts = {}
    for _, r in ipairs(st) do
      parts[#parts + 1] = num(r[1])
      parts[#parts + 1] = num(r[2])
    end
    return table.concat(parts, ' ')
  end,
  check = function(q, st, cost)
    local runs, count = log_live(q, st)
    if count + cost <= q.limit then
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
      return {1, q.limit, nonneg(q.limit - (count + cost)), log_reset_at(q, next_st), 0}, next_st
    end
    return {0, q.limit, nonneg(q.limit - count), log_reset_at(q, runs), log_retry(q, runs, count, cost)}, st
  end,
  peek = function(q, st)
    local runs, count = log_live(q, st)
    return peeked(count + 1 <= q.limit, q.limit, q.limit - count, log_full_at(q, runs), log_retry(q, runs, count, 1))
  end,
  forecast = function(q, st, cost)
    local runs, count = log_live(q, st)
    local next_at = now
    if #runs > 0 then next_at = ceil(runs[1][1] + q.window) end
    return {spendable(q.limit - count, cost), next_at, log_full_at(q, runs)}
  end,
  refund = function(q, st, cost)
    if not st then return nil end
    local runs = log_live(q, st)
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
  end,
  idle = function(q, st)
    if #st == 0 then return 0 end
    return st[#st][1] + q.window - now
  end,
}

-- states holds each key's state as the call has left it so far: false for a fresh key.
local states = {}
local changed = {}
local function state_of(s, q, key)
  local st = states[key]
  if st == nil then
    local text = redis.call('GET', key)
    st = false
    if text then st = s.load(text, q) end
    states[key] = st
  end
  return st or nil
end

local reply = {}
local function push(t)
  for _, x in ipairs(t) do reply[#reply + 1] = x end
end
local steps = {}
for i = 1, #KEYS do
  local a = 4 + (i - 1) * 5
  local s = S[ARGV[a + 1]]
  local q = s.prep(tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))
  steps[i] = {key = KEYS[i], s = s, q = q, cost = tonumber(ARGV[a + 2])}
end

if op == 'c' then
  for first = 1, #steps, per_group do
    local pending, order, ok = {}, {}, true
    for i = first, math.min(first + per_group - 1, #steps) do
      local step = steps[i]
      local st = pending[step.key]
      if st == nil then st = state_of(step.s, step.q, step.key) else st = st or nil end
      local d, next_st = step.s.check(step.q, st, step.cost)
      push(d)
      if d[1] == 1 then
        if pending[step.key] == nil then order[#order + 1] = step end
        pending[step.key] = next_st or false
      else
        ok = false
      end
    end
    if ok then
      for _, step in ipairs(order) do
        states[step.key] = pending[step.key]
        changed[step.key] = step
      end
    end
  end
elseif op == 'p' then
  for _, step in ipairs(steps) do push(step.s.peek(step.q, state_of(step.s, step.q, step.key))) end
elseif op == 'f' then
  for _, step in ipairs(steps) do
    push(step.s.forecast(step.q, state_of(step.s, step.q, step.key), step.cost))
  end
elseif op == 'r' then
  for _, step in ipairs(steps) do
    local next_st = step.s.refund(step.q, state_of(step.s, step.q, step.key), step.cost)
    if next_st ~= nil then
      states[step.key] = next_st
      changed[step.key] = step
    end
  end
else
  return redis.error_reply('sluice: unknown operation ' .. tostring(op))
end

for _, step in ipairs(steps) do
  if changed[step.key] then
    changed[step.key] = nil
    local st = states[step.key]
    local px = ceil(step.s.idle(step.q, st)) + slack
    if px < 1 then px = 1 end
    redis.call('SET', step.key, step.s.dump(st), 'PX', string.format('%d', px))
  end
end
return reply
`
