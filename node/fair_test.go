package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// The waiters' queue serves the lowest ticket first, whatever the order of
// arrival; a waiter that leaves, or whose lease runs out, gives its turn.
func TestFairQueue(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const key, fence = "redlock:{q}", "redlock:{q}:fence"
	late := node.Waiter{ID: "late", Ticket: 200, Lease: time.Minute}
	early := node.Waiter{ID: "early", Ticket: 100, Lease: time.Minute}
	crashed := node.Waiter{ID: "crashed", Ticket: 50, Lease: 50 * time.Millisecond}

	q, qx := node.QueueKeys(key)
	queued := func() []string {
		members, err := redis.Strings(s.Do("ZRANGE", q, 0, -1))
		require.NoError(t, err)
		return members
	}
	a, err := n.AcquireFair(ctx, key, fence, "t-late", time.Minute, late)
	require.NoError(t, err)
	require.True(t, a.OK, "alone in the queue: its turn")
	assert.Empty(t, queued(), "a granted waiter leaves the queue")
	_, err = n.Release(ctx, key, "t-late", false)
	require.NoError(t, err)

	// early and late both queued, late first: early has the lower ticket.
	a, err = n.AcquireFair(ctx, key, fence, "t-early", time.Minute, early)
	require.NoError(t, err)
	require.True(t, a.OK)
	a, err = n.AcquireFair(ctx, key, fence, "t-late", time.Minute, late)
	require.NoError(t, err)
	require.False(t, a.OK, "held")
	a, err = n.AcquireFair(ctx, key, fence, "t-early2", time.Minute, early)
	require.NoError(t, err)
	require.False(t, a.OK, "held")
	_, err = n.Release(ctx, key, "t-early", false)
	require.NoError(t, err)
	a, err = n.AcquireFair(ctx, key, fence, "t-late", time.Minute, late)
	require.NoError(t, err)
	require.False(t, a.OK, "early is queued ahead, though it came after")
	require.NoError(t, n.LeaveQueue(ctx, key, early.ID))
	a, err = n.AcquireFair(ctx, key, fence, "t-late", time.Minute, late)
	require.NoError(t, err)
	require.True(t, a.OK, "early left")
	_, err = n.Release(ctx, key, "t-late", false)
	require.NoError(t, err)

	// crashed queues (the lock is held), then never comes back: once the lock
	// is free, late waits until crashed's lease runs out.
	a, err = n.AcquireFair(ctx, key, fence, "t-early", time.Minute, early)
	require.NoError(t, err)
	require.True(t, a.OK)
	a, err = n.AcquireFair(ctx, key, fence, "t-crashed", time.Minute, crashed)
	require.NoError(t, err)
	require.False(t, a.OK)
	_, err = n.Release(ctx, key, "t-early", false)
	require.NoError(t, err)
	for {
		a, err = n.AcquireFair(ctx, key, fence, "t-late", time.Minute, late)
		require.NoError(t, err)
		if a.OK {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the crashed waiter's lease never ran out")
		case <-time.After(10 * time.Millisecond): // polling, as a waiter does
		}
	}
	assert.Empty(t, queued())
	require.NoError(t, n.LeaveQueue(ctx, key, late.ID))
	ttl, err := redis.Int64(s.Do("PTTL", qx))
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, int64(-2), "empty queues are gone")
}
