-- Create a fence counter with the first token of a resource, only if no counter
-- exists. A fenced grant whose plan saw no counter on any node (a fresh resource,
-- as far as its replies tell) writes its token back this way on every node. Its
-- replies were read at different times (the acquisition's, stragglers included),
-- so another grant may have fenced the resource since, and a node of that grant
-- may have lost its counter since: a counter found here on any node says the
-- resource is not fresh, and nothing is written.
-- The counter is created whoever holds the lock, so that of two grants that both
-- planned a fresh resource, the second to reach a node finds the first's counter
-- there, unless that node lost it in between.
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] owner token, or "" on a node that did not grant the lock to the writer;
-- ARGV[2] fencing token (decimal uint64, no leading zeros)
-- Returns -1 if a counter exists (nothing written); otherwise creates the counter
-- and returns 1 if the lock key holds the owner token, 0 if not.
if redis.call('GET', KEYS[2]) then return -1 end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[1] ~= '' and v == ARGV[1] then return 1 end
return 0
