-- clock.lua: the server's clock, and the instant a script decides at. Every script starts with
-- it; it reads no key and no argument (header.lua, and concurrency.lua's lease, pass it theirs).
--
-- A script that consumes (a check, a debit, a lease's admission) carries an instant to give up,
-- epoch ms on the server's clock (0: none). A script that reaches Redis at or past it answers the
-- error reply "LATE sluice: past the instant to give up" and touches nothing: its caller has been,
-- or is about to be, told the call failed, so it must count nothing.
--@
-- server_ms is the server's clock in whole ms once the script has read it: TIME is read at most
-- once per script (near.lua's expand reads it too).
local server_ms = false
local function server_time()
  if not server_ms then
    local clock = redis.call('TIME')
    server_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  return server_ms
end
-- resolve returns the instant to decide at: now, or the server's clock where now is 0; nil where
-- give_up (> 0) has come on the server's clock, and the script must return late().
local function resolve(now, give_up)
  if give_up > 0 and server_time() >= give_up then return nil end
  if now == 0 then return server_time() end
  return now
end
local function late() return redis.error_reply('LATE sluice: past the instant to give up') end
