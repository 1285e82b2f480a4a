-- Read the fence counter, and whether the lock key holds our owner token: the
-- counters a lock acquired without them (acquire.lua with ARGV[3] "0") plans its
-- fencing token from (Lock.Fence). Read inside the lock window, a counter is
-- as good as one read with the SET: every token written back on this node by an
-- earlier holder was written inside that holder's window, which ended before
-- ours began (docs/fencing.md §4.2, L4). Writes nothing.
-- KEYS[1] lock key, KEYS[2] fence counter key (same hash slot)
-- ARGV[1] owner token
-- Returns {1 if the lock key holds the token else 0, counter as a decimal
-- string ("0" when absent), 1 if the counter exists else 0}: acquire.lua's
-- granted reply, with "held" for "granted".
local f = redis.call('GET', KEYS[2])
local present = 1
if not f then f = '0'; present = 0 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return {1, f, present} end
return {0, f, present}
