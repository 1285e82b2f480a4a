-- Raise an existing fence counter to at least a token, without a lock check.
-- Used on nodes that did not grant the lock to the writer (they refused it, or
-- their reply had not arrived when the token was planned): a counter that only
-- grows never weakens the fencing order.
-- It never creates a counter. A raise can land late, after the node lost its
-- data and after other grants accepted larger tokens there: a counter created
-- then would be lower than a token the node had accepted, and trusted
-- (docs/fencing.md §6). Counters are created only inside the writer's own
-- lock window (writefence.lua, createfence.lua).
-- KEYS[1] fence counter key; ARGV[1] token (decimal uint64, no leading zeros)
-- Returns 1.
local cur = redis.call('GET', KEYS[1])
if not cur then return 1 end
if #cur < #ARGV[1] or (#cur == #ARGV[1] and cur < ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
