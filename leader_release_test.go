package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// dialer returns a function that dials servers[i] as a node, closed at the
// test's end.
func dialer(t *testing.T, servers []*redistest.Server) func(i int) node.Node {
	return func(i int) node.Node {
		n, err := node.Dial(servers[i].URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		return n
	}
}

// acquireReplies returns a channel that receives n's answers to
// acquisitions, and the option that sends them there.
func acquireReplies(n node.Node) (<-chan redlock.NodeReplyEvent, redlock.Option) {
	replies := make(chan redlock.NodeReplyEvent, 8)
	return replies, redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
		if e.Op == "acquire" && e.Node == n.Name() {
			replies <- e
		}
	}})
}

// readSignalNode is a slowReleaseNode (release_inflight_test.go) that tells
// read once its ReadMeta answered.
type readSignalNode struct {
	*slowReleaseNode
	read chan struct{}
}

func (n *readSignalNode) ReadMeta(ctx context.Context, key string) (node.Meta, bool, error) {
	defer close(n.read)
	return n.slowReleaseNode.ReadMeta(ctx, key)
}

// afterReadNode answers ReadMeta only once another node's ReadMeta answered:
// the majority of a Leader read then includes that node.
type afterReadNode struct {
	node.Node
	after <-chan struct{}
}

func (n *afterReadNode) ReadMeta(ctx context.Context, key string) (node.Meta, bool, error) {
	select {
	case <-n.after:
	case <-ctx.Done():
		return node.Meta{}, false, ctx.Err()
	}
	return n.Node.ReadMeta(ctx, key)
}

// TestLeaderAfterOwnRelease: Release returns once a majority released; the
// third node's release is still on its way (held) when the same client asks
// Leader, whose majority is made to include that node. Leader must not
// report the client's own released lock as held (ExampleWithMetadata printed
// "false" in a CI run): its read of that node waits for the client's own
// release there. Before the fix it returned the holder's record at once.
func TestLeaderAfterOwnRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dial := dialer(t, servers)
	slow := &readSignalNode{slowReleaseNode: &slowReleaseNode{Node: dial(2), let: make(chan struct{})}, read: make(chan struct{})}
	nodes := []node.Node{dial(0), &afterReadNode{Node: dial(1), after: slow.read}, slow}
	acquired := make(chan struct{}, 3)
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(5*time.Second), redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
		if e.Op == "acquire" {
			acquired <- struct{}{}
		}
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := c.Lock(ctx, "report", redlock.WithMetadata("host-1"))
	require.NoError(t, err)
	// Every node answered the acquisition before the release: a node whose
	// acquisition is still in flight at Release is released as it lands
	// (undoStraggler: TestLeaderAfterOwnReleaseOfStraggler).
	for range nodes {
		<-acquired
	}
	require.NoError(t, l.Release(ctx), "a majority released")

	li, err := leaderLetting(ctx, c, "report", slow.let) // Leader waits for our release on the third node
	require.Truef(t, errors.Is(err, redlock.ErrNoLeader), "Leader after our own release: %+v, %v", li, err)
}

// leaderLetting asks c for name's leader, and closes let (a held release)
// when Leader returned, or after 300 ms if it waits: a Leader that waits for
// that release then returns once it landed.
func leaderLetting(ctx context.Context, c *redlock.Client, name string, let chan struct{}) (redlock.LeaderInfo, error) {
	type result struct {
		li  redlock.LeaderInfo
		err error
	}
	done := make(chan result, 1)
	go func() {
		li, err := c.Leader(ctx, name)
		done <- result{li, err}
	}()
	var r result
	select {
	case r = <-done:
		close(let)
	case <-time.After(300 * time.Millisecond):
		close(let)
		r = <-done
	}
	return r.li, r.err
}

// stragglerNode is a lateNode (release_chain_test.go) that holds its undo,
// writes a holder's record only once its acquisition returned (as on one
// connection, in order), and closes read once its ReadMeta answered.
type stragglerNode struct {
	*lateNode
	read chan struct{}
}

func (n *stragglerNode) WriteMeta(ctx context.Context, key, token string, m node.Meta, ttl time.Duration) (bool, error) {
	select {
	case <-n.acquired:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return n.lateNode.WriteMeta(ctx, key, token, m, ttl)
}

func (n *stragglerNode) ReadMeta(ctx context.Context, key string) (node.Meta, bool, error) {
	defer close(n.read)
	return n.lateNode.ReadMeta(ctx, key)
}

// TestLeaderAfterOwnReleaseOfStraggler: the third node's acquisition is
// still in flight when Lock returns and when the lock is released (Release
// asks only the nodes that answered: the third releases itself as its
// acquisition lands, undoStraggler). It lands after the Release, with the
// holder's record, and its undo is held when the same client asks Leader,
// whose majority is made to include that node. Leader must wait for that
// undo, as for its own release: it reported the released holder in a CI run
// (TestWithMetadata, 5 December 2026), when the machine was so loaded that a
// node's acquisition was sent after the release.
func TestLeaderAfterOwnReleaseOfStraggler(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dial := dialer(t, servers)
	slow := &stragglerNode{lateNode: newLateNode(dial(2), true), read: make(chan struct{})}
	nodes := []node.Node{dial(0), &afterReadNode{Node: dial(1), after: slow.read}, slow}
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := c.Lock(ctx, "report", redlock.WithMetadata("host-1"))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx), "a majority released")
	close(slow.let) // the third node's acquisition lands now, then the record
	select {
	case <-slow.undoing: // its undo, held
	case <-ctx.Done():
		t.Fatal("the straggler was not released")
	}
	key := redlock.LockKey(redlock.DefaultKeyPrefix, "report")
	require.Len(t, servers[2].Keys(key), 1, "the straggler holds the third node")

	li, err := leaderLetting(ctx, c, "report", slow.undoLet) // Leader waits for the undo
	require.Truef(t, errors.Is(err, redlock.ErrNoLeader), "Leader after our own release: %+v, %v", li, err)
}

// TestWriteStragglerRefusedWakes: a write lock released while its third
// node's acquisition was in flight; the next write acquisition's call on
// that node waits for the straggler (awaitUndo), which lands refused:
// nothing to undo, and the wait must end at once, not at the deadline (a
// version of the wait that was woken by the plain and queued rounds' reply
// callbacks missed the write round's). Found by an adversarial review.
func TestWriteStragglerRefusedWakes(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dial := dialer(t, servers)
	slow := newLateNode(dial(2), false)
	slow.refuse = true
	replies, hook := acquireReplies(slow)
	c, err := redlock.New([]node.Node{dial(0), dial(1), slow}, redlock.WithNodeTimeout(3*time.Second), hook)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := c.WLock(ctx, "res")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	next, err := c.WLock(ctx, "res") // granted by nodes 0 and 1; its call on node 2 waits
	require.NoError(t, err)
	defer next.Release(ctx)
	close(slow.let) // the straggler lands, refused
	start := time.Now()
	for range 2 {
		select {
		case e := <-replies:
			require.NoError(t, e.Err)
		case <-ctx.Done():
			t.Fatal("node 2 did not answer both write acquisitions")
		}
	}
	require.Less(t, time.Since(start), time.Second, "the second write acquisition on node 2 waited for its deadline")
}
