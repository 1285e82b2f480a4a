package node_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
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

// TestAcquireAnnounced: a grant through AcquireAnnounced publishes "taken" on
// TakenChannel, once; a plain Acquire and a refused announced one publish
// nothing.
func TestAcquireAnnounced(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)

	c, err := redis.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer c.Close()
	psc := redis.PubSubConn{Conn: c}
	require.NoError(t, psc.Subscribe(node.TakenChannel("k")))
	_, ok := psc.ReceiveContext(ctx).(redis.Subscription)
	require.True(t, ok, "subscribed")

	a, err := n.Acquire(ctx, "k", "k:f", "plain", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	_, err = n.Release(ctx, "k", "plain", false)
	require.NoError(t, err)
	a, err = n.AcquireAnnounced(ctx, "k", "k:f", "first", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	a, err = n.AcquireAnnounced(ctx, "k", "k:f", "second", time.Minute)
	require.NoError(t, err)
	require.False(t, a.OK, "held by first")
	_, err = s.Do("PUBLISH", node.TakenChannel("k"), "end")
	require.NoError(t, err)

	var got []string
	for len(got) < 2 {
		switch m := psc.ReceiveContext(ctx).(type) {
		case redis.Message:
			got = append(got, string(m.Data))
		case error:
			t.Fatal(m)
		}
	}
	require.Equal(t, []string{"taken", "end"}, got)
}
