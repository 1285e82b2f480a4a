package redlock

import (
	"context"
	"log/slog"
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
// queue, so that only the head waiter is woken.
func (c *Client) releaseOn(ctx context.Context, n node.Node, key, token string, notify bool) (bool, error) {
	if q, ok := n.(node.Queuer); ok && notify && c.cfg.fair {
		return q.ReleaseFair(ctx, key, token)
	}
	return n.Release(ctx, key, token, notify)
}

// newWaiter returns a fresh place in the queues, ticketed now.
func (c *Client) newWaiter(lc lockConfig) *node.Waiter {
	id, err := newToken()
	if err != nil {
		id = Digest(time.Now().String()) // crypto/rand failed: uniqueness is all that matters here
	}
	return &node.Waiter{ID: id, Ticket: time.Now().UnixMicro(), Lease: fairLease(lc)}
}

// leaveQueue removes waiter id from key's queue on every node, in the
// background (a waiter that cannot be removed is dropped when its lease runs
// out); granted is the lock the waiter got, if it did: the nodes that granted
// it have dequeued it already.
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
		if !ok || (replies != nil && replies[i].Yes()) {
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
