package node_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// connectionsReceived reads s's total_connections_received (INFO stats),
// this call's own connection included.
func connectionsReceived(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "stats"))
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("INFO stats lacks total_connections_received")
	return 0
}

// TestLoneCommandOnPausedNode: a command sent on an idle connection with a
// context that ends only at its deadline (context.Background here, bounded
// by the node timeout) is written and read on the caller's goroutine. On a
// paused server it still returns at its deadline; the connection survives
// (the reply, late, is taken by the reader and dropped: no redial), and the
// next commands get their own replies, not the late one.
func TestLoneCommandOnPausedNode(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL(), node.WithTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()

	a, err := n.Acquire(ctx, "lone", "", "tok1", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	before := connectionsReceived(t, s)

	s.Pause()
	start := time.Now()
	_, err = n.Acquire(ctx, "lone2", "", "tok2", time.Minute)
	late := time.Since(start)
	s.Resume()
	require.Error(t, err, "a paused server cannot answer")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, late, 150*time.Millisecond, "waited for the deadline")
	assert.Less(t, late, time.Second, "returned at its deadline (200ms), not at the connection's health timeout")

	// The acquisition landed once the server resumed; its reply (an array)
	// must not be taken for the release's (an integer).
	ok, err := n.Release(ctx, "lone2", "tok2", false)
	require.NoError(t, err)
	assert.True(t, ok, "the late acquisition landed and is released")
	ok, err = n.Release(ctx, "lone", "tok1", false)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, before+1, connectionsReceived(t, s), "the node did not dial again")
	assert.Empty(t, s.Keys("lone*"))
}

// splitProxy forwards to addr; while split is set, each chunk the server
// sends is forwarded as its first byte, then the rest split later (a reply
// whose second segment is late).
func splitProxy(t *testing.T, addr string, split *atomic.Int64) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 1 {
						if d := time.Duration(split.Load()); d > 0 {
							_, _ = c.Write(buf[:1])
							time.Sleep(d)
							n = copy(buf, buf[1:n])
						}
					}
					if n > 0 {
						_, _ = c.Write(buf[:n])
					}
					if err != nil {
						_ = c.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestLoneCommandSplitReply: a lone command whose reply's first bytes came
// in time but whose rest is late returns by its deadline (the node timeout),
// not after the connection's health timeout (2 s): an adversarial review of
// the lone path found it waiting 1.5 s with a 200 ms timeout.
func TestLoneCommandSplitReply(t *testing.T) {
	s := redistest.Start(t)
	var split atomic.Int64
	n, err := node.Dial("redis://"+splitProxy(t, s.Addr(), &split), node.WithTimeout(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	_, err = n.Acquire(ctx, "split0", "", "tok", time.Minute)
	require.NoError(t, err)

	split.Store(int64(1500 * time.Millisecond))
	start := time.Now()
	_, err = n.Acquire(ctx, "split1", "", "tok", time.Minute)
	took := time.Since(start)
	split.Store(0)
	require.Error(t, err, "the reply's end came after the deadline")
	assert.Less(t, took, time.Second, "returned by its deadline (200ms)")
}
