-- Write the holder's metadata (node.Meta: a leader's term and value, a plain
-- lock's WithMetadata) beside the lock key, only while the lock key holds the
-- writer's token. It never creates nor changes the lock key: not a grant.
-- KEYS[1] lock key, KEYS[2] metadata key (lock key .. ':meta', same hash slot)
-- ARGV[1] owner token, ARGV[2] TTL in milliseconds (the lock's: extend.lua
-- renews both), ARGV[3] the record (term, rev, since, value: node.Meta)
-- The stored value starts with the SHA-1 of the owner token (40 hex digits),
-- never the token itself: readmeta.lua returns the record only while the lock
-- key still holds the token it was written for, so a released or lapsed
-- holder's leftover is never read as current. A change is published on the
-- metadata key's channel (under pcall, as release.lua publishes).
-- Returns 1 if written, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], redis.sha1hex(ARGV[1]) .. ARGV[3], 'PX', ARGV[2])
redis.pcall('PUBLISH', KEYS[2], 'changed')
return 1
