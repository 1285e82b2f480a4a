-- Write back a fencing token: raise the counter to the token, only while the lock
-- key still holds our owner token (so the write happens inside our lock window).
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] owner token, ARGV[2] fencing token (decimal uint64, no leading zeros)
-- Returns 1 if the lock was held (the counter is now >= the token), 0 otherwise.
-- Decimal strings are compared by length, then lexically: exact for any uint64,
-- where Lua numbers lose precision above 2^53.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local cur = redis.call('GET', KEYS[2])
if (not cur) or #cur < #ARGV[2] or (#cur == #ARGV[2] and cur < ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
