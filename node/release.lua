-- Release: delete the lock key only if it still holds our owner token.
-- KEYS[1] lock key; ARGV[1] owner token; ARGV[2] "1" to notify waiters.
-- Returns 1 if deleted, 0 otherwise.
-- With notification, when the key is free afterwards (deleted here, or already
-- gone), a message on the channel named like the key wakes the clients waiting
-- for it. Cleanups of failed attempts do not notify: the lock is held elsewhere.
-- The DEL comes before the PUBLISH, which runs under pcall: a delete that
-- happened is reported as such even if the notification fails (a user without
-- PUBLISH permission); waiters then find the key free when they poll.
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then redis.pcall('PUBLISH', KEYS[1], 'released') end
  return 1
end
if not held and ARGV[2] == '1' then
  redis.pcall('PUBLISH', KEYS[1], 'released')
end
return 0
