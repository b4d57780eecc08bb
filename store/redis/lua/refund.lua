-- refund.lua: Refund (and the refunds that undo a refused CheckAll's reservations): gives each
-- step's cost back to its key, up to what the key spent. Reply: an empty array.
--@
for i = 1, n do
  local key, x, q, cost = step(i)
  local st = x.refund(q, state_of(i, key, x, q), cost)
  if st ~= nil then save(key, x, q, st) end
end
flush()
return reply
