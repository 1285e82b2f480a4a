package redlock

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Fair mode (WithFair): each Lock call is a waiter with a ticket, its
// wall-clock time when Lock was called, queued on every node beside the lock
// key (node.Queuer). A node grants the lock only to the head of its queue, so
// that all nodes, ordering waiters by the same tickets, grant it to the same
// waiter: no split votes and no barging. A waiter renews its place with every
// attempt; it leaves the queue of a node that grants it the lock, and the
// other queues when Lock returns; one that crashed is dropped once its lease
// (fairLease) runs out.

// fairLeaseMin is the least time a node keeps a silent waiter queued.
const fairLeaseMin = 2 * time.Second

// fairLease is how long the nodes keep a waiter queued without hearing from
// it: longer than two of its longest backoffs, since it renews its place with
// every attempt.
func fairLease(lc lockConfig) time.Duration { return fairLeaseMin + 2*lc.retryMax }

// releaseOn releases key on n; with notify in fair mode, through the node's
// queue, so that only the head waiter is woken. waiter is the id of the
// waiter the lock was granted to (fair mode), or empty: it leaves the queue.
func (c *Client) releaseOn(ctx context.Context, n node.Node, key, token, waiter string, notify bool) (bool, error) {
	if q, ok := n.(node.Queuer); ok && notify && c.cfg.fair {
		return q.ReleaseFair(ctx, key, token, waiter)
	}
	return n.Release(ctx, key, token, notify)
}

// place is a Lock call's place in the nodes' waiters' queues.
type place struct {
	node.Waiter
	// ahead is, after an attempt that failed, how many waiters a majority of
	// the nodes had queued before this one (each of them at least that
	// many): the next releases will wake them, not this one, which can wait
	// for its own wake-up rather than poll (see pace.backoff).
	ahead int
}

// newWaiterGroup returns a random name for a client's waiters.
func newWaiterGroup() string {
	g, err := newToken()
	if err != nil {
		g = Digest(time.Now().String()) // crypto/rand failed: uniqueness is all that matters here
	}
	return g
}

// newWaiter returns a fresh place in the queues, ticketed now. Its id,
// group/n, is unique; the client's waiters share the group, and so one wake-up
// channel per key (node.WaiterChannel): a client contending for a key again
// and again keeps its subscription (it lingers between Lock calls, see
// node.Watcher) instead of subscribing and unsubscribing every time. Its Lock
// calls on one key wait one at a time (enterQueue), so a wake-up on that
// channel is for the current one, or a stale one that costs an attempt.
func (c *Client) newWaiter(lc lockConfig) *place {
	id := c.waiterGroup + "/" + strconv.FormatInt(c.waiterSeq.Add(1), 10)
	return &place{Waiter: node.Waiter{ID: id, Ticket: time.Now().UnixMicro(), Lease: fairLease(lc)}}
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

// leaveQueue removes waiter id from key's queue on every node, in the
// background (a waiter that cannot be removed is dropped when its lease runs
// out); granted is the lock the waiter got, if it did: the nodes that granted
// it have dequeued it already, and those that refused it do so when the lock
// is released (ReleaseFair), before they wake the next waiter; until then
// nobody else can take the lock anyway.
func (c *Client) leaveQueue(key, id string, granted *Lock) {
	end, err := c.begin()
	if err != nil {
		return
	}
	defer end()
	var replies []quorum.Reply[node.Acquired]
	if granted != nil {
		replies = granted.acquire.Replies()
	}
	for i, n := range c.nodes {
		q, ok := n.(node.Queuer)
		if !ok || (replies != nil && replies[i].Done) {
			continue
		}
		c.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.nodeTimeout)
			defer cancel()
			if err := q.LeaveQueue(ctx, key, id); err != nil {
				c.log(ctx, slog.LevelDebug, "leaving the waiters' queue failed", key, "", "node", n.Name(), "err", err)
			}
		})
	}
}
