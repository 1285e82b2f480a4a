package redlock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// Every entry point that takes a context refuses a nil one with an error
// matching ErrInvalid, and does not panic; the lock is still usable after.
func TestNilContext(t *testing.T) {
	c, _ := cluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "nil-ctx")
	require.NoError(t, err)
	m, err := c.LockMulti(ctx, []string{"nil-ctx-a", "nil-ctx-b"})
	require.NoError(t, err)
	fn := func(context.Context) error { return nil }
	var nilCtx context.Context // a variable: staticcheck flags a literal nil

	tests := []struct {
		name string
		call func() error
	}{
		{"Client.Lock", func() error { _, err := c.Lock(nilCtx, "r"); return err }},
		{"Client.TryLock", func() error { _, err := c.TryLock(nilCtx, "r"); return err }},
		{"Client.Do", func() error { return c.Do(nilCtx, "r", fn) }},
		{"Client.LockMulti", func() error { _, err := c.LockMulti(nilCtx, []string{"r"}); return err }},
		{"Client.DoMulti", func() error { return c.DoMulti(nilCtx, []string{"r"}, fn) }},
		{"Lock.Extend", func() error { return l.Extend(nilCtx) }},
		{"Lock.Fence", func() error { _, err := l.Fence(nilCtx); return err }},
		{"Lock.Release", func() error { return l.Release(nilCtx) }},
		{"Lock.Context", func() error {
			lctx, cancel := l.Context(nilCtx)
			defer cancel()
			require.Error(t, lctx.Err(), "the context has already ended")
			return context.Cause(lctx)
		}},
		{"Lock.Keep", func() error {
			kctx, cancel := l.Keep(nilCtx)
			defer cancel()
			require.Error(t, kctx.Err(), "the context has already ended")
			return context.Cause(kctx)
		}},
		{"MultiLock.Extend", func() error { return m.Extend(nilCtx) }},
		{"MultiLock.Release", func() error { return m.Release(nilCtx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.call() })
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), "nil context")
		})
	}
	// Nothing was released or changed by the refused calls.
	require.NoError(t, l.Extend(ctx))
	_, err = l.Fence(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, m.Release(ctx))
}

// Close returns within the node timeout when a node is paused: the
// acquisition's straggler on it times out, and the cleanup release that
// follows is given up at the node timeout after Close began instead of taking
// a node timeout of its own.
func TestCloseWithPausedNode(t *testing.T) {
	const nodeTimeout = time.Second
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(nodeTimeout))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "close-paused") // connects to every node
	require.NoError(t, err)
	// TryLock and Release return at their majority: wait for the third SET,
	// then for the third delete, or a node still holding the first lock (or
	// taking it late) splits the second attempt.
	heldEverywhere(t, servers, "redlock:{close-paused}")
	require.NoError(t, l.Release(ctx))
	for _, s := range servers {
		require.Eventually(t, func() bool { return len(s.Keys("redlock:*")) == 0 }, 10*time.Second, time.Millisecond)
	}
	servers[2].Pause()
	defer servers[2].Resume()
	l, err = c.TryLock(ctx, "close-paused") // decided by the two others
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	start := time.Now()
	require.NoError(t, c.Close())
	elapsed := time.Since(start)
	// Before: a node timeout for the straggler, then one for its release (2s).
	assert.Less(t, elapsed, nodeTimeout+nodeTimeout/2, "Close took %v with a node timeout of %v", elapsed, nodeTimeout)
	_, err = c.TryLock(ctx, "close-paused")
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// A failed acquisition's message says what each node answered.
func TestQuorumErrorNamesEveryAnswer(t *testing.T) {
	servers := redistest.StartN(t, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "redis://" + l.Addr().String()
	require.NoError(t, l.Close())
	ctx := ctxT(t, 10*time.Second)

	// Another client holds the lock on the second node only.
	other, err := redlock.Dial([]string{servers[1].URL()})
	require.NoError(t, err)
	defer other.Close()
	held, err := other.TryLock(ctx, "answers")
	require.NoError(t, err)
	defer held.Release(ctx)

	c, err := redlock.Dial([]string{servers[0].URL(), servers[1].URL(), closed})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.TryLock(ctx, "answers")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	msg := err.Error()
	// The healthy node's yes may come after the refusal and the failure have
	// decided the outcome: then it is said not to have been waited for, never
	// counted as a no.
	assert.Regexp(t, `acquire on 3 nodes \(2 needed\): (1 agreed, 1 refused \(held\), 1 failed \(connection refused\)|`+
		`0 agreed, 1 refused \(held\), 1 failed \(connection refused\), 1 not waited for \(the outcome was known without them\));`, msg)
	assert.Contains(t, msg, "; node "+strings.TrimPrefix(closed, "redis://")+"/0: ")
	assert.NotContains(t, msg, "\n")
}
