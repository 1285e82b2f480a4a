package node

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
)

//go:embed wakequeue.lua
var wakeQueueSrc string

//go:embed wakeacquire.lua
var wakeAcquireSrc string

//go:embed wakerelease.lua
var wakeReleaseSrc string

//go:embed wakeleave.lua
var wakeLeaveSrc string

// The wake queue's scripts share the functions of wakequeue.lua, prepended.
var (
	wakeAcquireScript = newGrantScript("wakeacquire", 4, 1, wakeQueueSrc+wakeAcquireSrc)
	wakeReleaseScript = newScript("wakerelease", 3, 1, wakeQueueSrc+wakeReleaseSrc)
	wakeLeaveScript   = newScript("wakeleave", 3, 1, wakeQueueSrc+wakeLeaveSrc)
)

// WakeQueuer is a Node with a loose waiters' queue per lock key, the lock
// client's default mode between separate clients: it decides whom a release
// wakes (the first waiter, by the tickets every node orders alike), not who
// may take the lock. A release reserves the lock for the waiter it woke for a
// short while, so that other waiters do not take it first; a newcomer's plain
// Acquire is not held back. Its scripts use only the commands of the minimal
// ACL (GET, SET, DEL, PUBLISH).
type WakeQueuer interface {
	// AcquireQueued takes the lock as Acquire does, unless a release reserved
	// it for another waiter; refused, w is queued (with its ticket; Lease is
	// how long the queue outlives the attempt), granted, it leaves the
	// queue. Acquired.Ahead counts the waiters queued before w. A waiter
	// with an empty id, white space in its id, or a negative ticket is
	// ErrInvalidWaiter.
	AcquireQueued(ctx context.Context, key, fenceKey, token string, ttl time.Duration, w Waiter) (Acquired, error)
	// ReleaseQueued deletes key if it still holds token, as Release does,
	// and reports whether it did; when key is free afterwards it wakes the
	// first waiter on its channel (WaiterChannel) and reserves the lock for
	// it for reserve, skipping (and dropping) waiters nobody listens for and
	// waiters it woke three times without their attempting since; with
	// nobody queued it tells key's watchers. waiter, if not empty, is the id
	// of the waiter the lock was granted to: it leaves the queue.
	ReleaseQueued(ctx context.Context, key, token, waiter string, reserve time.Duration) (bool, error)
	// LeaveWakeQueue removes waiter id from key's queue; a waiter that a
	// release woke passes its wake-up (and reservation, for reserve) on.
	LeaveWakeQueue(ctx context.Context, key, id string, reserve time.Duration) error
}

// WakeQueueKeys returns the keys of key's wake queue and of the waiter a
// release woke.
func WakeQueueKeys(key string) (queue, woken string) { return key + ":wq", key + ":wk" }

// ErrInvalidWaiter is returned for a waiter the wake queue cannot hold: an
// empty id, an id with white space (the queue is lines of words), or a
// negative ticket.
var ErrInvalidWaiter = errors.New("node: invalid waiter")

// checkWaiter reports why the wake queue cannot hold waiter id with ticket.
func checkWaiter(id string, ticket int64) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalidWaiter)
	case strings.ContainsAny(id, " \t\r\n"):
		return fmt.Errorf("%w: id %q contains white space", ErrInvalidWaiter, id)
	case ticket < 0:
		return fmt.Errorf("%w: negative ticket %d", ErrInvalidWaiter, ticket)
	}
	return nil
}
