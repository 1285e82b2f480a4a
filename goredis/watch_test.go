package goredis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/redistest"
)

// TestWatchShared: watches of one node share one connection; a release
// notifies only its key's watchers; a server restart pokes every watcher once
// go-redis re-subscribed; a key stops being subscribed after its last watcher
// left (and the linger).
func TestWatchShared(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	s := redistest.Start(t)
	n := newNode(t, plainClient(t, s.Addr(), nil))
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const keys = 20
	chans := make([]<-chan struct{}, keys)
	stops := make([]func(), keys)
	for i := range keys {
		ch, stop, err := n.Watch(ctx, fmt.Sprintf("{k%d}", i))
		require.NoError(t, err)
		chans[i], stops[i] = ch, stop
	}
	info, err := redis.String(s.Do("INFO", "clients"))
	require.NoError(t, err)
	assert.Contains(t, info, "connected_clients:2\r", "one subscriber connection (and this one)")

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
	for _, stop := range stops {
		stop()
		stop()
	}
	require.Eventually(t, func() bool {
		channels, err := redis.Strings(s.Do("PUBSUB", "CHANNELS"))
		return err == nil && len(channels) == 0
	}, 10*time.Second, 100*time.Millisecond, "every key unsubscribed after the linger")
}

// TestNoLeak: a node's goroutines end with Close (and the client's).
func TestNoLeak(t *testing.T) {
	s := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := redisClient(s.Addr())
	n := newNode(t, c)
	ctx := context.Background()
	_, stop, err := n.Watch(ctx, "{k}")
	require.NoError(t, err)
	_, err = n.Acquire(ctx, "{k}", "{k}:fence", "t", time.Minute)
	require.NoError(t, err)
	_, err = n.Release(ctx, "{k}", "t", true)
	require.NoError(t, err)
	stop()
	require.NoError(t, n.Close())
	require.NoError(t, c.Close())
}
