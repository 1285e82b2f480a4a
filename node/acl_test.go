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
