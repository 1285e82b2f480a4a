package node

import (
	"fmt"
	"strconv"
	"strings"
)

// Script is one of the Lua scripts a node runs, exported so that nodes built on
// other Redis clients (the goredis and rueidis adapter modules) send exactly the
// same code: run it with EVALSHA Hash, and with EVAL Source when the server
// answers NOSCRIPT. Every script takes Keys keys; the keys of one call share a
// hash slot (the lock client's keys carry a Cluster hash tag).
type Script struct{ s *script }

// Source returns the Lua source.
func (s Script) Source() string { return s.s.src }

// Hash returns the SHA-1 of the source, as EVALSHA takes it.
func (s Script) Hash() string { return s.s.hash }

// Keys returns how many of the script's arguments are keys.
func (s Script) Keys() int { return s.s.keys }

// Name returns the name of the script's .lua file, without the extension
// ("acquire", "fairacquire", …).
func (s Script) Name() string { return s.s.name }

// LockKey returns the position (1-based) of the lock key among the script's
// keys, or 0 when the script takes none (it works on the fence counter or a
// queue only).
func (s Script) LockKey() int { return s.s.lock }

// Holders returns the position (1-based) among the script's keys of a
// container of holders who share it (the readers of a read-write lock, a
// sorted set of tokens), or 0 when it takes none. Adding a member to it
// grants, as writing the lock key does: only a script that Grants may.
func (s Script) Holders() int { return s.s.holders }

// Grants reports whether the script can grant a lock: create the lock key
// or overwrite it with a new token. A node must refuse every such
// script while it refuses grants (the restart quarantine); the others
// (release, extend, fence writes, leaving a queue) go through, so that
// holders can still clean up.
func (s Script) Grants() bool { return s.s.grants }

// Scripts returns every script a node runs, in the order they are defined.
func Scripts() []Script {
	all := make([]Script, len(scripts.all))
	for i, s := range scripts.all {
		all[i] = Script{s}
	}
	return all
}

// The scripts behind the Node methods, with their arguments (all sent as
// strings; a TTL in whole milliseconds, a fence as a decimal uint64).
var (
	// AcquireScript: KEYS lock, fence; ARGV token, TTL ms, "1" to read the
	// fence counter or "0". Reply {1, fence counter as a decimal string ("0"
	// when not read), 0|1 counter present (0 when not read)} when granted, and
	// when refused also the waiters ahead (0), the node's clock in µs and -1
	// (not queued); see ParseAcquiredReply.
	AcquireScript = Script{acquireScript}
	// ReleaseScript: KEYS lock; ARGV token, "1" to notify waiters or "0".
	// Reply 1 when deleted.
	ReleaseScript = Script{releaseScript}
	// ExtendScript: KEYS lock, metadata (MetaKey: renewed with the lock);
	// ARGV token, TTL ms. Reply 1 when extended.
	ExtendScript = Script{extendScript}
	// WriteFenceScript: KEYS lock, fence; ARGV token, fence. Reply 1 when the
	// lock was held.
	WriteFenceScript = Script{fenceScript}
	// RaiseFenceScript: KEYS fence; ARGV fence. Raises an existing counter,
	// never creates one. Reply 1.
	RaiseFenceScript = Script{raiseScript}
	// CreateFenceScript: KEYS lock, fence; ARGV token (or "": check only),
	// fence. Reply -1 when a counter existed (nothing written), else 1 when
	// the lock was held (the counter is created), 0 when not (nothing written).
	CreateFenceScript = Script{createScript}
	// ReadFenceScript: KEYS lock, fence; ARGV token. Reply {1 if the lock key
	// holds the token else 0, fence counter, 0|1 counter present}, as
	// AcquireScript's granted reply. Writes nothing.
	ReadFenceScript = Script{readScript}
)

// ParseAcquired reads the three elements of AcquireScript's reply, as an
// adapter decoded them: ok (0 or 1), the counter (a decimal string) and
// present (0 or 1). A counter that is not a uint64 is ErrUnexpectedReply.
func ParseAcquired(ok int64, fence string, present int64) (Acquired, error) {
	f, err := strconv.ParseUint(fence, 10, 64)
	if err != nil {
		return Acquired{}, fmt.Errorf("%w: fence counter %q is not a uint64", ErrUnexpectedReply, strings.Clone(fence))
	}
	return Acquired{OK: ok == 1, Fence: f, HasFence: present == 1}, nil
}
