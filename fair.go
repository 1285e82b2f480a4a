package redlock

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Fair mode (WithFair): each Lock call is a waiter with a ticket, a time on
// the nodes' clocks when it started waiting (ticket.go), queued on every node
// beside the lock key (node.Queuer). A node grants the lock only to the head
// of its queue, so that all nodes, ordering waiters by the same tickets,
// grant it to the same waiter: no split votes and no barging. A waiter renews
// its place with every attempt; it stays queued (at the head) while it holds
// the lock, and leaves every queue when it releases it (or when Lock gives
// up); one that crashed is dropped once its lease (fairLease) runs out.
//
// The default mode's wake queue (node.WakeQueuer) reuses the same waiters
// (place.loose): queued with a ticket on every node once refused, a waiter may
// take the lock wherever it is queued, and leaves a node's queue when that
// node grants it; the queue only picks whom a release wakes. The queue
// expires with the lease of its last attempt, and a waiter whose client is
// gone is dropped when a release finds nobody listening for it.

// fairLeaseMin is the least time a node keeps a silent waiter queued.
const fairLeaseMin = 2 * time.Second

// fairLease is how long the nodes keep a waiter queued without hearing from
// it: longer than two of its longest backoffs, since it renews its place with
// every attempt.
func fairLease(lc lockConfig) time.Duration { return fairLeaseMin + 2*lc.retryMax }

// releaseOn releases key on n; with notify, through the node's queue (fair
// mode's, or the default mode's wake queue), so that only the first waiter is
// woken. waiter is the id of the waiter the lock was granted to, or empty: it
// leaves the queue.
func (c *Client) releaseOn(ctx context.Context, n node.Node, key, token, waiter string, notify bool) (bool, error) {
	switch {
	case !notify:
		return n.Release(ctx, key, token, false)
	case c.cfg.fair:
		return n.ReleaseFair(ctx, key, token, waiter)
	default:
		return n.ReleaseQueued(ctx, key, token, waiter, wokenReserve)
	}
}

// wokenReserve is how long, in the default mode's loose queue, a release
// reserves the lock for the waiter it woke: the others, which could otherwise
// take it first, wait their turn; a woken waiter that does not try in time
// (slow, or gone) loses it.
const wokenReserve = 10 * time.Millisecond

// place is a Lock call's place in the nodes' waiters' queues.
type place struct {
	node.Waiter
	// ahead is, after an attempt that failed, how many waiters a majority of
	// the nodes had queued before this one (each of them at least that
	// many): the next releases will wake them, not this one, which can wait
	// for its own wake-up rather than poll (see pace.backoff).
	ahead int
	// loose: the default mode's wake queue (node.WakeQueuer), not fair
	// mode's queue (node.Queuer).
	loose bool
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
func (c *Client) newWaiter(lc lockConfig, loose bool, ticket int64) *place {
	id := c.waiterGroup + "/" + strconv.FormatInt(c.waiterSeq.Add(1), 10)
	return &place{Waiter: node.Waiter{ID: id, Ticket: ticket, Lease: fairLease(lc)}, loose: loose}
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
// every node) on node n, through its queue: the wake queue for a loose
// waiter, fair mode's otherwise.
func (w *place) acquire(ctx context.Context, n node.Node, l *Lock, wv node.Waiter) (node.Acquired, error) {
	if w.loose {
		return n.AcquireQueued(ctx, l.key, l.fenceKey, l.token, l.ttl, wv)
	}
	return n.AcquireFair(ctx, l.key, l.fenceKey, l.token, l.ttl, wv)
}

// leave takes w out of key's queue on n.
func (w *place) leave(ctx context.Context, n node.Node, key string) error {
	if w.loose {
		return n.LeaveWakeQueue(ctx, key, w.ID, wokenReserve)
	}
	return n.LeaveQueue(ctx, key, w.ID)
}

// leaveLate is an acquisition round's reply hook in fair mode: a node that
// refuses waiter w once its Lock call is over has it queued, and is told to
// drop it.
func (c *Client) leaveLate(key string, w *place, i int, r quorum.Reply[node.Acquired]) {
	if r.Done && r.Err == nil && !r.OK && w.over.Load() {
		c.spawn(func() { c.leaveOn(i, key, w) })
	}
}
