-- Write acquire: take the lock key of a read-write lock (the writer is a
-- plain lock: SET NX PX, with the fence counter read as acquire.lua does),
-- only if no reader holds it.
-- KEYS[1] lock key, KEYS[2] fence counter key, KEYS[3] readers (rwread.lua),
-- KEYS[4] the writer-waiting mark; all in the lock key's slot.
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] the waiting writer's id, or
-- '' (one attempt only: leave no mark), ARGV[4] the mark's lease in ms.
-- A writer refused because of readers (the lock key free) sets the mark to
-- its id for ARGV[4] ms: new readers are refused while it lives, so a stream
-- of readers cannot starve the writer; the readers already in finish. The
-- writer's retries renew it; its grant deletes it if it is still its own.
-- Returns {1, fence counter ("0" when absent), 1 if the counter exists} when
-- granted, as acquire.lua does, and {0, counter, present, 0, the node's clock
-- in µs, -1} when refused.
-- The counter is read first: a script stopped by an error writes nothing.
local f = redis.call('GET', KEYS[2])
local present = 1
if not f then f = '0'; present = 0 end
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) == 0 then
    if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
      if ARGV[3] ~= '' and redis.call('GET', KEYS[4]) == ARGV[3] then
        redis.call('DEL', KEYS[4])
      end
      return {1, f, present}
    end
  elseif ARGV[3] ~= '' then
    redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[4])
  end
end
return {0, f, present, 0, nowus, -1}
