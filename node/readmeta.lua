-- Read the holder's metadata (see writemeta.lua): the record, only if the lock
-- key holds the token it was written for (its SHA-1 compared, so the token is
-- never returned); nil otherwise (no holder, or a holder without metadata).
-- KEYS[1] lock key, KEYS[2] metadata key. No ARGV.
local m = redis.call('GET', KEYS[2])
if not m then return false end
local held = redis.call('GET', KEYS[1])
if not held or redis.sha1hex(held) ~= string.sub(m, 1, 40) then return false end
return string.sub(m, 41)
