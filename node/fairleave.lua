-- Leave the waiters' queue (the waiter got the lock, or gave up).
-- KEYS[1] queue, KEYS[2] waiters' leases (see fairacquire.lua); ARGV[1] waiter id.
-- Returns 1 if the waiter was queued, else 0.
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
