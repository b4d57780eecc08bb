-- overrides.lua: the overrides backend (overrides.go). Every override of a prefix is one field of
-- one hash, "<policy> <key>", whose value is the override's JSON; every change is published on one
-- channel in the same script, so that subscribers see changes in the order the hash took them.
--
-- KEYS[1] is the hash; ARGV[1] the field, ARGV[2] the channel, ARGV[3] the message (the change's
-- JSON).
--@ put
-- ARGV[4]: the override's JSON. Replies 1 if the field was new.
local n = redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return n
--@ delete
-- Replies 1 if the field was there.
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n == 1 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return n
--@ expire
-- ARGV[4]: the instant, epoch ms. Deletes the override if it expired by then; replies 1 if it did.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local ok, o = pcall(cjson.decode, v)
if not ok or type(o) ~= 'table' then return 0 end
local at = tonumber(o['expiresAt'])
if not at or at <= 0 or at > tonumber(ARGV[4]) then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
