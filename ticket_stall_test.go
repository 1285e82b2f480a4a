package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// A fair waiter older than TicketBound that one node dropped (its lease
// lapsed while the node was paused) takes a new ticket when that node
// refuses its old one, so that every node orders it alike: with another node
// down, the two left still agree on a head, and the free lock is granted.
func TestFairLostWaiterDoesNotStall(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	dial := func(nodeTimeout time.Duration) *redlock.Client {
		c, err := redlock.Dial(redistest.URLs(servers), redlock.WithFair(), redlock.WithTTL(time.Minute),
			redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// The holder's node timeout is long: its release must land on B and C
	// (a release timed out under load left C locked for the TTL, a minute,
	// in a CI run); the waiters' is short, as the scenario needs.
	hc, wc, xc := dial(2*time.Second), dial(200*time.Millisecond), dial(200*time.Millisecond)
	held, err := hc.Lock(ctx, "stall")
	require.NoError(t, err)

	type res struct {
		who string
		at  time.Time
		err error
	}
	got := make(chan res, 2)
	queued := func(n int) {
		q, _ := node.QueueKeys(redlock.LockKey(redlock.DefaultKeyPrefix, "stall"))
		for _, s := range servers {
			require.Eventually(t, func() bool {
				c, err := redis.Int(s.Do("ZCARD", q))
				return err == nil && c == n
			}, 10*time.Second, time.Millisecond)
		}
	}
	go func() { l, err := wc.Lock(ctx, "stall"); got <- res{"W", time.Now(), err}; _ = l }()
	queued(1) // W queued on all three nodes
	servers[2].Pause()
	time.Sleep(3 * time.Second) // > fairLease (2.2 s): C drops W when it resumes; W's ticket is 3 s old
	servers[2].Resume()
	time.Sleep(500 * time.Millisecond)
	go func() { l, err := xc.Lock(ctx, "stall"); got <- res{"X", time.Now(), err}; _ = l }()
	queued(2)         // X queued on all three (W again on C, with a new ticket)
	servers[0].Kill() // a minority down: Redlock must stay live
	start := time.Now()
	// Not asserted: with node 0 down, the release reaches a majority only if
	// the holder's key landed on C (its SET may have outlived the node
	// timeout and been undone); either way the lock is free on B and C.
	relErr := held.Release(ctx)
	select {
	case r := <-got:
		t.Logf("%s acquired after %v (err %v)", r.who, r.at.Sub(start), r.err)
		require.NoError(t, r.err)
	case <-time.After(8 * time.Second):
		t.Logf("holder's release: %v", relErr)
		for _, i := range []int{1, 2} {
			conn, err := servers[i].Dial()
			require.NoError(t, err)
			keys, _ := redis.Strings(conn.Do("KEYS", "*"))
			for _, k := range keys {
				typ, _ := redis.String(conn.Do("TYPE", k))
				pttl, _ := redis.Int64(conn.Do("PTTL", k))
				var v any
				switch typ {
				case "zset":
					v, _ = redis.Strings(conn.Do("ZRANGE", k, 0, -1, "WITHSCORES"))
				case "string":
					v, _ = redis.String(conn.Do("GET", k))
				}
				t.Logf("node %d %s (%s, pttl %d ms): %v", i, k, typ, pttl, v)
			}
			conn.Close()
		}
		t.Fatalf("stall: nobody acquired the free lock within 8 s with 2 of 3 nodes up")
	}
}
