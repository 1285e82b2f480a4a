package redlock_test

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

// A queued waiter cannot walk its ticket back: a node moves it only to a
// ticket within node.TicketBound of its own clock, so a client that sends a
// ticket a second lower at each attempt stays within the bound of the node's
// clock, and never gets ahead of waiters that came more than the bound before.
func TestTicketWalk(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	defer n.Close()
	ctx := context.Background()
	sec := time.Second.Microseconds()
	conn, err := s.Dial()
	require.NoError(t, err)
	defer conn.Close()
	for _, mode := range []string{"fair"} {
		key := "redlock:{walk-" + mode + "}"
		acq := func(tok string, w node.Waiter) node.Acquired {
			var a node.Acquired
			var err error
			a, err = n.AcquireFair(ctx, key, key+":fence", tok, time.Minute, w)
			require.NoError(t, err)
			return a
		}
		// stored returns late/1's ticket as the node keeps it.
		stored := func() int64 {
			q, _ := node.QueueKeys(key)
			v, err := redis.Int64(conn.Do("ZSCORE", q, "late/1"))
			require.NoError(t, err)
			return v
		}
		now := time.Now().UnixMicro()
		require.True(t, acq("h", node.Waiter{ID: "h/1", Ticket: now, Lease: time.Minute}).OK)
		late := node.Waiter{ID: "late/1", Ticket: now, Lease: time.Minute}
		a := acq("l", late)
		require.Equal(t, node.Queued, a.Queue)
		for range 5 {
			late.Ticket -= sec
			a = acq("l", late)
			assert.Equal(t, node.Queued, a.Queue, "%s: a refused move keeps the place", mode)
			assert.GreaterOrEqual(t, stored(), a.Clock-node.TicketBound.Microseconds(), "%s: walked beyond the bound", mode)
		}
	}
}
