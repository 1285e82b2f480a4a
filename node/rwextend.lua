-- Read extend: renew a reader's lease, only if it is still among the
-- readers (a reader whose lease ran out is dropped first, and never
-- re-added: an extension cannot re-take a lapsed read lock).
-- KEYS[1] readers (rwread.lua); ARGV[1] reader token, ARGV[2] TTL in ms.
-- The set's own expiry is only ever extended. Returns 1 if extended, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
