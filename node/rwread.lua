-- Read acquire: add a reader to the readers of a read-write lock, only if no
-- writer holds the lock and no writer waits for it.
-- KEYS[1] lock key (the writer's: a writer is a plain lock), KEYS[2] readers
-- (sorted set: reader token -> end of its lease in ms of the node's clock),
-- KEYS[3] the writer-waiting mark (rwwrite.lua); all in the lock key's slot.
-- ARGV[1] reader token, ARGV[2] TTL in ms.
-- Returns {1 or 0, "0", 0, 0, the node's clock in µs, -1}: the shape of
-- acquire.lua's refusal (readers have no fence counter; not queued).
-- Readers share the set, each with its own lease: readers whose lease ran
-- out are dropped first, and the set's own expiry is only ever extended, so
-- that a reader with a shorter TTL never shortens the life of the set under
-- the readers already in it.
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, '0', 0, 0, nowus, -1}
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1, '0', 0, 0, nowus, -1}
