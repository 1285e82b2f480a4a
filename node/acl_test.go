package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// aclUser creates user name (password "pw") with every permission but those
// removed by minus (for example "-subscribe"), and returns its node URL.
func aclUser(t *testing.T, s *redistest.Server, name string, minus ...string) string {
	t.Helper()
	args := []any{"SETUSER", name, "on", ">pw", "~*", "&*", "+@all"}
	for _, m := range minus {
		args = append(args, m)
	}
	_, err := s.Do("ACL", args...)
	require.NoError(t, err)
	return "redis://" + name + ":pw@" + s.Addr()
}

// totalConnections returns the server's total_connections_received.
func totalConnections(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "stats"))
	require.NoError(t, err)
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_connections_received")
	return 0
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestWatchWithoutSubscribePermission: a node that refuses SUBSCRIBE makes
// Watch fail at once with the reason; the subscriber backs off (a handful of
// connections in 3 s, not hundreds) and logs once.
func TestWatchWithoutSubscribePermission(t *testing.T) {
	s := redistest.Start(t)
	var logs syncBuffer
	n, err := node.Dial(aclUser(t, s, "nosub", "-subscribe"),
		node.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, n.Ping(context.Background()))

	before := totalConnections(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, stop, err := n.Watch(ctx, "k")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOPERM")
	assert.Less(t, time.Since(start), time.Second, "fails without waiting for ctx")
	defer stop()
	time.Sleep(3 * time.Second)
	// Watching another key meanwhile fails at once too.
	_, stop2, err := n.Watch(ctx, "k2")
	require.Error(t, err)
	stop2()
	opened := totalConnections(t, s) - before - 1 // the INFO connection itself
	t.Logf("connections opened in 3s without SUBSCRIBE permission: %d", opened)
	assert.LessOrEqual(t, opened, 12)
	assert.Equal(t, 1, strings.Count(logs.String(), "release notifications unavailable"), logs.String())
}

// TestScriptsWithoutPermissions: a script that fails for lack of a permission
// leaves no key behind, and a delete that happened counts as released.
func TestScriptsWithoutPermissions(t *testing.T) {
	s := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	nopub, err := node.Dial(aclUser(t, s, "nopub", "-publish"))
	require.NoError(t, err)
	defer nopub.Close()
	a, err := nopub.Acquire(ctx, "k", "k:f", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	ok, err := nopub.Release(ctx, "k", "tok", true)
	require.NoError(t, err, "the notification failed, the release did not")
	assert.True(t, ok)
	assert.Empty(t, s.Keys("k"))
	ok, err = nopub.Release(ctx, "k", "tok", true) // already gone: notifies, under pcall
	require.NoError(t, err)
	assert.False(t, ok)

	noget, err := node.Dial(aclUser(t, s, "noget", "-get"))
	require.NoError(t, err)
	defer noget.Close()
	_, err = noget.Acquire(ctx, "k2", "k2:f", "tok", time.Minute)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "can't run this command")
	assert.Empty(t, s.Keys("k2*"), "no lock key left behind by a failed acquire")
	// Other commands on the same connection are unaffected.
	require.NoError(t, noget.Ping(ctx))
}

// TestWatchRefusedChannel: a user allowed some channels only. A refused
// SUBSCRIBE does not let the confirmed ones reset the backoff: the subscriber
// does not reconnect in a loop.
func TestWatchRefusedChannel(t *testing.T) {
	s := redistest.Start(t)
	_, err := s.Do("ACL", "SETUSER", "some", "on", ">pw", "~*", "resetchannels", "&ok*", "+@all")
	require.NoError(t, err)
	n, err := node.Dial("redis://some:pw@" + s.Addr())
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, stop, err := n.Watch(ctx, "ok1")
	require.NoError(t, err)
	defer stop()
	before := totalConnections(t, s)
	_, stop2, err := n.Watch(ctx, "other")
	require.Error(t, err)
	defer stop2()
	time.Sleep(2 * time.Second)
	opened := totalConnections(t, s) - before - 1
	t.Logf("connections opened in 2s with one refused channel: %d", opened)
	assert.LessOrEqual(t, opened, 10)
}
