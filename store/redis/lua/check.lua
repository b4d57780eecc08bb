-- check.lua: checks (Check, CheckMany, CheckAll, and a refused CheckAll's reservations). Each
-- group of ARGV[4] steps in a row is all or nothing: its steps are decided in order, and the new
-- states of its keys are written only if every step of it was allowed; groups are independent. A
-- policy's check is one group of its limits' steps, CheckMany one such group per key, CheckAll
-- one group. Reply: five integers per step, allowed (1 or 0), limit, remaining, resetAt (epoch
-- ms) and retryAfterMs.
--
-- The general script (steps.lua) is the unnamed fragment; the fragment one is the script of a
-- check of one step, with the general script's arguments read at their fixed places: ARGV[6] the
-- strategy's letter, ARGV[7..12] its parameters, ARGV[14] the cost.
--@
local per_group = tonumber(ARGV[4])
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
--@ one
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
