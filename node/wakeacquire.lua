-- Queued acquire (default mode, see wakequeue.lua): take the lock if it is
-- free, wherever the caller is queued, unless a release reserved it for
-- another waiter it woke; queue the caller when refused, dequeue it when
-- granted.
-- KEYS[1] lock key, KEYS[2] fence counter key, KEYS[3] queue, KEYS[4] the
-- waiter woken; all in the lock key's hash slot.
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] waiter id, ARGV[4] ticket
-- (the same on every node, so that every node orders the waiters alike),
-- ARGV[5] how long in ms the queue outlives the last attempt that renewed it.
-- A ticket is a time in µs on the nodes' clocks (node.Waiter); 0 means the
-- waiter has none yet: it is not queued, and learns the node's clock. A
-- waiter not queued yet is queued only with a ticket within ticketBound of
-- the node's clock; a queued one keeps its place, or moves to a ticket within
-- the bound (a new one the client took from the nodes' clocks).
-- Returns as fairacquire.lua does: {1 or 0, fence counter ("0" when
-- absent), 1 if the counter exists, waiters queued before the caller, the
-- node's clock in µs (0 if unknown), and 1 if the caller is queued here (or
-- granted), 0 if its ticket was out of bounds, -1 if it is not queued for
-- another reason (no ticket, the queue full)}.
local now = clock()
local f = redis.call('GET', KEYS[2])
local present = 1
if not f then f = '0'; present = 0 end
local es = parse(redis.call('GET', KEYS[3]))
local me = {ticket = tonumber(ARGV[4]), t = ARGV[4], id = ARGV[3], wakes = 0}
local old = take(es, me.id)
local queued = 1
if old then
  if me.ticket ~= old.ticket and not inBound(me.ticket, now) then me.ticket, me.t = old.ticket, old.t end
elseif me.ticket == 0 then
  queued = -1
elseif not inBound(me.ticket, now) then
  queued = 0
end
local ahead = 0
for _, e in ipairs(es) do
  if before(e, me) then ahead = ahead + 1 end
end
local woken = redis.call('GET', KEYS[4])
if (not woken or woken == me.id) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if old then store(KEYS[3], es, nil) end
  if woken then redis.call('DEL', KEYS[4]) end
  return {1, f, present, 0, now, 1}
end
if queued == 1 then
  if #es < maxQueued then es[#es + 1] = me else queued = -1 end
end
store(KEYS[3], es, ARGV[5])
return {0, f, present, ahead, now, queued}
