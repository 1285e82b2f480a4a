package node

import (
	"context"
	_ "embed"
	"strings"
	"time"
)

//go:embed fairacquire.lua
var fairAcquireSrc string

//go:embed fairleave.lua
var fairLeaveSrc string

//go:embed fairrelease.lua
var fairReleaseSrc string

var (
	fairAcquireScript = newGrantScript("fairacquire", 5, 1, fairAcquireSrc)
	fairLeaveScript   = newScript("fairleave", 3, 1, fairLeaveSrc)
	fairReleaseScript = newScript("fairrelease", 4, 1, fairReleaseSrc)
)

// TicketBound is how far a waiter's ticket may be from a node's clock
// (TIME) for the node to queue the waiter with it, or to move a queued waiter
// to it: a ticket further off is refused (TicketRefused), so no ticket buys
// a place earlier than TicketBound before its arrival. The nodes' own clocks
// must agree within it (docs/safety.md).
const TicketBound = time.Second

// Waiter is a place in a lock key's waiters' queue (Queuer).
type Waiter struct {
	// ID names the waiter: random, unique. The part before a "/", if any,
	// names the channel it is woken on (WaiterChannel).
	ID string
	// Ticket orders the waiters: lower first, ties by ID. It is a time in µs
	// on the nodes' clocks: the waiter chooses it and sends the same to every
	// node, so that all nodes agree on the order, and a node queues it only
	// within TicketBound of its own clock (the lock client takes it from the
	// clocks the nodes answered with: Acquired.Clock). 0 means none yet: the
	// waiter is not queued, and learns the nodes' clocks.
	Ticket int64
	// Lease is how long the node keeps the waiter queued without hearing from
	// it: a waiter that crashed blocks the queue for at most that long. A
	// live waiter keeps its place while it attempts within nine tenths of
	// it: a head queued and renewed less than a tenth of its lease ago
	// renews nothing when granted (AcquireFair).
	Lease time.Duration
}

// Queuer is a Node with a cross-client first-come-first-served waiters' queue
// per lock key, kept on the node beside the key (in its hash slot).
type Queuer interface {
	// AcquireFair queues w (or renews its lease), drops waiters whose lease
	// ran out, and takes the lock as Acquire does only if w is at the head of
	// the queue; w stays at the head until ReleaseFair or LeaveQueue takes it
	// out. A head queued and renewed less than a tenth of its lease ago
	// renews nothing when granted (Waiter.Lease). A waiter that left cannot
	// queue again for a few seconds: its late attempts are refused. With
	// fenceKey "" the counter is not read, as with Acquire.
	AcquireFair(ctx context.Context, key, fenceKey, token string, ttl time.Duration, w Waiter) (Acquired, error)
	// LeaveQueue removes the waiter id from key's queue; one that leaves
	// from the head while key is free wakes the new head.
	LeaveQueue(ctx context.Context, key, id string) error
	// ReleaseFair deletes key if it still holds token, as Release does, and
	// reports whether it did (released), and whether waiters were queued
	// (queued: the head was woken); when key is free afterwards it wakes the head
	// of the queue only, on its channel (WaiterChannel), or, when nobody is
	// queued and tell is set, the key's watchers (Watch of key: a lock whose
	// waiters do not queue, such as a read-write lock's). waiter, if not
	// empty, is the id of the waiter the lock was granted to: it leaves the
	// queue first (a node that refused it still has it queued, perhaps at
	// the head). The queue is looked at only when its mark (QueueMarkKey)
	// exists, which outlives it: an uncontended release with tell unset is
	// the compare-and-delete alone.
	ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (released, queued bool, err error)
}

// WaiterChannel is the channel on which the waiter id is told that key was
// released while it was at the head of the queue: Watch it like a key. An id
// of the form group/rest is told on its group's channel: a client that names
// its waiters so can keep one subscription across its Lock calls.
func WaiterChannel(key, id string) string {
	if g, _, ok := strings.Cut(id, "/"); ok {
		id = g
	}
	return key + ":w:" + id
}

// QueueKeys returns the keys of key's waiters' queue and of its waiters'
// leases.
func QueueKeys(key string) (queue, leases string) {
	leases = key + ":qx" // one allocation for both: the queue key is its prefix
	return leases[:len(leases)-1], leases
}

// QueueMarkKey returns the key of the mark of key's waiters' queue: a string
// that exists at least as long as the queue does (the queued acquisition
// sets both expiries together), so that a release reads it with the lock
// key in one MGET and looks at the queue only when it may exist.
func QueueMarkKey(key string) string { return key + ":qm" }

// queueKeys returns QueueKeys and QueueMarkKey, in one allocation.
func queueKeys(key string) (queue, leases, mark string) {
	s := key + ":qm" + key + ":qx"
	n := len(key)
	return s[:n+2], s[n+3:], s[:n+3]
}
