// Package sim is a deterministic simulation of a Redlock deployment, for
// testing the library under the rare interleavings where a lock algorithm
// breaks. See docs/simulation.md.
//
// Everything runs inside a testing/synctest bubble: time is virtual, and the
// same seed replays the same run, message for message. The code under test is
// the library as shipped: the root package's Client and Lock, the quorum
// package, and node.Redis with its Lua scripts, talking RESP through a real
// redigo connection pool to miniredis servers.
//
//   - A Node is a miniredis server (no TCP listener: connections are
//     in-memory pipes from miniredis' Dial) with its own wall clock: a rate
//     and steps, applied with miniredis' SetTime before every command, so
//     that keys expire by the node's clock (ClockTTL). A node crashes
//     (connections reset, dials refused) and restarts with its data (AOF) or
//     empty (keys, fence counters and script cache lost). With a quarantine
//     (WorldConfig.Quarantine), every client's node has a node.RestartGuard
//     (node.WithRestartGuard: FromPool nodes do not dial, and miniredis' INFO
//     has no server section), which the node tells of each restart.
//   - A link (client → node) injects message delays, slow (late) messages,
//     request and reply loss, and partitions, in a net.Conn wrapper around
//     the pipe; each message's fate is drawn from the seed.
//   - A Holder uses the lock the documented way (check
//     time.Now().Before(lock.Until()) right before acting) and records every
//     grant and protected write. Holders may pause (a GC pause) between the
//     reply and its use. They take the lock by TryLock, or, in profiles with
//     Paths, by Lock, LockMulti or DoMulti too, sometimes in fair mode.
//   - Check reads the history: overlapping occupancy of the resource (mutual
//     exclusion) and stale writes accepted by a fenced resource.
//
// Generate draws a Schedule from a seed and a Profile (fault families within
// the bounds of docs/safety.md, or one precondition broken beyond its bound);
// Run executes it.
package sim
