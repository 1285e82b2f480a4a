-- Write leave: a waiting writer that gives up removes its writer-waiting
-- mark (rwwrite.lua), so that new readers need not wait for it to expire,
-- and wakes them.
-- KEYS[1] lock key (its channel only: nothing is written to it), KEYS[2] the
-- writer-waiting mark; ARGV[1] the writer's id.
-- Returns 1 if the mark was the writer's (and is deleted), else 0: another
-- writer's mark is left alone.
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.pcall('PUBLISH', KEYS[1], 'released')
  return 1
end
return 0
