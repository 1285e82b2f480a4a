// Package node talks to one Redis instance: it takes, releases and extends a lock
// key with atomic Lua scripts, and bounds every call by the caller's context and a
// per-call timeout, so that a paused or unreachable node never blocks its caller.
//
// Node is the interface the quorum logic uses; Redis implements it over a redigo
// connection pool, built from a redis:// or rediss:// URL (Dial) or around a pool
// the application already has (FromPool). The scripts live in .lua files embedded
// in the binary and are sent with EVALSHA, falling back to EVAL when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
package node
