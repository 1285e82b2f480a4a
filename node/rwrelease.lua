-- Read release: remove a reader from the readers.
-- KEYS[1] lock key (its channel only: nothing is written to it), KEYS[2]
-- readers (rwread.lua); ARGV[1] reader token, ARGV[2] "1" to notify waiters.
-- Returns 1 if the reader was there, else 0.
-- Readers whose lease ran out are dropped; with notification, when no
-- reader is left, a message on the lock key's channel (as release.lua's)
-- wakes the writers waiting for the readers to leave.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[2] == '1' and redis.call('ZCARD', KEYS[2]) == 0 then
  redis.pcall('PUBLISH', KEYS[1], 'released')
end
return removed
