-- slidingwindow.lua: sliding window, letter s. Parameters (ARGV[a] on): limit, windowMs, buckets.
--
-- The window is split into buckets of w = windowMs / buckets ms; bucket j holds what was admitted
-- in [j * w, (j + 1) * w). State: the buckets with a count, in any order, each a pair {j, count}
-- of doubles: '<dd' each, 16 bytes per bucket (lists.lua); no buckets is an empty string. Loaded,
-- it maps slot j % (buckets + 1) to {j, count}, the newest j of each slot.
-- Key: <prefix>:{<policy>:<key>}, or with :<i> after it for limit i of a composite (strategy.lua).
--@
local s = {}
S.s = s
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
--@ check
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
--@ peek
function s.peek(q, st)
  local v = s.view(q, st)
  return peeked(v.estimate + 1 <= q.limit, q.limit, floor(q.limit - v.estimate), s.full_at(q, st, v), s.retry(q, v, 1))
end
--@ forecast
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
--@ refund
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
--@ debit
function s.debit(q, st, cost)
  local c = floor(now / q.w)
  local next_st = s.copy(st)
  next_st[c % q.slots] = {c, s.get(q, st, c) + cost}
  return next_st
end
