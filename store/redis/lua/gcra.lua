-- gcra.lua: GCRA, letter g. Parameters (ARGV[a] on): limit, periodMs, burst.
--
-- State: the theoretical arrival time TAT, epoch ms, as a double: '<d', 8 bytes; or 12 bytes
-- '<dI4', the TAT and the low 32 bits of its key's expiry E on the server's clock (the batch
-- below writes those; Redis expires the key at E or a ms later). Every read takes the first 8
-- bytes as the TAT; a value under 8 bytes is another strategy's, a fresh key.
-- Key: <prefix>:{<policy>:<key>}, or with :<i> after it for limit i of a composite (strategy.lua).
--@
local g = {}
S.g = g
function g.prep(a)
  local limit, period, burst = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local T = period / limit
  return {T = T, tau = T * burst, limit = burst}
end
function g.load(text)
  if #text < 8 then return nil end -- another strategy's state (an empty list): a fresh key
  return (unpack_struct('<d', text))
end
function g.dump(st) return pack('<d', st) end
function g.idle(q, st) return st - now end
--@ check
function g.check(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  local new_tat = tat + q.T * cost
  local allow_at = new_tat - q.tau
  if now < allow_at then
    return 0, q.limit, nonneg(floor((q.tau - (tat - now)) / q.T)), ceil(tat), ceil(allow_at - now), st
  end
  return 1, q.limit, nonneg(floor((q.tau - (new_tat - now)) / q.T)), ceil(new_tat), 0, new_tat
end
--@ peek
function g.peek(q, st)
  local tat = st or 0
  if tat < now then tat = now end
  local allow_at = tat + q.T - q.tau
  return peeked(now >= allow_at, q.limit, floor((q.tau - (tat - now)) / q.T), ceil(tat), ceil(allow_at - now))
end
--@ forecast
function g.forecast(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  local avail = (q.tau - (tat - now)) / q.T
  local next_at = now
  if tat > now then
    next_at = math.min(ceil(now + (floor(avail) + 1 - avail) * q.T), ceil(tat))
  end
  return spendable(avail, cost), next_at, ceil(tat)
end
--@ refund
function g.refund(q, st, cost)
  if not st then return nil end
  local tat = st
  if tat < now then tat = now end
  tat = tat - q.T * cost
  if tat < now then tat = now end
  return tat
end
--@ debit
function g.debit(q, st, cost)
  local tat = st or 0
  if tat < now then tat = now end
  return tat + q.T * cost
end
--@ batch
-- The batch (batch.lua) of GCRA checks: ARGV[4..7] limit, periodMs, burst, cost. n is the TAT
-- (0: a fresh key); before is each step's TAT before it.
--
-- On the server's clock, batch-write spares most writes their TTL, which costs Redis more than the
-- rest of the SET: it writes 12 bytes, the TAT and the low 32 bits of the key's expiry E, with a
-- TTL of the key's idle time plus twice the slack. A later write whose key must live until need
-- (idle time plus the slack) keeps that TTL while need <= E <= need + slack, so a key outlives its
-- state by at least the slack and by at most twice the slack. An 8-byte state (written at an
-- explicit instant, by another operation or by an older sluice) has no known expiry and is written
-- with a TTL anew.
local limit, period, burst, cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local T = period / limit
local tau = T * burst
local inc = T * cost
--@ batch-read
-- Sets n to the TAT text holds (0: none) and low to its expiry's low 32 bits where it holds them.
n = 0
if text then
  local len = #text
  if len == 12 then
    n, low = unpack_struct('<dI4', text)
  elseif len >= 8 then
    n = unpack_struct('<d', text)
  end
end
--@ batch-step
-- g.check's admission.
do
  local tat = n
  if tat < now then tat = now end
  tat = tat + inc
  if not (now < tat - tau) then next_n = tat end
end
--@ batch-write
-- Writes key's new TAT n; its state held low (or false).
do
  local idle = ceil(n - now)
  if not server_clock then
    local _, text = ttl(idle + slack)
    call('SET', key, pack('<d', n), 'PX', text)
  else
    local need, kept = now + idle + slack, false
    if low then
      local at
      --> near.expand
      if at >= need and at <= need + slack then
        call('SET', key, pack('<dI4', n, low), 'KEEPTTL')
        kept = true
      end
    end
    if not kept then
      local px, text = ttl(idle + 2 * slack)
      if px <= span then
        call('SET', key, pack('<dI4', n, (now + px) % wrap), 'PX', text)
      else
        call('SET', key, pack('<d', n), 'PX', text)
      end
    end
  end
end
