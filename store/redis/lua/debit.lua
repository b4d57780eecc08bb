-- debit.lua: Debit: charges each step's cost to its key, past the limit if need be. Reply: an
-- empty array.
--@
for i = 1, n do
  local key, x, q, cost = step(i)
  save(key, x, q, x.debit(q, state_of(i, key, x, q), cost))
end
flush()
return reply
