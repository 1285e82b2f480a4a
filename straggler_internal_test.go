package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestStragglerDoesNotAwaitItself: node 2's acquisition goroutine runs only
// after its own lock was released (held back here by its health record's
// mutex, as a loaded machine's scheduler may), so that the Release
// registered the lock's stragglers before that node's call asked
// awaitOwnRelease. It must not wait for its own answer (which it would until
// the round's deadline, then count a timeout against a healthy node): it
// waits only for the stragglers of locks created before it. Found by an
// adversarial review of the wait for stragglers.
func TestStragglerDoesNotAwaitItself(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var nodes []node.Node
	for _, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	replies := make(chan NodeReplyEvent, 4)
	c, err := New(nodes, WithNodeTimeout(2*time.Second), WithHooks(Hooks{OnNodeReply: func(e NodeReplyEvent) {
		if e.Op == "acquire" && e.Node == nodes[2].Name() {
			replies <- e
		}
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()

	var once sync.Once
	c.health[2].mu.Lock() // node 2's call waits at its breaker
	unlock := func() { once.Do(c.health[2].mu.Unlock) }
	defer unlock()
	l, err := c.Lock(ctx, "res")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	start := time.Now()
	unlock()
	select {
	case e := <-replies:
		require.NoError(t, e.Err, "node 2's acquisition, %v after its release", time.Since(start))
		require.Less(t, time.Since(start), time.Second, "node 2's acquisition waited for itself")
	case <-time.After(5 * time.Second):
		t.Fatal("node 2's acquisition did not answer")
	}
	require.Eventually(t, func() bool { return len(servers[2].Keys(l.key)) == 0 }, 5*time.Second, 5*time.Millisecond,
		"the straggler is undone")
}
