package rueidis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/redistest"
	rueidisnode "github.com/redlock-go/redlock/rueidis"
)

// subscribes returns how many SUBSCRIBE commands the server has run.
func subscribes(t *testing.T, s *redistest.Server) int {
	t.Helper()
	return int(s.Calls()["subscribe"])
}

// TestWatchShared: the watches of a key share one subscription; a release
// notifies only its key's watchers; a key watched again within the linger is
// not subscribed again (a waiter of a contended lock watches its channel at
// every Lock call); a server restart pokes every watcher once re-subscribed;
// and a key is unsubscribed on the server after its last watcher left (and the
// linger).
func TestWatchShared(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	s := redistest.Start(t)
	n, err := rueidisnode.New(client(t, s.Addr()))
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const keys = 5
	chans := make([]<-chan struct{}, keys)
	stops := make([]func(), keys)
	for i := range keys {
		ch, stop, err := n.Watch(ctx, fmt.Sprintf("{k%d}", i))
		require.NoError(t, err)
		chans[i], stops[i] = ch, stop
	}
	subs := subscribes(t, s)
	assert.Equal(t, keys, subs)
	second, stop2, err := n.Watch(ctx, "{k0}")
	require.NoError(t, err)
	stop2()
	ch, stop, err := n.Watch(ctx, "{k1}")
	require.NoError(t, err)
	stop()
	stop()
	ch, stop, err = n.Watch(ctx, "{k1}") // within the linger
	require.NoError(t, err)
	stop()
	assert.Equal(t, subs, subscribes(t, s), "no SUBSCRIBE for a key subscribed already, or lingering")

	a, err := n.Acquire(ctx, "{k0}", "{k0}:fence", "t", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	ok, err := n.Release(ctx, "{k0}", "t", true)
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case <-chans[0]:
	case <-ctx.Done():
		t.Fatal("release not notified")
	}
	select {
	case <-chans[1]:
		t.Fatal("another key's watcher was poked")
	case <-second:
		t.Fatal("a stopped watch was poked")
	case <-ch:
		t.Fatal("a stopped watch was poked")
	case <-time.After(100 * time.Millisecond):
	}

	s.Restart()
	for i, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("watcher %d not poked after the reconnection", i)
		}
	}
	channels := func() int {
		channels, err := redis.Strings(s.Do("PUBSUB", "CHANNELS"))
		require.NoError(t, err)
		return len(channels)
	}
	require.Eventually(t, func() bool { return channels() == keys }, 10*time.Second, 20*time.Millisecond, "every key subscribed again")
	for _, stop := range stops {
		stop()
	}
	require.Eventually(t, func() bool { return channels() == 0 }, 10*time.Second, 100*time.Millisecond, "every key unsubscribed after the linger")

	// Watched again after the linger: subscribed again, and notified.
	subs = subscribes(t, s)
	ch, stop, err = n.Watch(ctx, "{k0}")
	require.NoError(t, err)
	defer stop()
	assert.Equal(t, subs+1, subscribes(t, s), "subscribed again")
	a, err = n.Acquire(ctx, "{k0}", "{k0}:fence", "t2", time.Minute)
	if err != nil {
		// The test client has DisableRetry: its first command after the
		// restart may see the old connection's EOF.
		a, err = n.Acquire(ctx, "{k0}", "{k0}:fence", "t2", time.Minute)
	}
	require.NoError(t, err)
	require.True(t, a.OK)
	_, err = n.Release(ctx, "{k0}", "t2", true)
	require.NoError(t, err)
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("release not notified after a re-subscription")
	}
}
