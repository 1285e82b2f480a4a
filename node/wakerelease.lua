-- Queued release (default mode, see wakequeue.lua): delete the lock key only
-- if it still holds our owner token, and when the key is free afterwards wake
-- the first waiter only (release.lua wakes every client's waiters).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] the waiter woken; ARGV[1] owner
-- token, ARGV[2] the id of the waiter the lock was granted to, or '' (a node
-- that refused it may still have it queued: it leaves), ARGV[3] how long in
-- ms the lock is reserved for the waiter woken.
-- Returns 1 if deleted, 0 otherwise. The DEL comes first: whatever fails
-- after it, the lock was released.
local held = redis.call('GET', KEYS[1])
local deleted = 0
if held == ARGV[1] then
  redis.call('DEL', KEYS[1])
  deleted = 1
end
local q = redis.call('GET', KEYS[2])
if not q then
  if deleted == 1 or not held then redis.pcall('PUBLISH', KEYS[1], 'released') end
  return deleted
end
local es = parse(q)
drop(es, ARGV[2])
if deleted == 1 or not held then wake(KEYS[1], es, KEYS[3], ARGV[3]) end
store(KEYS[2], es, nil)
return deleted
