package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// lazyNode is Y's link to one node in TestFenceLazyRepairWaitsForTrustedMajority:
//   - holdAcq: the next Acquire is held in the network: the caller sees its
//     deadline, the SET is sent when released (lands whatever the caller does).
//   - readBefore: ReadFence is held on its way to the node until closed.
//   - readAfter: ReadFence runs at once, its reply is held until closed.
type lazyNode struct {
	node.Node
	mu         sync.Mutex
	holdAcq    chan struct{}
	acqLanded  chan struct{}
	readBefore chan struct{}
	readAfter  chan struct{}
	readRan    chan struct{}
}

func (a *lazyNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	a.mu.Lock()
	hold := a.holdAcq
	a.holdAcq = nil
	a.mu.Unlock()
	if hold == nil {
		return a.Node.Acquire(ctx, key, fenceKey, token, ttl)
	}
	go func() {
		<-hold
		a.Node.Acquire(context.Background(), key, fenceKey, token, ttl)
		close(a.acqLanded)
	}()
	<-ctx.Done()
	return node.Acquired{}, ctx.Err()
}

func (a *lazyNode) ReadFence(ctx context.Context, key, fenceKey, token string) (node.Acquired, error) {
	if a.readBefore != nil {
		<-a.readBefore
	}
	r, err := a.Node.ReadFence(ctx, key, fenceKey, token)
	if a.readRan != nil {
		close(a.readRan)
	}
	if a.readAfter != nil {
		<-a.readAfter
	}
	return r, err
}

// TestFenceLazyRepairWaitsForTrustedMajority (found by an adversarial review
// of the lazy fence read, 38f68d0): N=3 (a, b, c); c is wiped once; no clock
// fault; every key expires at its TTL. Y locks lazily (a, b; its SET on c is
// held in the network). Y's Fence reads a and b inside its lock (counter 1),
// and their replies are slow. Y's keys expire; W fences 2 on all; X1, X2 (cut
// from b) fence 3, 4 on a and c. c is wiped. Y's held SET lands on c; Y's read
// of c (held, no counter) makes c a suspect. Y's plan is T_Y = 2, and its
// write-back is refused on a and b (its keys are gone there). When the repair
// of c went out in the same round as the trusted writes, c got 2 although it
// had accepted X2's 4, and Z (cut from a) then trusted b and c and fenced 3,
// after X2's 4 on c. A repair now goes out only once the trusted write-back
// reached a majority (docs/fencing.md §6, the repair lemma): here it never
// does, c keeps no counter, and Z cannot fence (or gets more than 4).
func TestFenceLazyRepairWaitsForTrustedMajority(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const res, key, fenceKey = "res", "redlock:{res}", "redlock:{res}:fence"
	for _, s := range servers {
		_, err := s.Do("SET", fenceKey, "1")
		require.NoError(t, err)
	}

	ys := make([]*lazyNode, 3)
	yn := make([]node.Node, 3)
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		ys[i] = &lazyNode{Node: n}
		yn[i] = ys[i]
	}
	cy, err := redlock.New(yn, redlock.WithNodeTimeout(10*time.Second), redlock.WithBreaker(0))
	require.NoError(t, err)
	defer cy.Close()
	cw, _ := newGatedClient(t, servers)
	cx, gx := newGatedClient(t, servers)
	cz, gz := newGatedClient(t, servers)

	// Y: its SET on c held in the network.
	ys[2].holdAcq, ys[2].acqLanded = make(chan struct{}), make(chan struct{})
	sendC := ys[2].holdAcq
	ys[0].readAfter, ys[0].readRan = make(chan struct{}), make(chan struct{})
	ys[1].readAfter, ys[1].readRan = make(chan struct{}), make(chan struct{})
	ys[2].readBefore, ys[2].readRan = make(chan struct{}), make(chan struct{})
	y, err := cy.TryLock(ctx, res, redlock.WithLockTTL(500*time.Millisecond))
	require.NoError(t, err, "Y holds a and b")
	type result struct {
		tok uint64
		err error
	}
	yDone := make(chan result, 1)
	go func() { tok, err := y.Fence(ctx); yDone <- result{tok, err} }()
	for _, i := range []int{0, 1} {
		// Not a bare receive: a Fence that starts only once Y's 500 ms lease
		// is over (a stall) reads nothing, and the test would hang until
		// go test's timeout (a flake audit, 6 December 2026).
		select {
		case <-ys[i].readRan:
		case r := <-yDone:
			t.Fatalf("Y's Fence returned (%d, %v) before reading node %d: the precondition (Y fencing within its lease) was not met", r.tok, r.err, i)
		case <-ctx.Done():
			t.Fatalf("Y's Fence never read node %d", i)
		}
	}

	// Y's keys expire at their TTL.
	for _, i := range []int{0, 1} {
		require.Eventually(t, func() bool {
			n, err := redis.Int(servers[i].Do("EXISTS", key))
			return err == nil && n == 0
		}, 5*time.Second, time.Millisecond)
	}

	w, tokW, err := fenced(t, ctx, cw, res)
	require.NoError(t, err)
	release(t, ctx, servers, w)
	t.Logf("W token %d, counters %v", tokW, counters(t, servers, fenceKey))

	gx[1].setCut(true)
	var tokX uint64
	for k := 0; k < 2; k++ {
		x, tok, err := fenced(t, ctx, cx, res)
		require.NoError(t, err)
		tokX = tok
		release(t, ctx, servers, x)
		t.Logf("X%d token %d (a, c), counters %v", k+1, tok, counters(t, servers, fenceKey))
	}
	gx[1].setCut(false)

	_, err = servers[2].Do("FLUSHALL")
	require.NoError(t, err)

	close(sendC)
	<-ys[2].acqLanded
	held, err := redis.String(servers[2].Do("GET", key))
	require.NoError(t, err)
	require.Equal(t, y.Token(), held, "Y's delayed SET landed on c")
	close(ys[2].readBefore)
	<-ys[2].readRan
	close(ys[0].readAfter)
	close(ys[1].readAfter)
	r := <-yDone
	require.ErrorIs(t, r.err, redlock.ErrLockLost, "Y's keys on a and b are gone")
	require.NoError(t, cy.Close()) // waits for Y's calls still in flight
	require.Equal(t, "none", counters(t, servers, fenceKey)[2],
		"a failed write-back repaired c below the 4 it accepted: counters %v", counters(t, servers, fenceKey))
	require.Eventually(t, func() bool {
		n, err := redis.Int(servers[2].Do("EXISTS", key))
		return err == nil && n == 0
	}, 5*time.Second, time.Millisecond)

	gz[0].setCut(true)
	z, err := cz.lock(t, ctx, res)
	require.NoError(t, err)
	tokZ, err := z.Fence(ctx)
	t.Logf("Z (b, c): token %d, err %v, counters %v", tokZ, err, counters(t, servers, fenceKey))
	_ = z.Release(ctx)
	if err == nil {
		require.Greater(t, tokZ, tokX, "Z came after X2 on c")
	} else {
		// b is the one trusted node, c a suspect, and a (cut) may have
		// the counter (it has 4): unavailable, not an operator's case.
		require.ErrorIs(t, err, redlock.ErrUnavailable)
		require.ErrorContains(t, err, "too few nodes answered")
	}
}
