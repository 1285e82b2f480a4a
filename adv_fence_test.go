package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
)

// TestAdvDelayedRaiseOnWipedNode: one wiped node (n2), every node answers
// (stragglers only), no clock change, no lease runs out. A raise planned by X
// (token 2) is delayed on n2 past Y's write-back of 3 there and past n2's wipe;
// it re-creates n2's counter at 2. Z then plans from n0 (2: Y's raise to it is
// still in flight) and n2 (2) and takes 3 again.
func TestAdvDelayedRaiseOnWipedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		log := &writeLog{}
		nt := newMemNet(3)
		nodes := make([]*memNode, 3)
		ifaces := make([]node.Node, 3)
		for i := range nodes {
			nodes[i] = newMemNode(fmt.Sprintf("n%d", i), i, clk, log)
			nodes[i].net = nt
			ifaces[i] = nodes[i]
		}
		c, err := redlock.New(ifaces, redlock.WithClock(clk), redlock.WithTTL(100*time.Millisecond), redlock.WithBreaker(0))
		require.NoError(t, err)
		defer c.Close()
		ctx := context.Background()
		defer func() {
			t.Logf("trace:\n%s", strings.Join(log.trace, "\n"))
		}()
		step := func(s int, until ...int) { log.event("", "step %d", s); nt.hold(s, until) }

		// G0: a first fenced grant: every node has counter 1.
		step(0, 0, 0, 0)
		var g0 *redlock.Lock
		runOp(nt, log, func() { g0, err = c.TryLock(ctx, "res") })
		require.NoError(t, err)
		var tok0 uint64
		runOp(nt, log, func() { tok0, err = g0.Fence(ctx) })
		require.NoError(t, err)
		require.Equal(t, uint64(1), tok0)
		runOp(nt, log, func() { err = g0.Release(ctx) })
		require.NoError(t, err)

		// X: its acquisition on n2 straggles; X takes n0, n1, plans 2 and
		// raises n2, a straggler: that raise is delayed too.
		step(1, 0, 0, 200)
		var x *redlock.Lock
		runOp(nt, log, func() { x, err = c.TryLock(ctx, "res") })
		require.NoError(t, err)
		step(2, 0, 0, 50)
		var tokX uint64
		runOp(nt, log, func() { tokX, err = x.Fence(ctx) })
		require.NoError(t, err)
		require.Equal(t, uint64(2), tokX)
		step(3, 0, 0, 0)
		runOp(nt, log, func() { err = x.Release(ctx) })
		require.NoError(t, err)

		// Y: its acquisition on n0 straggles; Y takes n1 (2) and n2 (1),
		// fences 3 on both; its raise of n0 is delayed.
		step(4, 200, 0, 0)
		var y *redlock.Lock
		runOp(nt, log, func() { y, err = c.TryLock(ctx, "res") })
		require.NoError(t, err)
		var tokY uint64
		runOp(nt, log, func() { tokY, err = y.Fence(ctx) })
		require.NoError(t, err)
		require.Equal(t, uint64(3), tokY)
		step(5, 0, 0, 0)
		runOp(nt, log, func() { err = y.Release(ctx) })
		require.NoError(t, err)

		// n2 loses its data (the only wiped node); then X's raise lands there.
		nodes[2].wipe()
		step(50, 0, 0, 0)
		nt.deliver(50, log)

		// Z: its acquisition on n1 (counter 3) straggles; Z takes n0 and n2.
		step(51, 0, 300, 0)
		var z *redlock.Lock
		runOp(nt, log, func() { z, err = c.TryLock(ctx, "res") })
		require.NoError(t, err)
		var tokZ uint64
		runOp(nt, log, func() { tokZ, err = z.Fence(ctx) })
		step(400, 0, 0, 0)
		nt.deliver(-1, log)
		grants := []grant{{g0.Token(), tok0}, {x.Token(), tokX}, {y.Token(), tokY}}
		if err == nil {
			log.event("", "Z fenced %d", tokZ)
			grants = append(grants, grant{z.Token(), tokZ})
		} else {
			log.event("", "Z: %v", err)
		}
		require.NoError(t, checkFences(grants, log))
	})
}
