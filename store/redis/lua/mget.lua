-- mget.lua: reads the state of every key of the script, KEYS[1] to KEYS[#KEYS], at once: a call
-- from Lua costs Redis more than the work of most steps. Used by steps.lua and batch.lua.
--@
-- texts[i] is KEYS[i]'s value, or false where it has none; MGET takes 4000 keys at a time, as
-- unpack puts them on Lua's stack, which holds a few thousand.
local texts = redis.call('MGET', unpack(KEYS, 1, math.min(#KEYS, 4000)))
for first = 4001, #KEYS, 4000 do
  local more = redis.call('MGET', unpack(KEYS, first, math.min(first + 3999, #KEYS)))
  for j = 1, #more do texts[first + j - 1] = more[j] end
end
