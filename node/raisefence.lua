-- Raise a fence counter to at least a token, without a lock check. Used on nodes
-- that did not grant the lock to the writer: a counter that only grows never
-- weakens the fencing order (only a counter that is lost or lowered does), and a
-- node that has a counter can later tell a fresh resource from a wiped node.
-- KEYS[1] fence counter key; ARGV[1] token (decimal uint64, no leading zeros)
-- Returns 1.
local cur = redis.call('GET', KEYS[1])
if not cur then return 1 end
if (not cur) or #cur < #ARGV[1] or (#cur == #ARGV[1] and cur < ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
