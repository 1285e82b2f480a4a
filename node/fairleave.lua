-- Leave the waiters' queue (the waiter got the lock, or gave up).
-- KEYS[1] queue, KEYS[2] waiters' leases (see fairacquire.lua); ARGV[1] waiter id.
-- Returns 1 if the waiter was queued, else 0.
-- The waiter's attempts that reach the node after this are refused and do not
-- queue it again: '-' .. id stays in the leases' set for 5 s.
redis.call('ZREM', KEYS[2], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + 5000, '-' .. ARGV[1])
if redis.call('PTTL', KEYS[2]) < 5000 then redis.call('PEXPIRE', KEYS[2], 5000) end
return redis.call('ZREM', KEYS[1], ARGV[1])
