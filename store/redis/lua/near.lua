-- near.lua: states of two numbers, a value and an instant (tokenbucket.lua: tokens, last;
-- fixedwindow.lua: start, count), and instants stored as their low 32 bits.
--
-- Such a state takes 12 bytes instead of 16 when the instant is a whole ms near the server's
-- clock: '<dI4', the value and the instant's low 32 bits, read back against the server's clock. A
-- 12-byte string fits Redis's 32-byte allocation class where 16 bytes take 48. It is written only
-- on the server's clock, and only when the instant stays within 2^30 ms (12 days) of that clock for
-- as long as the key lives (its TTL), so it reads back exactly even if the server's clock steps
-- back by as much again; a read at an instant the caller passed still expands it against the
-- server's clock. Otherwise the state is '<dd', in the order its strategy says.
--
-- The fragments expand, read and pack are pasted inline (batch.lua's loops, gcra.lua's batch):
-- as functions they would cost those loops a call each per step. Each names the locals it reads
-- and sets, which the code around it declares.
--@ expand
-- Sets at to the instant whose low 32 bits are low: the one nearest the server's clock.
do
  local ms = server_ms or server_time()
  local d = low - ms % wrap
  if d >= wrap / 2 then d = d - wrap elseif d < -wrap / 2 then d = d + wrap end
  at = ms + d
end
--@ read
-- Sets v and at from text, the value of a state of value v as of instant at: 12 bytes, or 16 with
-- at first where instant_first. It leaves both nil for another strategy's state.
do
  local len = #text
  if len == 12 then
    local low
    v, low = unpack_struct('<dI4', text)
    --> near.expand
  elseif len >= 16 then
    if instant_first then
      at, v = unpack_struct('<dd', text)
    else
      v, at = unpack_struct('<dd', text)
    end
  end
end
--@ pack
-- Sets state to the value of v as of instant at, for a key that will live px ms: 12 bytes where at
-- is a whole ms that stays near the server's clock that long, else 16 (at first where
-- instant_first).
do
  local d = at - now
  if d < 0 then d = -d end
  if server_clock and at % 1 == 0 and d + px <= span then
    state = pack('<dI4', v, at % wrap)
  elseif instant_first then
    state = pack('<dd', at, v)
  else
    state = pack('<dd', v, at)
  end
end
--@ functions
-- load_near and dump_near read and write a state {a, b} whose element i is the instant.
local function load_near(text, i)
  local instant_first, v, at = i == 1
  --> near.read
  if not at then return nil end
  if instant_first then return {at, v} end
  return {v, at}
end
local function dump_near(st, px, i)
  local instant_first, v, at, state = i == 1, st[3 - i], st[i]
  --> near.pack
  return state
end
