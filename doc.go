// Package redlock implements distributed locks over N independent Redis nodes with
// the Redlock algorithm, and the same API over a single node.
//
// An acquisition sends SET key token NX PX ttl to every node at once, with a fresh
// random owner token, and succeeds only if a majority agreed and the lease still has
// validity after the time the acquisition took and a drift allowance:
//
//	validity = ttl − elapsed − (ttl·driftFactor + 2ms)
//
// elapsed being measured on the monotonic clock. A failed attempt releases
// whatever it took, on a context the caller cannot cancel, and stragglers that
// answer later are released as they land. Every call to a node is bounded by the
// caller's context and a per-node timeout, so a paused or dead minority never slows
// a caller down and a paused majority fails a call when its context ends.
//
// The lock is a lease: past Lock.Until the holder must assume another client may
// hold it. The conditions under which mutual exclusion holds (clock drift, pauses,
// persistence) are stated, with numbers, in docs/safety.md.
//
// Subpackages: clock (time and drift), node (one Redis instance and its Lua
// scripts), quorum (parallel fan-out and majority).
//
// Files of this package, by concept (docs/architecture.md draws the grant
// path): redlock.go (Client, Lock and TryLock, one attempt: try), lock.go (a
// held Lock: Extend, Release), round.go (one operation on N nodes), fair.go
// (a waiter's place in the nodes' queues), ticket.go (its ticket, from the
// nodes' clocks), wait.go (waiting for a release: this client's queue, a
// Lock call's wait, release notifications), contend.go (pacing between
// attempts, split votes), health.go (one health record per node, breaker),
// hold.go (Do: renewal and the hold's context), multi.go (several
// resources), fence.go (fencing tokens), keys.go, options.go, hooks.go,
// errors.go.
package redlock
