-- Fair acquire: take the lock only for the head of the waiters' queue.
-- KEYS[1] lock key, KEYS[2] fence counter key (or the lock key again: the
-- counter is not read, and the reply says none, as acquire.lua's with
-- ARGV[3] "0"; issue 26, server commands), KEYS[3] queue (sorted set:
-- waiter -> ticket), KEYS[4] waiters' leases (sorted set: waiter -> deadline in
-- ms of the node's clock), KEYS[5] the queue's mark (a string that outlives
-- the queue: its expiry is set with the queue's, to the same time, so that
-- fairrelease.lua reads it with the lock key in one MGET and looks at the
-- queue only when it may exist); all in the lock key's hash slot.
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] waiter id, ARGV[4] ticket
-- (µs, chosen by the waiter, the same on every node, so that every node orders
-- the waiters alike: node.Waiter), ARGV[5] lease in ms.
-- A ticket of 0 means the waiter has none yet: it is not queued, learns the
-- node's clock, and is granted the lock only when nobody is queued. A waiter
-- not queued yet is queued only with a ticket within ticketBound of the
-- node's clock; a queued one keeps its place, or moves to a ticket within the
-- bound (a new one the client took from the nodes' clocks).
-- Waiters whose lease ran out (they crashed, or gave up without leaving) are
-- dropped when they may stand before the caller; a caller that left already is refused and not queued again
-- (the leases' set keeps '-' .. id for 5 s after a waiter leaves, against
-- attempts that arrive after the leave); the caller is (re)queued with its
-- ticket and its lease renewed, except a head in its place, queued and renewed
-- less than a tenth of its lease ago, whose SET NX succeeds (it writes nothing
-- else); the SET NX is tried only if the caller is at the head, which stays
-- there until it releases the lock or leaves. A caller refused for not being at
-- the head while the lock is free wakes the head.
-- Returns {1 or 0, fence counter ("0" when absent), 1 if the counter exists}
-- as acquire.lua does, then the number of waiters queued before the caller (0
-- when it was granted, or is at the head and the lock is held), the node's
-- clock in µs, and 1 if the caller is queued here (or granted), 0 if its
-- ticket was out of bounds, -1 if it is not queued for another reason (no
-- ticket, or it left).
local ticketBound = 1000000 -- µs: node.TicketBound
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
-- dropDead drops the waiters whose lease ran out (at most 100 per call). It
-- runs only where the head matters and may be one of them: a caller at the
-- head needs no scan.
local function dropDead()
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
  for _, w in ipairs(dead) do
    redis.call('ZREM', KEYS[3], w)
    redis.call('ZREM', KEYS[4], w)
  end
  return #dead
end
-- renew renews the caller's lease and, when they run low, the expiries of
-- the queue, its mark and the leases, with call: redis.call, which stops the
-- script at an error (nothing written yet to the lock key), or, once the
-- lock key was written, redis.pcall, which stops the renewal at an error and
-- leaves the grant standing: a script that fails after its SET NX would
-- leave the key behind with an error for a reply (an adversarial review of
-- 8a00707: a user without PTTL, a string at the leases' key).
local lease = tonumber(ARGV[5])
local function renew(call)
  if type(call('ZADD', KEYS[4], now + lease, ARGV[3])) ~= 'number' then return end
  -- The queue and its mark must outlive the caller's lease: set to twice the
  -- lease when less than one lease is left (or none is set: -1), so that most
  -- attempts only read the expiries (they used to set all three on every
  -- attempt: three commands more; issue 26, server commands). Only ever
  -- lengthened: another waiter's lease may be longer than ours. The mark is
  -- set with the queue, to the same time (fairrelease.lua reads the queue
  -- only while its mark exists).
  local qttl = call('PTTL', KEYS[3])
  if type(qttl) ~= 'number' then return end
  if qttl < lease then
    qttl = 2 * lease
    call('PEXPIRE', KEYS[3], qttl)
    call('SET', KEYS[5], '1', 'PX', qttl)
  end
  -- And the leases must outlive the queue: a waiter is dropped only through
  -- its lease there (dropDead), so a queued waiter whose lease went with an
  -- earlier expiry of the leases' key would stay in the queue, at its head
  -- perhaps, for as long as anyone renews the queue (an adversarial review
  -- of the change above, 6 December 2026). The releases and leaves only
  -- lengthen the leases' key. By 100 ms more than the queue: set to the
  -- same length, in a later millisecond or read in one, the leases' key
  -- could read a millisecond shorter than the queue at the next attempt,
  -- which set it again for nothing (a flaky count in
  -- TestQueueExpiriesLengthenedOnlyWhenLow).
  local xttl = call('PTTL', KEYS[4])
  if type(xttl) == 'number' and xttl < qttl then call('PEXPIRE', KEYS[4], qttl + 100) end
end
local f, present = '0', 0
if KEYS[2] ~= KEYS[1] then
  local v = redis.call('GET', KEYS[2])
  if v then f = v; present = 1 end
end
local ticket = tonumber(ARGV[4])
local inBound = ticket > 0 and math.abs(ticket - nowus) <= ticketBound
local held = redis.call('ZSCORE', KEYS[3], ARGV[3])
-- ahead is the caller's place once known; tried is true once the head's SET NX
-- was refused (the lock is held: it is not tried again below).
local ahead, tried
if held then
  if ticket ~= tonumber(held) and inBound then
    redis.call('ZADD', KEYS[3], 'XX', ARGV[4], ARGV[3])
  else
    -- In its place: a head (a waiter woken by a release, most often) whose
    -- lease was renewed less than a tenth of it ago takes the lock with
    -- nothing else written. Its lease and the expiries stay as its last
    -- attempt left them: it leaves the queue at its release (issue 26, server
    -- commands: 2 commands fewer per acquisition). Only then: a head that a
    -- node grants while the others refuse (the lock held there) gives the
    -- grant back and tries again, keeping its place, and its lease here must
    -- outlast the silence before its next attempt as it did when every
    -- attempt renewed it (nine tenths of it now), or a later waiter's attempt
    -- drops it and takes its place on this node alone. Two adversarial
    -- reviews: of 846881f, which skipped the renewals whatever lease was
    -- left (a head polling through such grants lost its place), and of
    -- ec67548, which skipped them with more than half left (one gap of over
    -- half a lease lost it): node.TestHeadGrantedAloneKeepsItsPlace.
    -- The lease is read only once the SET NX succeeded: a head polling
    -- while the lock is held runs what it ran before (a third review). After
    -- the SET NX nothing may stop the script (renew, redis.pcall). And only
    -- for a head queued less than a tenth of its lease ago (its ticket, on
    -- the nodes' clocks within the ticket bound): one that waited longer
    -- most often has a lease to renew, and the full path below renews it
    -- without reading it first (with 1,000 waiters on one key a head waits
    -- over a tenth of its lease, and reading it cost a command more than
    -- before). The ticket only picks the path; the lease read decides.
    ahead = redis.call('ZRANK', KEYS[3], ARGV[3])
    if ahead == 0 and nowus - tonumber(held) < lease * 100 then
      if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
        local deadline = redis.pcall('ZSCORE', KEYS[4], ARGV[3])
        if type(deadline) ~= 'string' or tonumber(deadline) - now <= lease * 0.9 then
          renew(redis.pcall)
        end
        return {1, f, present, 0, nowus, 1}
      end
      tried = true
    end
  end
elseif redis.call('ZSCORE', KEYS[4], '-' .. ARGV[3]) then
  -- The waiter left the queue (fairleave.lua, fairrelease.lua): this is a
  -- late attempt of a Lock call that is over. Queuing it again would leave a
  -- head nobody serves until its lease ran out. (A queued waiter has no
  -- such mark: a leave removes it before marking it.)
  return {0, f, present, 0, nowus, -1}
elseif ticket == 0 then
  -- No ticket yet: the lock only if nobody waits for it, and no place.
  dropDead()
  if not redis.call('ZRANGE', KEYS[3], 0, 0)[1] and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, f, present, 0, nowus, -1}
  end
  return {0, f, present, 0, nowus, -1}
elseif not inBound then
  -- Not queued: a ticket this far from the node's clock would buy a place.
  return {0, f, present, 0, nowus, 0}
else
  redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[3])
end
renew(redis.call)
if not ahead then ahead = redis.call('ZRANK', KEYS[3], ARGV[3]) end
if ahead > 0 and dropDead() > 0 then
  ahead = redis.call('ZRANK', KEYS[3], ARGV[3])
end
if ahead > 0 then
  -- Not the caller's turn. If the lock is free here, the head may have missed
  -- its wake-up (it was queued here after the release that should have woken
  -- it): wake it again, as fairrelease.lua does.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)
    redis.pcall('PUBLISH', KEYS[1] .. ':w:' .. string.match(head[1], '^[^/]*'), 'released')
  end
  return {0, f, present, ahead, nowus, 1}
end
if not tried and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The holder stays at the head until its release takes it out of the queue
  -- (fairrelease.lua) and wakes the next waiter: should the grant fail
  -- elsewhere, its undo leaves it in its place, so that every node keeps the
  -- same order.
  return {1, f, present, 0, nowus, 1}
end
return {0, f, present, 0, nowus, 1}
