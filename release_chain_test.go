package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// lateNode holds its first acquisition, plain or write, until let is
// closed, then sends it (or, with refuse set, refuses it) and closes
// acquired; with holdUndo set, it holds its first release too (that
// acquisition's undo, when its lock was released meanwhile) until undoLet is
// closed, closing undoing when it arrives.
type lateNode struct {
	node.Node
	refuse, holdUndo   bool
	acquires, releases atomic.Int32
	let, acquired      chan struct{}
	undoLet, undoing   chan struct{}
}

func newLateNode(n node.Node, holdUndo bool) *lateNode {
	return &lateNode{Node: n, holdUndo: holdUndo, let: make(chan struct{}), acquired: make(chan struct{}),
		undoLet: make(chan struct{}), undoing: make(chan struct{})}
}

// late holds the first acquisition; first tells whether this was it.
func (n *lateNode) late(ctx context.Context) (first bool, err error) {
	if n.acquires.Add(1) != 1 {
		return false, nil
	}
	select {
	case <-n.let:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

func (n *lateNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	first, err := n.late(ctx)
	if err != nil || first && n.refuse {
		return node.Acquired{}, err
	}
	if first {
		defer close(n.acquired)
	}
	return n.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

func (n *lateNode) AcquireWrite(ctx context.Context, key, fenceKey, token string, ttl time.Duration, writer string, mark time.Duration) (node.Acquired, error) {
	first, err := n.late(ctx)
	if err != nil || first && n.refuse {
		return node.Acquired{}, err
	}
	if first {
		defer close(n.acquired)
	}
	return n.Node.AcquireWrite(ctx, key, fenceKey, token, ttl, writer, mark)
}

func (n *lateNode) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (bool, bool, error) {
	if n.holdUndo && n.releases.Add(1) == 1 {
		close(n.undoing)
		select {
		case <-n.undoLet:
		case <-ctx.Done():
			return false, false, ctx.Err()
		}
	}
	return n.Node.ReleaseFair(ctx, key, token, waiter, tell)
}

// slowReadReleaseNode holds ReleaseRead until let.
type slowReadReleaseNode struct {
	node.Node
	let chan struct{}
}

func (n *slowReadReleaseNode) ReleaseRead(ctx context.Context, key, token string, notify bool) (bool, error) {
	select {
	case <-n.let:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return n.Node.ReleaseRead(ctx, key, token, notify)
}

// TestLaterReleaseKeepsStragglerAwaited: a write lock W is released while
// its acquisition on node 4 is in flight; that straggler lands, and its undo
// is held. A read lock's release, returned before its last node answered,
// is recorded after W's: the next write acquisition must still wait on node
// 4 for W's undo (a version that kept only the last release of a resource
// sent it, and node 4 refused it with the client's own key). Found by an
// adversarial review.
func TestLaterReleaseKeepsStragglerAwaited(t *testing.T) {
	servers := redistest.StartN(t, 5)
	dial := dialer(t, servers)
	n4 := newLateNode(dial(4), true)
	n3 := &slowReadReleaseNode{Node: dial(3), let: make(chan struct{})}
	var stage atomic.Int32
	replies4 := make(chan redlock.NodeReplyEvent, 8)
	acq := make(chan struct{}, 32)
	c, err := redlock.New([]node.Node{dial(0), dial(1), dial(2), n3, n4}, redlock.WithNodeTimeout(5*time.Second),
		redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
			if e.Op != "acquire" {
				return
			}
			if e.Node == n4.Name() && stage.Load() == 1 {
				replies4 <- e
			}
			acq <- struct{}{}
		}}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	defer close(n3.let)
	defer close(n4.undoLet)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	w, err := c.WLock(ctx, "res")
	require.NoError(t, err)
	for range 4 { // nodes 0-3 answered
		<-acq
	}
	require.NoError(t, w.Release(ctx))
	close(n4.let) // W's straggler lands on node 4; its undo is held
	<-n4.undoing
	<-acq
	key := redlock.LockKey(redlock.DefaultKeyPrefix, "res")
	require.Len(t, servers[4].Keys(key), 1, "W's straggler holds node 4")

	r, err := c.RLock(ctx, "res") // its call on node 4 waits for W's undo
	require.NoError(t, err)
	for range 4 {
		<-acq
	}
	require.NoError(t, r.Release(ctx)) // node 3's release held: returns with it in flight

	stage.Store(1)
	x, err := c.TryWLock(ctx, "res")
	require.NoError(t, err)
	defer x.Release(ctx)
	select {
	case e := <-replies4:
		t.Fatalf("the next write acquisition was sent to node 4 before W's undo returned: ok=%v err=%v (W's key still there: %d)",
			e.OK, e.Err, len(servers[4].Keys(key)))
	case <-time.After(300 * time.Millisecond):
	}
}

// TestNextLockAwaitsOwnStraggler: a lock is released while its acquisition
// on node 2 is in flight; that acquisition lands (the key is the client's
// again there) and its undo is held. The client's next Lock of the resource
// is granted by nodes 0 and 1; its call on node 2 must wait for the undo and
// then be granted there too, not be sent at once and refused by the
// client's own key (which looks like contention: an early split vote, a
// resource marked contended).
func TestNextLockAwaitsOwnStraggler(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dial := dialer(t, servers)
	late := newLateNode(dial(2), true)
	replies, hook := acquireReplies(late)
	c, err := redlock.New([]node.Node{dial(0), dial(1), late}, redlock.WithNodeTimeout(5*time.Second), hook)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := func() redlock.NodeReplyEvent {
		t.Helper()
		select {
		case e := <-replies:
			return e
		case <-ctx.Done():
			t.Fatal("node 2 did not answer")
		}
		return redlock.NodeReplyEvent{}
	}

	l, err := c.Lock(ctx, "res")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	close(late.let) // the straggler lands
	require.True(t, next().OK, "the straggler took node 2")
	<-late.undoing // its undo, held

	l2, err := c.Lock(ctx, "res") // nodes 0 and 1; node 2's call waits
	require.NoError(t, err)
	defer l2.Release(ctx)
	select {
	case e := <-replies:
		t.Fatalf("the next acquisition was sent to node 2 before the undo returned: ok=%v err=%v", e.OK, e.Err)
	case <-time.After(300 * time.Millisecond):
	}
	close(late.undoLet)
	e := next()
	require.NoError(t, e.Err)
	require.True(t, e.OK, "node 2 granted the next acquisition once the straggler was undone")
}
