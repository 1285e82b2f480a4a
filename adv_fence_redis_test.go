package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

var errPartitioned = errors.New("partitioned (test)")

// gateNode: a client's link to one node. cut fails every call at once (a
// partition between that client and that node); holdRaise holds RaiseFence
// until released, and then sends it whatever the caller's context says (a
// command held up in the network, or in a paused client, still lands).
type gateNode struct {
	node.Node
	mu         sync.Mutex
	cut        bool
	holdRaise  chan struct{}
	raised     chan error
	holdCreate chan struct{}
	created    chan error
}

func (g *gateNode) CreateFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, bool, error) {
	g.mu.Lock()
	hold, cut := g.holdCreate, g.cut
	g.mu.Unlock()
	if hold != nil {
		go func() {
			<-hold
			_, _, err := g.Node.CreateFence(context.Background(), key, fenceKey, token, f)
			g.created <- err
		}()
		<-ctx.Done()
		return false, false, ctx.Err()
	}
	if cut {
		return false, false, errPartitioned
	}
	return g.Node.CreateFence(ctx, key, fenceKey, token, f)
}

func (g *gateNode) isCut() bool   { g.mu.Lock(); defer g.mu.Unlock(); return g.cut }
func (g *gateNode) setCut(v bool) { g.mu.Lock(); g.cut = v; g.mu.Unlock() }

func (g *gateNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	if g.isCut() {
		return node.Acquired{}, errPartitioned
	}
	return g.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

func (g *gateNode) WriteFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	if g.isCut() {
		return false, errPartitioned
	}
	return g.Node.WriteFence(ctx, key, fenceKey, token, f)
}

func (g *gateNode) RaiseFence(ctx context.Context, fenceKey string, f uint64) error {
	g.mu.Lock()
	hold, cut := g.holdRaise, g.cut
	g.mu.Unlock()
	if hold != nil {
		go func() {
			<-hold
			g.raised <- g.Node.RaiseFence(context.Background(), fenceKey, f)
		}()
		<-ctx.Done()
		return ctx.Err()
	}
	if cut {
		return errPartitioned
	}
	return g.Node.RaiseFence(ctx, fenceKey, f)
}

func (g *gateNode) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	if g.isCut() {
		return false, errPartitioned
	}
	return g.Node.Release(ctx, key, token, notify)
}

// TestAdvDelayedRaiseOnWipedNodeRedis: real Redis, N=3, three clients X, Y, Z
// (three processes). One node (n2) loses its data (FLUSHALL); no clock
// change, no lease runs out, every node is up. X's raise of n2 is held in the
// network past Y's write-back of a larger token on n2 and past the wipe.
func TestAdvDelayedRaiseOnWipedNodeRedis(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	newClient := func() (*redlock.Client, []*gateNode) {
		gs := make([]*gateNode, 3)
		ns := make([]node.Node, 3)
		for i, s := range servers {
			n, err := node.Dial(s.URL())
			require.NoError(t, err)
			gs[i] = &gateNode{Node: n}
			ns[i] = gs[i]
		}
		c, err := redlock.New(ns, redlock.WithNodeTimeout(300*time.Millisecond), redlock.WithBreaker(0))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c, gs
	}
	cx, gx := newClient()
	cy, gy := newClient()
	cz, gz := newClient()
	counters := func() []string {
		var out []string
		for _, s := range servers {
			v, err := redis.String(s.Do("GET", "redlock:{res}:fence"))
			if err == redis.ErrNil {
				v = "none"
			}
			out = append(out, v)
		}
		return out
	}

	// G0: every node gets counter 1.
	g0, err := cx.TryLock(ctx, "res", redlock.WithFence())
	require.NoError(t, err)
	require.NoError(t, g0.Release(ctx))
	t.Logf("after G0: counters %v", counters())

	// X cannot reach n2 when it acquires; its raise of n2 is then held up.
	gx[2].setCut(true)
	x, err := cx.TryLock(ctx, "res")
	require.NoError(t, err)
	release := make(chan struct{})
	gx[2].mu.Lock()
	gx[2].holdRaise, gx[2].raised = release, make(chan error, 1)
	gx[2].mu.Unlock()
	tokX, err := x.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, x.Release(ctx))
	t.Logf("X fenced %d; counters %v", tokX, counters())

	// Y cannot reach n0: it holds n1 and n2 and fences.
	gy[0].setCut(true)
	y, err := cy.TryLock(ctx, "res")
	require.NoError(t, err)
	tokY, err := y.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, y.Release(ctx))
	t.Logf("Y fenced %d; counters %v", tokY, counters())

	// n2 loses its data; X's held raise lands there.
	_, err = servers[2].Do("FLUSHALL")
	require.NoError(t, err)
	close(release)
	require.NoError(t, <-gx[2].raised)
	t.Logf("n2 wiped, X's raise landed: counters %v", counters())

	// Z cannot reach n1: it holds n0 and n2.
	gz[1].setCut(true)
	z, err := cz.TryLock(ctx, "res")
	require.NoError(t, err)
	tokZ, err := z.Fence(ctx)
	t.Logf("Z: token %d, err %v; counters %v", tokZ, err, counters())
	if err == nil {
		require.NotEqual(t, tokY, tokZ, "token %d granted to Y and to Z, and Z came after Y on n2", tokY)
	}
}

// TestAdvDelayedCreateOnWipedNodeRedis: as above, with the first token's
// creation (CreateFence) held on its way to n2 instead of a raise.
func TestAdvDelayedCreateOnWipedNodeRedis(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	newClient := func() (*redlock.Client, []*gateNode) {
		gs := make([]*gateNode, 3)
		ns := make([]node.Node, 3)
		for i, s := range servers {
			n, err := node.Dial(s.URL())
			require.NoError(t, err)
			gs[i] = &gateNode{Node: n}
			ns[i] = gs[i]
		}
		c, err := redlock.New(ns, redlock.WithNodeTimeout(300*time.Millisecond), redlock.WithBreaker(0))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c, gs
	}
	counters := func() []string {
		var out []string
		for _, s := range servers {
			v, err := redis.String(s.Do("GET", "redlock:{res}:fence"))
			if err == redis.ErrNil {
				v = "none"
			}
			out = append(out, v)
		}
		return out
	}
	cx, gx := newClient()
	cy1, _ := newClient()
	cy2, gy2 := newClient()
	cz, gz := newClient()

	// X: fresh resource, its creation on n2 is held up (X sees a timeout).
	release := make(chan struct{})
	gx[2].holdCreate, gx[2].created = release, make(chan error, 1)
	x, err := cx.TryLock(ctx, "res")
	require.NoError(t, err)
	tokX, err := x.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, x.Release(ctx))
	t.Logf("X fenced %d; counters %v", tokX, counters())

	// Y1: n2 is a suspect, repaired with Y1's token.
	y1, err := cy1.TryLock(ctx, "res")
	require.NoError(t, err)
	tokY1, err := y1.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, y1.Release(ctx))
	t.Logf("Y1 fenced %d; counters %v", tokY1, counters())

	// Y2 cannot reach n0.
	gy2[0].setCut(true)
	y2, err := cy2.TryLock(ctx, "res")
	require.NoError(t, err)
	tokY2, err := y2.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, y2.Release(ctx))
	t.Logf("Y2 fenced %d; counters %v", tokY2, counters())

	_, err = servers[2].Do("FLUSHALL")
	require.NoError(t, err)
	close(release)
	require.NoError(t, <-gx[2].created)
	t.Logf("n2 wiped, X's creation landed: counters %v", counters())

	gz[1].setCut(true)
	z, err := cz.TryLock(ctx, "res")
	require.NoError(t, err)
	tokZ, err := z.Fence(ctx)
	t.Logf("Z: token %d, err %v; counters %v", tokZ, err, counters())
	if err == nil {
		require.NotEqual(t, tokY2, tokZ, "token %d granted to Y2 and to Z, and Z came after Y2 on n2", tokY2)
	}
}

// TestAdvMinorityCounterStuck: the first Fence of a fresh resource reaches one
// node of three (the other two time out for that round only). No node loses
// anything; afterwards every node is up and answers. Is fencing available again?
func TestAdvMinorityCounterStuck(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	gs := make([]*gateNode, 3)
	ns := make([]node.Node, 3)
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		gs[i] = &gateNode{Node: n}
		ns[i] = gs[i]
	}
	c, err := redlock.New(ns, redlock.WithNodeTimeout(300*time.Millisecond), redlock.WithBreaker(0))
	require.NoError(t, err)
	defer c.Close()
	l, err := c.TryLock(ctx, "res")
	require.NoError(t, err)
	gs[1].setCut(true)
	gs[2].setCut(true)
	_, err = l.Fence(ctx)
	t.Logf("first Fence during the blip: %v", err)
	gs[1].setCut(false)
	gs[2].setCut(false)
	_ = l.Release(ctx)
	ok := 0
	for i := 0; i < 20; i++ {
		l, err := c.Lock(ctx, "res")
		require.NoError(t, err)
		if _, err := l.Fence(ctx); err == nil {
			ok++
		} else if i == 0 {
			t.Logf("later Fence: %v", err)
		}
		require.NoError(t, l.Release(ctx))
	}
	for i, s := range servers {
		v, _ := redis.String(s.Do("GET", "redlock:{res}:fence"))
		t.Logf("n%d counter %q", i, v)
	}
	require.Greater(t, ok, 0, "no Fence succeeded in 20 grants with every node up")
}
