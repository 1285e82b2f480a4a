-- Fair release: delete the lock key only if it still holds our owner token, and
-- wake the waiter at the head of the queue only (see fairacquire.lua).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiters' leases; ARGV[1] owner token,
-- ARGV[2] the id of the waiter the lock was granted to, or '': it leaves the
-- queue first, in any case (this node may have refused it, and still have it
-- queued, perhaps at the head), as fairleave.lua has it leave.
-- Returns 1 if deleted, 0 otherwise.
-- When the key is free afterwards, waiters whose lease ran out are dropped and
-- the head is told on its own channel (lock key .. ':w:' .. waiter id, where
-- an id "group/rest" is told on its group's); with nobody queued, on the lock
-- key's channel, as release.lua does.
-- The node's clock is read only when a waiter leaves or lapsed waiters are
-- dropped, and the queue only when it exists: an uncontended release runs
-- GET, EXISTS, DEL and PUBLISH (issue 26: server commands).
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZADD', KEYS[3], clock() + 5000, '-' .. ARGV[2])
  if redis.call('PTTL', KEYS[3]) < 5000 then redis.call('PEXPIRE', KEYS[3], 5000) end
end
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  return 0
end
-- The queue is looked at before the lock key is deleted: a user whose ACL
-- lacks the queue's commands fails here, having changed nothing (the client
-- then releases with release.lua).
local head = {}
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', clock(), 'LIMIT', 0, 100)
  for _, w in ipairs(dead) do
    redis.call('ZREM', KEYS[2], w)
    redis.call('ZREM', KEYS[3], w)
  end
  head = redis.call('ZRANGE', KEYS[2], 0, 0)
end
local deleted = 0
if held then
  redis.call('DEL', KEYS[1])
  deleted = 1
end
if head[1] then
  redis.pcall('PUBLISH', KEYS[1] .. ':w:' .. string.match(head[1], '^[^/]*'), 'released')
else
  redis.pcall('PUBLISH', KEYS[1], 'released')
end
return deleted
