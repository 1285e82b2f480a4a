-- Leave the default mode's waiters' queue (see wakequeue.lua): the waiter's
-- Lock call is over. A waiter that a release woke and that leaves without the
-- lock passes its wake-up on.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] the waiter woken; ARGV[1] waiter
-- id, ARGV[2] how long in ms the lock is reserved for a waiter woken.
-- Returns 1 if the waiter was queued, else 0.
local es = parse(redis.call('GET', KEYS[2]))
local queued = drop(es, ARGV[1])
local changed = queued
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  if not redis.call('GET', KEYS[1]) then
    wake(KEYS[1], es, KEYS[3], ARGV[2])
    changed = true
  end
end
if changed then store(KEYS[2], es, nil) end
if queued then return 1 end
return 0
