-- slidinglog.lua: sliding window log, letter l. Parameters (ARGV[a] on): limit, windowMs.
--
-- State: a list of runs {at, n}, n units admitted at instant at (epoch ms), oldest first, each a
-- pair of doubles: '<dd' each, 16 bytes per run (lists.lua); no runs is an empty string.
-- Key: <prefix>:{<policy>:<key>}, or with :<i> after it for limit i of a composite (strategy.lua).
--@
local l = {}
S.l = l
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
--@ check
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
--@ peek
function l.peek(q, st)
  local runs, count = l.live(q, st)
  return peeked(count + 1 <= q.limit, q.limit, q.limit - count, l.full_at(q, runs), l.retry(q, runs, count, 1))
end
--@ forecast
function l.forecast(q, st, cost)
  local runs, count = l.live(q, st)
  local next_at = now
  if #runs > 0 then next_at = ceil(runs[1][1] + q.window) end
  return spendable(q.limit - count, cost), next_at, l.full_at(q, runs)
end
--@ refund
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
--@ debit
function l.debit(q, st, cost)
  return l.add((l.live(q, st)), cost)
end
