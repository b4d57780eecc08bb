-- batch.lua: the script of a batch of checks of one GCRA, token bucket or fixed window (not a
-- calendar one) limit and cost, each step its own group: concurrent Checks of one policy, batched,
-- and CheckMany, the calls a busy service sends most. Its strategy's file inlines the step (the
-- fragments batch, batch-read, batch-step and batch-write of gcra.lua, tokenbucket.lua,
-- fixedwindow.lua, pasted where "--> *.batch-..." stands): defining the strategy's functions and
-- steps.lua's helpers, and every call from Lua to Lua or C, costs Redis about as much as a step's
-- arithmetic. After header.lua's arguments:
--
--   ARGV[4..6]  the limit's first three parameters, as the general script sends them
--   ARGV[7]     the cost
--
-- KEYS are the steps' keys (strategy.lua). The fragment repeats lets a key checked twice see its
-- first check and writes each key once, at the end; distinct, for keys all different, reads,
-- decides and writes each in one pass.
--
-- The reply (the fragment reply) is what the caller needs to compute each decision with package
-- algo: five integers per step would cost Redis more than the step. It is one string: now, then
-- each step's n before it (the strategy's file says what n is), as little-endian doubles, then a
-- byte per step, '1' where it was admitted. The caller computes each decision from these exactly as
-- the strategy's check would (the same operations), and checks it against the byte.
--@
local keys, call = KEYS, redis.call
local before, admitted = {}, {}
--@ repeats
local written, order, expiry = {}, {}, {}
local w = 0
for i = 1, #keys do
  local key = keys[i]
  local n, low = written[key], false
  if not n then
    local text = texts[i]
    --> *.batch-read
  end
  before[i] = n
  local next_n
  --> *.batch-step
  if next_n then
    admitted[i] = '1'
    if not written[key] then
      w = w + 1
      order[w], expiry[w] = key, low
    end
    written[key] = next_n
  else
    admitted[i] = '0'
  end
end
for j = 1, w do
  local key, low = order[j], expiry[j]
  local n = written[key]
  --> *.batch-write
end
--@ distinct
for i = 1, #keys do
  local key, text = keys[i], texts[i]
  local n, low = nil, false
  --> *.batch-read
  before[i] = n
  local next_n
  --> *.batch-step
  if next_n then
    admitted[i] = '1'
    local n = next_n
    --> *.batch-write
  else
    admitted[i] = '0'
  end
end
--@ reply
local count = #before
if count <= 1000 then
  return pack('<' .. string.rep('d', count + 1), now, unpack(before)) .. table.concat(admitted)
end
-- unpack puts its values on Lua's stack, which holds a few thousand.
local parts = {pack('<d', now)}
for first = 1, count, 1000 do
  local last = math.min(first + 999, count)
  parts[#parts + 1] = pack('<' .. string.rep('d', last - first + 1), unpack(before, first, last))
end
parts[#parts + 1] = table.concat(admitted)
return table.concat(parts)
