// Package node talks to one Redis instance: it takes, releases and extends a lock
// key with atomic Lua scripts, and bounds every call by the caller's context and a
// per-call timeout, so that a paused or unreachable node never blocks its caller.
//
// Node is the interface the quorum logic uses; Redis implements it over a redigo
// connection pool, built from a redis:// or rediss:// URL (Dial) or around a pool
// the application already has (FromPool). The scripts live in .lua files embedded
// in the binary and are sent with EVALSHA, falling back to EVAL when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
//
// # Hostile or broken nodes
//
// Connections made by Dial read replies through a guard that validates every RESP
// header before redigo sees it: a bulk string or array longer than the limits
// (DefaultMaxReplyBytes = 4 MiB per reply, DefaultMaxReplyElements = 65536 array
// elements per reply, arrays nested at most MaxReplyDepth = 8 deep; see
// WithReplyLimits) or a malformed header fails the call with ErrReplyTooLarge or
// ErrMalformedReply and closes the connection, before anything is allocated for
// it. Whatever reads a reply (the connection's reader goroutine, or the caller
// of a lone command) recovers from panics, turning them into a connection
// error. FuzzReplyGuard (with its seed corpus in testdata/) checks the
// guard against arbitrary input.
//
// A connection of Dial pipelines: a writer goroutine sends what commands wait
// in one write, a reader goroutine matches replies to them. A command on an
// idle connection whose context ends only at its deadline (DeadlineBound: the
// lock client's rounds) is lone instead: its caller writes it and reads the
// reply itself, two goroutine hand-overs fewer; a reply later than the
// deadline (or than the Waiter's end) is left to the reader, which drops it,
// and the connection goes on.
//
// Dialing (TCP, the TLS handshake, AUTH, SELECT and the INFO checks) is bounded
// by the node timeout and cut short by Close; it runs once per connection slot
// at a time, and callers wait for it only until their own context ends. A
// request queued on a connection that dies fails at once with its error.
//
// Release notifications (Watch) share one subscriber connection per node. When
// it cannot subscribe (the node is down, or the user lacks SUBSCRIBE
// permission), Watch says so at once, the subscriber retries with a jittered
// backoff from 50 ms doubling to 10 s (reset only once a SUBSCRIBE is
// confirmed), and WithLogger gets one warning; callers poll meanwhile. With no
// key watched, the subscriber closes its connection.
//
// A quarantine refusal or a script's permission error fails that command only.
// The scripts read before they write, and the release script publishes under
// pcall after its DEL, so a failure never leaves a key behind and a delete that
// happened is reported.
package node
