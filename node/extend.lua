-- Extend: reset the TTL only if the key still holds our owner token. A key that has
-- expired is never re-created here: an extension cannot re-take a lapsed lock.
-- KEYS[1] lock key, KEYS[2] its metadata key (writemeta.lua: renewed with the
-- lock, a no-op when there is none); ARGV[1] owner token, ARGV[2] TTL in milliseconds.
-- Returns 1 if extended, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
