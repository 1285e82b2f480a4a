-- Acquire: take the lock if it is free and, when asked, report the node's fence
-- counter.
-- KEYS[1] lock key, KEYS[2] fence counter key (same hash slot)
-- ARGV[1] owner token, ARGV[2] TTL in milliseconds, ARGV[3] "1" to read the
-- counter, "0" not to
-- Returns {1, counter as a decimal string ("0" when absent or not read), 1 if
-- the counter exists else 0 (0 when not read)} when granted; when refused,
-- {0, counter, present, 0, the node's clock in µs, -1}, as the queued
-- acquisitions answer. The counter is read in the same atomic step as the
-- SET, whether or not the SET succeeded, so that the client can compute a
-- fencing token above every counter it saw, and tell a fresh resource from a
-- wiped node. A lock that is not fenced at once does not need it (Lock.Fence
-- reads the counters later, inside the lock: readfence.lua), and an
-- uncontended acquisition is then one SET (issue 26: server commands).
-- The read comes first: a script stopped by an error (a user without GET
-- permission) has then written nothing, and no lock key is left behind.
local f, present = '0', 0
if ARGV[3] == '1' then
  local v = redis.call('GET', KEYS[2])
  if v then f = v; present = 1 end
end
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if ok then return {1, f, present} end
-- Refused: the caller may wait in the nodes' queues, with a ticket taken from
-- their clocks (node.Waiter): tell it this node's, in µs (0 when the user may
-- not run TIME). Not queued here (-1).
local t = redis.pcall('TIME')
local now = 0
if type(t) == 'table' and not t.err then now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
return {0, f, present, 0, now, -1}
