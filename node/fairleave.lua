-- Leave the waiters' queue (the waiter got the lock, or gave up).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiters' leases (see
-- fairacquire.lua); ARGV[1] waiter id.
-- Returns 1 if the waiter was queued, else 0.
-- The waiter's attempts that reach the node after this are refused and do not
-- queue it again: '-' .. id stays in the leases' set for 5 s. A waiter that
-- leaves from the head while the lock is free passes its turn on: the new head
-- is woken (a release may have woken the one leaving, which will not try).
local head = redis.call('ZRANGE', KEYS[2], 0, 0)
redis.call('ZREM', KEYS[3], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[3], now + 5000, '-' .. ARGV[1])
-- The leave mark ('-' .. id) must last 5 s: the leases' key is set to 10 s
-- when less is left, so that the releases and leaves of the next 5 s only
-- read its expiry.
if redis.call('PTTL', KEYS[3]) < 5000 then redis.call('PEXPIRE', KEYS[3], 10000) end
local left = redis.call('ZREM', KEYS[2], ARGV[1])
if left == 1 and head[1] == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)
  if next[1] then
    redis.pcall('PUBLISH', KEYS[1] .. ':w:' .. string.match(next[1], '^[^/]*'), 'released')
  end
end
return left
