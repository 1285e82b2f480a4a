package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// slowReleaseNode holds its releases until let is closed.
type slowReleaseNode struct {
	node.Node
	let chan struct{}
}

func (n *slowReleaseNode) hold(ctx context.Context) error {
	select {
	case <-n.let:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *slowReleaseNode) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	if err := n.hold(ctx); err != nil {
		return false, err
	}
	return n.Node.Release(ctx, key, token, notify)
}

func (n *slowReleaseNode) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (bool, bool, error) {
	if err := n.hold(ctx); err != nil {
		return false, false, err
	}
	return n.Node.ReleaseFair(ctx, key, token, waiter, tell)
}

// TestNextAttemptAwaitsOwnRelease: Release returns once a majority released.
// The same client's next attempt on the resource waits for the last node's
// release to land, instead of being refused there by its own key (a bench run
// under load saw the refusal mark an uncontended resource contended, and every
// Lock call then queue: twice the commands). Each case's attempt must be
// granted by all three nodes.
func TestNextAttemptAwaitsOwnRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	for _, tc := range []struct {
		name string
		next func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error)
	}{
		{"TryLock", func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) { return c.TryLock(ctx, "own") }},
		{"Lock", func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) { return c.Lock(ctx, "own") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			slow := &slowReleaseNode{let: make(chan struct{})}
			ns := make([]node.Node, len(servers))
			for i, s := range servers {
				n, err := node.Dial(s.URL())
				require.NoError(t, err)
				t.Cleanup(func() { _ = n.Close() })
				ns[i] = n
			}
			slow.Node, ns[2] = ns[2], slow
			var mu sync.Mutex
			granted := map[string]bool{}
			c, err := redlock.New(ns, redlock.WithNodeTimeout(5*time.Second), redlock.WithBreaker(0),
				redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
					if e.Op == "acquire" {
						mu.Lock()
						granted[e.Node] = e.OK
						mu.Unlock()
					}
				}}))
			require.NoError(t, err)
			defer c.Close()

			l, err := c.Lock(ctx, "own")
			require.NoError(t, err)
			require.Eventually(t, func() bool { // every node's grant is in: each is released now
				mu.Lock()
				defer mu.Unlock()
				return len(granted) == 3
			}, 5*time.Second, time.Millisecond)
			require.NoError(t, l.Release(ctx)) // n0 and n1 released; n2's release is held
			let := time.AfterFunc(200*time.Millisecond, func() { close(slow.let) })
			defer let.Stop()
			mu.Lock()
			clear(granted)
			mu.Unlock()
			l, err = tc.next(ctx, c)
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Release(ctx)) }()
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(granted) == 3
			}, 5*time.Second, time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			for name, ok := range granted {
				require.True(t, ok, "node %s refused the client's attempt: its own release had not landed", name)
			}
		})
	}
}

// TestOwnReleaseWaitsOnlyOnItsNode: with a minority node paused, every
// release leaves that node's answer pending; the next attempt's call to that
// node waits for it, the others do not, so Lock keeps its speed (found by an
// adversarial review: a first version made the whole attempt wait for every
// node of the release, the node timeout per Lock while a node was paused).
// TTL shorter than the node timeout, breakers on and off.
func TestOwnReleaseWaitsOnlyOnItsNode(t *testing.T) {
	for _, breaker := range []int{redlock.DefaultBreakerFailures, 0} {
		t.Run(fmt.Sprintf("breaker=%d", breaker), func(t *testing.T) {
			s := redistest.StartN(t, 3)
			const ttl, timeout = 300 * time.Millisecond, 2 * time.Second
			c, err := redlock.New(nodesOf(t, redistest.URLs(s)...), redlock.WithNodeTimeout(timeout),
				redlock.WithBreaker(breaker), redlock.WithTTL(ttl))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			s[2].Pause()
			defer s[2].Resume()
			ctx := ctxT(t, 20*time.Second)
			for i := 0; i < 8; i++ {
				start := time.Now()
				l, err := c.Lock(ctx, "r")
				require.NoError(t, err)
				require.Less(t, time.Since(start), ttl, "Lock %d waited for the paused node", i)
				require.NoError(t, l.Release(ctx))
			}
		})
	}
}
