-- strategy.lua: what every strategy file defines (gcra.lua, tokenbucket.lua, fixedwindow.lua,
-- slidingwindow.lua, slidinglog.lua), and S, the strategies a script holds by their letters.
--
-- Keys. A limit keeps a key's state in one Redis string, under
--
--   <prefix>:{<policy>:<key>}       a policy with one limit
--   <prefix>:{<policy>:<key>}:<i>   limit i (from 0) of a composite policy
--
-- followed by :n<length of the policy's name in bytes> where that name holds ':' (so that policy
-- "a:b" with key "c" and policy "a" with key "b:c" do not meet). The prefix is "sluice" unless
-- configured. The braces are a Redis Cluster hash tag: every limit of one policy and key lives in
-- one slot, so one script reaches them all. Scripts see these names only as KEYS.
--
-- Values. A state is little-endian IEEE 754 doubles, packed with Lua's struct library (an exact
-- copy of the double), laid out as each strategy file says. A value shorter than a strategy reads
-- (another strategy's state: the policy changed strategy under its name) reads as a fresh key.
-- Every write sets a TTL (header.lua).
--
-- Each strategy X, a table named by its letter (g t f s l), has
--
--   X.prep(a)             its parameters, read from ARGV[a] on (only those it uses: a tonumber
--                         costs Redis about as much as a step's arithmetic)
--   X.load(text, q)       the state a value holds; X.dump(st, px) the value of st, for a key that
--                         will live px ms
--   X.idle(q, st)         ms until st decides like a fresh key's
--
-- in its file's first fragment, and in a fragment named after each operation, that operation's:
--
--   X.check(q, st, cost)     allowed (1 or 0), limit, remaining, resetAt, retryAfterMs, new state
--   X.peek(q, st)            the five numbers of a check of cost 1, writing nothing
--   X.forecast(q, st, cost)  spendableNow, nextReplenishAt, fullAt
--   X.refund(q, st, cost)    the new state, or nil when nothing changes
--   X.debit(q, st, cost)     the new state
--
-- A nil state is a fresh key. No function changes a state it was given. The arithmetic is package
-- algo's, operation for operation, and floors and ceilings are math.floor and math.ceil as algo's
-- are math.Floor and math.Ceil, so that both round alike; Redis turns each Lua number of a reply
-- into an integer by truncation, which is how algo converts too.
--@
local S = {}
local function nonneg(x)
  if x < 0 then return 0 end
  return x
end
