-- Fair release: delete the lock key only if it still holds our owner token, and
-- wake the waiter at the head of the queue only (see fairacquire.lua).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiters' leases, KEYS[4] the
-- queue's mark (fairacquire.lua); ARGV[1] owner token, ARGV[2] the id of the
-- waiter the lock was granted to, or '': it leaves the queue first, in any
-- case (this node may have refused it, and still have it queued, perhaps at
-- the head), as fairleave.lua has it leave; ARGV[3] '1' if the key's own
-- channel has listeners to tell when nobody is queued (the readers and writers
-- of a read-write lock, a semaphore's waiters, the observers of an election or
-- of a lock with a holder's record), '0' if not (a plain lock: its waiters
-- queue).
-- Returns 1 if deleted, 0 otherwise, plus 2 when waiters were queued (the
-- head was woken): the releaser then knows the resource is contended, and
-- its next Lock call queues behind them instead of taking the lock in the
-- gap before the head's attempt (issue 23: one client barging among 1,000).
-- When the key is free afterwards, waiters whose lease ran out are dropped and
-- the head is told on its own channel (lock key .. ':w:' .. waiter id, where
-- an id "group/rest" is told on its group's); with nobody queued, on the lock
-- key's channel, as release.lua does, when ARGV[3] says it has listeners.
-- The node's clock is read only when a waiter leaves or lapsed waiters are
-- dropped, and the queue only when its mark says it may exist (the mark
-- outlives the queue: fairacquire.lua sets both expiries together), read in
-- one MGET with the lock key: an uncontended release of a plain lock runs
-- MGET and DEL (issue 26: server commands).
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
  -- The leave mark ('-' .. id) must last 5 s: the leases' key is set to 10 s
  -- when less is left, so that the releases and leaves of the next 5 s only
  -- read its expiry.
  if redis.call('PTTL', KEYS[3]) < 5000 then redis.call('PEXPIRE', KEYS[3], 10000) end
end
local held, queued
local got = redis.pcall('MGET', KEYS[1], KEYS[4])
if got.err then
  -- A user whose ACL lacks MGET (a rule written before 2026-12-04): the two
  -- reads it replaced, which cost a command more.
  held = redis.call('GET', KEYS[1])
  queued = redis.call('EXISTS', KEYS[2], KEYS[3]) > 0
else
  held, queued = got[1], got[2]
end
if held and held ~= ARGV[1] then
  return 0
end
-- The queue is looked at before the lock key is deleted: a user whose ACL
-- lacks the queue's commands fails here, having changed nothing (the client
-- then releases with release.lua).
local head = {}
if queued then
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
  return deleted + 2
elseif ARGV[3] == '1' then
  redis.pcall('PUBLISH', KEYS[1], 'released')
end
return deleted
