package redlock_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestLockWithoutSubscribePermission: when the nodes refuse SUBSCRIBE, a waiting
// Lock gets the lock after the release by polling, without a storm of
// connections.
func TestLockWithoutSubscribePermission(t *testing.T) {
	s := redistest.Start(t)
	_, err := s.Do("ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe")
	require.NoError(t, err)
	url := "redis://nosub:pw@" + s.Addr()
	holder, err := redlock.Dial([]string{url})
	require.NoError(t, err)
	defer holder.Close()
	var logs strings.Builder
	var logMu sync.Mutex
	waiter, err := redlock.Dial([]string{url}, redlock.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))))
	require.NoError(t, err)
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lock, err := holder.TryLock(ctx, "r")
	require.NoError(t, err)
	before := acceptedConnections(t, s)
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(time.Second)
		assert.NoError(t, lock.Release(ctx))
		released <- time.Now()
	}()
	l2, err := waiter.Lock(ctx, "r")
	got := time.Now()
	require.NoError(t, err)
	defer l2.Release(ctx)
	lag := got.Sub(<-released)
	opened := acceptedConnections(t, s) - before - 1 // the INFO connection itself
	t.Logf("lock taken %v after the release, by polling; %d connections opened", lag.Round(time.Millisecond), opened)
	assert.Less(t, lag, 500*time.Millisecond, "polling backoff is at most 250ms")
	assert.LessOrEqual(t, opened, 10)
	logMu.Lock()
	defer logMu.Unlock()
	assert.Equal(t, 1, strings.Count(logs.String(), "release notifications unavailable"), "logged once: %s", logs.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func acceptedConnections(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "stats"))
	require.NoError(t, err)
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// A release through the waiters' queue that fails because a value of
// another kind sits at one of the queue's keys (a key of the application's
// in the lock's namespace) falls back to the plain release, as one without
// permission for the queue's commands does: the lock key does not live out
// its TTL (an adversarial review of 8a00707, after which a head is granted
// even when its lease cannot be renewed there).
func TestReleaseWithForeignQueueKey(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := dialed(t, servers)
	ctx := ctxT(t, 10*time.Second)
	key := redlock.LockKey(redlock.DefaultKeyPrefix, "foreign")
	_, qx := node.QueueKeys(key)
	l, err := c.Lock(ctx, "foreign")
	require.NoError(t, err)
	// The queue's mark says waiters may be queued; the leases' key is a string.
	_, err = servers[0].Do("SET", node.QueueMarkKey(key), "1", "PX", 60000)
	require.NoError(t, err)
	_, err = servers[0].Do("SET", qx, "a user's string")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	n, err := redis.Int(servers[0].Do("EXISTS", key))
	require.NoError(t, err)
	assert.Zero(t, n, "the lock key outlived its release")
}
