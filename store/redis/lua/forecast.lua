-- forecast.lua: Forecast, writing nothing. Reply: three integers per step, spendableNow (how many
-- checks of the step's cost would pass now), nextReplenishAt and fullAt (epoch ms). The fragment
-- helpers comes before the strategies' fragments, which use it; the unnamed one after steps.lua.
--@ helpers
local function spendable(avail, cost)
  return nonneg(floor(avail / cost))
end
--@
for i = 1, n do
  local key, x, q, cost = step(i)
  reply[r + 1], reply[r + 2], reply[r + 3] = x.forecast(q, state_of(i, key, x, q), cost)
  r = r + 3
end
flush()
return reply
