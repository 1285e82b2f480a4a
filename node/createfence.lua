-- Create a fence counter with the first token of a resource, only if no counter
-- exists, and only inside the writer's own lock window. A fenced grant whose
-- plan saw no counter on any node (a fresh resource, as far as its replies
-- tell) sends this to every node: with its owner token to the nodes that
-- granted it the lock, with "" (check only) to the others. Its replies were
-- read at different times (the acquisition's, stragglers included), so another
-- grant may have fenced the resource since: a counter found here on any node
-- says the resource is not fresh, and nothing is written.
-- The counter is written only while the lock key holds the owner token: the
-- call may land late, after the node lost its data and accepted larger tokens
-- from other grants, and after it lost them again; any lock key then present
-- was set after the loss, possibly by a grant that never fences and so never
-- repairs the node. Inside the writer's window no loss has happened since the
-- writer's acquire script read "no counter" (a loss ends the window).
-- KEYS[1] lock key, KEYS[2] fence counter key
-- ARGV[1] owner token, or "" on a node that did not grant the lock to the writer;
-- ARGV[2] fencing token (decimal uint64, no leading zeros)
-- Returns -1 if a counter exists (nothing written); 1 if the lock key holds the
-- owner token (the counter is created); 0 otherwise (nothing written).
if redis.call('GET', KEYS[2]) then return -1 end
if ARGV[1] == '' or redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
