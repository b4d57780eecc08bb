-- peek.lua: Peek, what a check of cost 1 would answer, writing nothing. Reply: five integers per
-- step, as check.lua's. The fragment helpers comes before the strategies' fragments, which
-- use it; the unnamed one after steps.lua.
--@ helpers
-- peeked is what a peek reports: whether a check of cost 1 would pass, and what is left now.
local function peeked(ok, limit, remaining, reset_at, retry)
  if ok then return 1, limit, nonneg(remaining), reset_at, 0 end
  return 0, limit, nonneg(remaining), reset_at, retry
end
--@
for i = 1, n do
  local key, x, q = step(i)
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = x.peek(q, state_of(i, key, x, q))
  r = r + 5
end
flush()
return reply
