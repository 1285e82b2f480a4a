package redlock

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// The waiters' queue. A Lock call that waits is a waiter with a ticket, a
// time on the nodes' clocks when it started waiting (ticket.go), queued on
// every node beside the lock key (node.Queuer). A node lets a queued waiter
// take the lock only at the head of its queue, so that all nodes, ordering
// waiters by the same tickets, grant it to the same waiter: no split votes
// between waiters, whatever their number. A waiter renews its place with
// every attempt; it stays queued (at the head) while it holds the lock, and
// leaves every queue when it releases it (or when Lock gives up); one that
// crashed is dropped once its lease (fairLease) runs out. A release wakes the
// head only, on its own channel.
//
// The two modes are one queue with one difference, the newcomer's: in fair
// mode (WithFair) a Lock call queues from its first attempt, which takes the
// lock only when nobody is queued (strict order); in the default mode a
// newcomer's first attempt is a plain SET NX that takes a free lock whoever
// waits (take-if-free, like sync.Mutex's normal mode), and the call queues
// once refused (or from its first attempt when the resource was contended
// lately).

// fairLeaseMin is the least time a node keeps a silent waiter queued.
const fairLeaseMin = 2 * time.Second

// fairLease is how long the nodes keep a waiter queued without hearing from
// it: longer than two of its longest backoffs, since it renews its place with
// its attempts (every attempt leaves it at least nine tenths of its lease:
// node.Waiter.Lease).
func fairLease(lc lockConfig) time.Duration { return fairLeaseMin + 2*lc.retryMax }

// tell says whom a release tells that the lock is free.
type tell uint8

const (
	// tellNone: nobody (the cleanup of a failed attempt: the lock is held
	// elsewhere).
	tellNone tell = iota
	// tellQueue: the head of each node's waiters' queue only (a plain lock,
	// whose waiters queue): with nobody queued the release is the
	// compare-and-delete alone.
	tellQueue
	// tellAll: the head of the queue, or, with nobody queued, the key's own
	// watchers (a write lock's waiting readers and writers, a semaphore's
	// waiters, an election's observers).
	tellAll
)

// releaseOn releases key on n; unless to is tellNone, through the node's
// waiters' queue, so that only its head is woken (or, with tellAll and
// nobody queued, the key's watchers). waiter is the id of the waiter the
// lock was granted to, or empty: it leaves the queue. args, if set, are
// the same key, token, waiter and to laid out already (Lock.args), which a
// *node.Redis sends as they are.
//
// A node whose ACL lacks the queue's commands (a minimal ACL written before
// the default mode used the queue: docs/operations.md) refuses the queue's
// release: the lock is then released as by Release, waking the key's
// watchers, so that such a client's locks still work; its waiters fail
// with "permission denied". queued reports that the node had waiters
// queued (it woke the head).
func (c *Client) releaseOn(ctx context.Context, n node.Node, key, token, waiter string, to tell, args *node.LockArgs) (ok, queued bool, err error) {
	if to == tellNone {
		ok, err = n.Release(ctx, key, token, false)
		return ok, false, err
	}
	if r, isRedis := n.(*node.Redis); isRedis && args != nil { // the same call, its arguments laid out once
		ok, queued, err = r.ReleaseArgs(ctx, args)
	} else {
		ok, queued, err = n.ReleaseFair(ctx, key, token, waiter, to == tellAll)
	}
	if err != nil && queueUnusable(err.Error()) {
		ok, err = n.Release(ctx, key, token, true)
		return ok, false, err
	}
	return ok, queued, err
}

// queueUnusable reports whether a release through the waiters' queue failed
// because the queue's keys cannot be used: the user may not run its commands
// (isPermission), or another kind of value sits at one of them (WRONGTYPE: a
// key of the application's in the lock's namespace). The plain release then
// deletes the lock key alone, which would otherwise live out its TTL on
// that node. (An adversarial review of 8a00707, after which a head is
// granted even when its lease cannot be renewed.)
func queueUnusable(text string) bool {
	return isPermission(text) || strings.Contains(text, "WRONGTYPE")
}

// place is a Lock call's place in the nodes' waiters' queues.
type place struct {
	node.Waiter
	// ahead is, after an attempt that failed, how many waiters a majority of
	// the nodes had queued before this one (each of them at least that
	// many): the next releases will wake them, not this one, which can wait
	// for its own wake-up rather than poll (see pace.backoff).
	ahead int
	// over is set when the Lock call returns: from then on a node that
	// refuses one of its attempts (a straggler) is told to drop it (leaveLate).
	over atomic.Bool
	// requeue: the last attempt left the waiter without a place it can
	// keep (no ticket yet, or a ticket a node refused), and the next one goes
	// at once with a ticket from the nodes' clocks; requeued: that next
	// attempt was such a one (at most one in a row).
	requeue, requeued bool
}

// newWaiterGroup returns a random name for a client's waiters.
func newWaiterGroup() string {
	g, err := newToken()
	if err != nil {
		g = Digest(time.Now().String()) // crypto/rand failed: uniqueness is all that matters here
	}
	return g
}

// newWaiter returns a fresh place in the queues, with ticket (0: none yet;
// see place.settle). Its id,
// group/n, is unique; the client's waiters share the group, and so one wake-up
// channel per key (node.WaiterChannel): a client contending for a key again
// and again keeps its subscription (it lingers between Lock calls, see
// node.Watcher) instead of subscribing and unsubscribing every time. Its Lock
// calls on one key wait one at a time (enterQueue), so a wake-up on that
// channel is for the current one, or a stale one that costs an attempt.
func (c *Client) newWaiter(lc lockConfig, ticket int64) *place {
	id := c.waiterGroup + "/" + strconv.FormatInt(c.waiterSeq.Add(1), 10)
	return &place{Waiter: node.Waiter{ID: id, Ticket: ticket, Lease: fairLease(lc)}}
}

// queuedAhead returns how many waiters at least need nodes reported queued
// before this one when they refused an attempt (place.ahead).
func queuedAhead(replies []quorum.Reply[node.Acquired], need int) int {
	var ahead []int
	for _, r := range replies {
		if r.Done && r.Err == nil && !r.OK {
			ahead = append(ahead, r.Value.Ahead)
		}
	}
	if need < 1 || len(ahead) < need {
		return 0
	}
	slices.Sort(ahead)
	return ahead[len(ahead)-need]
}

// leaveQueue ends waiter w's Lock call on key. Granted, it leaves the queues
// as it goes: the nodes that answered before Lock returned, granting or
// refusing, keep it queued (at the head where they granted) until the lock is
// released (ReleaseFair takes it out before waking the next waiter; until
// then nobody else can take the lock anyway); those that refuse it later are
// told by the attempt's round (leaveLate), and those that grant it after the
// release are released with it (undoStraggler). Otherwise it leaves every
// node's queue now, in the background (a waiter that cannot be removed is
// dropped when its lease runs out). The Lock call is registered (enterCall):
// a Close that ended it waits for these leaves.
func (c *Client) leaveQueue(key string, w *place, granted bool) {
	w.over.Store(true)
	if granted {
		return
	}
	for i := range c.nodes {
		c.spawn(func() { c.leaveOn(i, key, w) })
	}
}

// leaveOn removes waiter w from key's queue on node i.
func (c *Client) leaveOn(i int, key string, w *place) {
	ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.nodeTimeout)
	defer cancel()
	if err := w.leave(ctx, c.nodes[i], key); err != nil {
		c.log(ctx, slog.LevelDebug, "leaving the waiters' queue failed", key, "", "node", c.nodes[i].Name(), "err", err)
	}
}

// acquire is the attempt of lock l by waiter w (as wv: the same ticket on
// every node) on node n, through its queue.
func (w *place) acquire(ctx context.Context, n node.Node, l *Lock, wv node.Waiter) (node.Acquired, error) {
	return n.AcquireFair(ctx, l.key, l.countersKey(), l.token, l.ttl, wv)
}

// leave takes w out of key's queue on n.
func (w *place) leave(ctx context.Context, n node.Node, key string) error {
	return n.LeaveQueue(ctx, key, w.ID)
}

// leaveLate is an acquisition round's reply hook: a node that
// refuses waiter w once its Lock call is over has it queued, and is told to
// drop it.
func (c *Client) leaveLate(key string, w *place, i int, r quorum.Reply[node.Acquired]) {
	if r.Done && r.Err == nil && !r.OK && w.over.Load() {
		c.spawn(func() { c.leaveOn(i, key, w) })
	}
}
