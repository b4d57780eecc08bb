-- header.lua: the start of every script that decides steps of limits (check.lua, peek.lua,
-- forecast.lua, refund.lua, debit.lua, batch.lua), after clock.lua. Their first arguments:
--
--   ARGV[1]  now, epoch ms; 0 decides at the server's clock (TIME)
--   ARGV[2]  TTL slack, ms added to every expiry
--   ARGV[3]  the instant to give up, epoch ms on the server's clock; 0 for none (clock.lua)
--
-- Numbers are sent as Go's strconv.FormatFloat(x, 'g', -1, 64) prints them, which tonumber reads
-- back as the same double. Every write sets a TTL: the time until the state decides like a fresh
-- key's, plus the slack (or, gcra.lua's batch, keeps one known to cover that).
--@
local now = tonumber(ARGV[1])
local server_clock = now == 0 -- now is the server's clock, not an instant the caller passed
now = resolve(now, tonumber(ARGV[3]))
if not now then return late() end
local slack = tonumber(ARGV[2])
-- Instants near the server's clock are stored as their low 32 bits (near.lua, gcra.lua's batch).
local span, wrap = 1073741824, 4294967296
local floor, ceil = math.floor, math.ceil
local pack, unpack_struct = struct.pack, struct.unpack
-- ttl returns a TTL of at least ms, in ms and printed: rounded up to 16 ms, so that the keys of a
-- run share a few printed TTLs.
local printed_px = {}
local function ttl(ms)
  local px = ceil(ms / 16) * 16
  if px < 16 then px = 16 end
  local text = printed_px[px]
  if not text then
    text = string.format('%d', px)
    printed_px[px] = text
  end
  return px, text
end
