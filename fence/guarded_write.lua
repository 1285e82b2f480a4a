-- Guarded write: store a value only if the writer's fencing token is not lower
-- than the highest token this key has accepted.
-- KEYS[1] a hash with fields "fence" (highest token) and "value"
-- ARGV[1] token (decimal uint64, no leading zeros), ARGV[2] value
-- Returns {1, token} when written, {0, highest} when refused.
local cur = redis.call('HGET', KEYS[1], 'fence')
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
  return {0, cur}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {1, ARGV[1]}
