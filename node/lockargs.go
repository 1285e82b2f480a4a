package node

import (
	"context"
	"time"
)

// LockArgs are one lock's Acquire and ReleaseFair calls (AcquireCall,
// ReleaseFairCall), laid out once for all the nodes of the lock: the lock
// client sends the same keys and token to every node, and building a Call,
// boxing its strings into the []any redigo takes and laying EVALSHA's
// arguments out cost about ten allocations per node and Lock+Release.
// Redis.AcquireArgs and Redis.ReleaseArgs run them exactly as Acquire and
// ReleaseFair run the calls they build (the same scripts, arguments and
// guards). Set them up with Init (and SetWaiter) before their first use;
// they must not change after it. The zero value is not usable.
type LockArgs struct {
	// keys: the acquisition's (key, fence key), then the release's (key,
	// queue key, queue leases key, queue mark key).
	keys [6]string
	// acquire and release are the calls' arguments (ARGV).
	acquire [3]any // token, TTL ms, read the counter
	release [3]any // token, waiter, tell the key's channel
	// acquireArgv and releaseArgv are EVALSHA's arguments: the hash, the
	// number of keys, the keys, ARGV (redisEvaler).
	acquireArgv [7]any
	releaseArgv [9]any
}

// Init lays out the calls of the lock key with token and TTL ttl, as
// AcquireCall(key, fenceKey, token, ttl) (with fenceKey "" the counter is not
// read) and ReleaseFairCall(key, token, "", tell) (SetWaiter sets another
// waiter).
func (a *LockArgs) Init(key, fenceKey, token string, ttl time.Duration, tell bool) {
	q, qx, qm := queueKeys(key)
	read := readCounter
	if fenceKey == "" {
		fenceKey, read = key, skipCounter
	}
	a.keys = [6]string{key, fenceKey, key, q, qx, qm}
	// Each string boxed once, for every argument list that holds it.
	k, qa, qxa, qma, tok := any(key), any(q), any(qx), any(qm), any(token)
	f := k // the counter not read: KEYS[2] is the lock key again, boxed once
	if fenceKey != key {
		f = any(fenceKey)
	}
	a.acquire = [3]any{tok, msArg(ttl), read}
	a.release = [3]any{tok, "", tellArg(tell)}
	a.acquireArgv = [7]any{acquireScript.hashArg, acquireScript.keys, k, f, a.acquire[0], a.acquire[1], a.acquire[2]}
	a.releaseArgv = [9]any{fairReleaseScript.hashArg, fairReleaseScript.keys, k, qa, qxa, qma, a.release[0], a.release[1], a.release[2]}
}

// SetWaiter makes the release's call ReleaseFairCall(key, token, waiter,
// tell).
func (a *LockArgs) SetWaiter(waiter string) {
	a.release[1] = waiter
	a.releaseArgv[7] = a.release[1]
}

// acquireCall is AcquireCall's Call.
func (a *LockArgs) acquireCall() Call {
	return Call{Script: AcquireScript, Keys: a.keys[:2], Args: a.acquire[:]}
}

// releaseCall is ReleaseFairCall's Call.
func (a *LockArgs) releaseCall() Call {
	return Call{Script: Script{fairReleaseScript}, Keys: a.keys[2:], Args: a.release[:]}
}

// AcquireArgs is Acquire with a's arguments: Acquire(ctx, key, fenceKey,
// token, ttl) of a.Init.
func (r *Redis) AcquireArgs(ctx context.Context, a *LockArgs) (Acquired, error) {
	return r.acquireArgv(ctx, a.acquireCall(), a.acquireArgv[:])
}

// ReleaseArgs is ReleaseFair with a's arguments: ReleaseFair(ctx, key,
// token, waiter, tell) of a.Init and a.SetWaiter.
func (r *Redis) ReleaseArgs(ctx context.Context, a *LockArgs) (released, queued bool, err error) {
	return releaseFairReply(r.intArgv(ctx, a.releaseCall(), a.releaseArgv[:]))
}
