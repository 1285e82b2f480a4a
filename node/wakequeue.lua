-- The default mode's waiters' queue (node.WakeQueuer), shared by
-- wakeacquire.lua, wakerelease.lua and wakeleave.lua (prepended to each).
-- It decides whom a release wakes, not who may take the lock. The queue is
-- one string key of lines "ticket id wakes\n" (in arrival order, read in
-- ticket order), and the waiter a release woke is kept, for a short reservation, in a
-- key of its own: so the scripts need only GET, SET, DEL and PUBLISH, the
-- commands of the minimal ACL (docs/operations.md). A waiter whose client is
-- gone is dropped when a release finds nobody listening on its channel.

-- Longest queue kept: waiters beyond it are not queued, and poll.
local maxQueued = 256

-- How far, in µs, a ticket may be from the node's clock (TIME) for the node
-- to queue a waiter with it, or move a queued waiter to it
-- (node.TicketBound): a ticket is a time on the nodes' clocks, and a wrong
-- one buys no place.
local ticketBound = 1000000

-- clock returns the node's time in µs (TIME), exact in a Lua number, or 0
-- when the user may not run TIME (an ACL of before it was needed): tickets
-- are then not checked.
local function clock()
  local t = redis.pcall('TIME')
  if type(t) ~= 'table' or t.err then return 0 end
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- inBound reports whether ticket (µs) is one the node may queue at now.
local function inBound(ticket, now)
  return ticket > 0 and (now == 0 or math.abs(ticket - now) <= ticketBound)
end

-- parse returns the entries of queue q: {ticket = number, t = the ticket as
-- sent, id = string, wakes = how often a release woke it since its last
-- attempt}.
local function parse(q)
  local es = {}
  if q then
    for t, w, n in string.gmatch(q, '(%d+) ([^ \n]+) (%d+)\n') do
      es[#es + 1] = {ticket = tonumber(t), t = t, id = w, wakes = tonumber(n)}
    end
  end
  return es
end

-- before reports whether entry a comes before entry b: lower ticket, then id.
local function before(a, b)
  return a.ticket < b.ticket or (a.ticket == b.ticket and a.id < b.id)
end

-- take removes waiter id from es and returns its entry, or nil.
local function take(es, id)
  for i, e in ipairs(es) do
    if e.id == id then
      table.remove(es, i)
      return e
    end
  end
  return nil
end

-- drop removes waiter id from es; it reports whether it was there.
local function drop(es, id) return take(es, id) ~= nil end

-- store writes es to key: deleted when empty, with its expiry renewed to px
-- ms when given, kept otherwise.
local function store(key, es, px)
  if #es == 0 then
    redis.call('DEL', key)
    return
  end
  local b = {}
  for i, e in ipairs(es) do b[i] = e.t .. ' ' .. e.id .. ' ' .. e.wakes .. '\n' end
  if px then
    redis.call('SET', key, table.concat(b), 'PX', px)
  else
    redis.call('SET', key, table.concat(b), 'KEEPTTL')
  end
end

-- Wake-ups a waiter may get without attempting before it is dropped: one
-- that is listening but not trying (its process is paused or stuck) would
-- otherwise take every wake-up, and leave the others to their backoff.
local maxWakes = 3

-- wake tells the first waiter of es that lock is free, on its channel (lock ..
-- ':w:' .. the part of its id before '/'), and reserves the lock for it in
-- wokenKey for reserve ms. Waiters that nobody listens for, or that were woken
-- maxWakes times without attempting since, are dropped from es (at most 3
-- per call); with nobody to wake, the lock's own channel is told. Without
-- PUBLISH permission nobody is woken: waiters poll.
local function wake(lock, es, wokenKey, reserve)
  for _ = 1, 3 do
    local h = nil
    for i, e in ipairs(es) do
      if h == nil or before(e, es[h]) then h = i end
    end
    if h == nil then break end
    if es[h].wakes < maxWakes then
      local n = redis.pcall('PUBLISH', lock .. ':w:' .. string.match(es[h].id, '^[^/]*'), 'released')
      if type(n) ~= 'number' then return end
      if n > 0 then
        es[h].wakes = es[h].wakes + 1
        redis.call('SET', wokenKey, es[h].id, 'PX', reserve)
        return
      end
    end
    table.remove(es, h)
  end
  redis.pcall('PUBLISH', lock, 'released')
end
