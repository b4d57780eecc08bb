-- steps.lua: the steps of a general script (check.lua, peek.lua, forecast.lua, refund.lua,
-- debit.lua), which may mix limits, strategies and keys: each limit's parameters, each step's limit
-- and cost, the keys' states as mget.lua read them, and the writes. After header.lua's arguments:
--
--   ARGV[4]  steps per all-or-nothing group (check.lua; the other operations ignore it)
--   ARGV[5]  the number of limits the steps use, then seven per limit: its strategy's letter
--            (g t f s l) and six parameters (the strategy's file; unused ones 0)
--   then two per step: the limit (from 1) and the cost; a single pair when every step has the same
--
-- KEYS[i] is step i's key (strategy.lua). Steps are decided in order, each against the state the
-- earlier steps of the script left (a key checked twice sees its first check); each key changed is
-- written once, at the end, with one SET ... PX.
--@
local n = #KEYS
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
-- states holds the states the script has decided so far (false: a fresh key).
local states, reply = {}, {}
local function state_of(i, key, x, q)
  local st = states[key]
  if st ~= nil then return st or nil end
  local text = texts[i]
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
