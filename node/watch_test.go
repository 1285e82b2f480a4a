package node_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWatch(t *testing.T) {
	s, n, ctx := dialed(t, 20*time.Second)

	ch, stop, err := n.Watch(ctx, "k")
	require.NoError(t, err, "subscription confirmed")
	ch2, stop2, err := n.Watch(ctx, "k")
	require.NoError(t, err, "a second watcher shares the subscription")

	a, err := n.Acquire(ctx, "k", "k:f", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	ok, err := n.Release(ctx, "k", "tok", true)
	require.NoError(t, err)
	require.True(t, ok)
	for _, c := range []<-chan struct{}{ch, ch2} {
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatal("release not notified")
		}
	}
	stop2()

	// The server restarts: the watch is re-established and its watcher poked,
	// since a release may have been missed meanwhile.
	s.Kill()
	s.Restart()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no wake-up after reconnect")
	}
	require.Eventually(t, func() bool {
		_, err := n.Acquire(ctx, "k", "k:f", "tok2", time.Minute)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	// Once re-subscribed, releases are notified again.
	require.Eventually(t, func() bool {
		if _, err := n.Release(ctx, "k", "tok2", true); err != nil {
			return false
		}
		select {
		case <-ch:
			return true
		case <-time.After(50 * time.Millisecond):
			_, _ = n.Acquire(ctx, "k", "k:f", "tok2", time.Minute)
			return false
		}
	}, 10*time.Second, time.Millisecond)
	stop()
}
