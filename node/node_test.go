package node_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url, name, err string
	}{
		{"redis://localhost", "localhost:6379/0", ""},
		{"redis://LocalHost:7000/3", "localhost:7000/3", ""},
		{"rediss://user:pw@example.com:6380/1", "example.com:6380/1", ""},
		{"redis://[::1]:6379", "[::1]:6379/0", ""},
		{"http://localhost", "", "scheme must be redis:// or rediss://"},
		{"localhost:6379", "", "not a URL"},
		{"redis://", "", "missing host"},
		{"redis://h:0", "", "must be 1 to 65535"},
		{"redis://h:abc", "", "invalid URL"},
		{"redis://h/-1", "", "not a decimal number"},
		{"redis://h/?db=2", "", "in the path"},
		{"redis://u:topsecret@h/x", "", `database "x"`},
		{"redis://u:topsecret@h:abc", "", `port "abc"`},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			name, err := node.ParseURL(tt.url)
			if tt.err == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.name, name)
				return
			}
			require.ErrorIs(t, err, node.ErrInvalidURL)
			assert.Contains(t, err.Error(), tt.err)
			assert.NotContains(t, err.Error(), "topsecret", "passwords never reach errors")
		})
	}
}

func TestOptions(t *testing.T) {
	for name, opt := range map[string]node.Option{
		"zero timeout":   node.WithTimeout(0),
		"huge timeout":   node.WithTimeout(time.Hour),
		"no connections": node.WithConnections(0),
		"empty name":     node.WithName(" "),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := node.Dial("redis://localhost", opt)
			assert.ErrorIs(t, err, node.ErrInvalidOption)
		})
	}
	_, err := node.FromPool(nil, "x")
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	_, err = node.FromPool(&redis.Pool{}, "")
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	n, err := node.Dial("redis://localhost", node.WithName("primary-a"))
	require.NoError(t, err)
	assert.Equal(t, "primary-a", n.Name())
}

func TestScripts(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	defer n.Close()
	ctx := context.Background()
	require.NoError(t, n.Ping(ctx))

	a, err := n.Acquire(ctx, "k", "k:f", "tok1", time.Second)
	require.NoError(t, err)
	assert.Equal(t, node.Acquired{OK: true, Fence: 0, HasFence: false}, a)
	pttl, err := redis.Int64(s.Do("PTTL", "k"))
	require.NoError(t, err)
	assert.InDelta(t, 1000, pttl, 100)

	_, err = s.Do("SET", "k:f", "18446744073709551615")
	require.NoError(t, err)
	a, err = n.Acquire(ctx, "k", "k:f", "tok2", time.Second)
	require.NoError(t, err)
	assert.Positive(t, a.Clock, "a refusal tells the node's clock (a waiter's ticket comes from it)")
	a.Clock = 0
	assert.Equal(t, node.Acquired{OK: false, Fence: 18446744073709551615, HasFence: true}, a, "fence read even when the SET fails")
	_, err = s.Do("SET", "k:f", "99")
	require.NoError(t, err)

	// Write-back: only the holder raises the counter, never lowers it; exact
	// above 2^53.
	ok, err := n.WriteFence(ctx, "k", "k:f", "tok2", 500)
	require.NoError(t, err)
	assert.False(t, ok, "a non-holder cannot write the counter")
	for _, tc := range []struct {
		fence uint64
		want  string
	}{{100, "100"}, {7, "100"}, {9007199254740993, "9007199254740993"}, {9007199254740992, "9007199254740993"}, {18446744073709551615, "18446744073709551615"}} {
		ok, err = n.WriteFence(ctx, "k", "k:f", "tok1", tc.fence)
		require.NoError(t, err)
		assert.True(t, ok)
		got, err := redis.String(s.Do("GET", "k:f"))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "after writing %d", tc.fence)
	}
	ttl, err := redis.Int64(s.Do("PTTL", "k:f"))
	require.NoError(t, err)
	assert.Equal(t, int64(-1), ttl, "the counter never expires")

	ok, err = n.Extend(ctx, "k", "tok2", 5*time.Second)
	require.NoError(t, err)
	assert.False(t, ok, "only the owner extends")
	ok, err = n.Extend(ctx, "k", "tok1", 5*time.Second)
	require.NoError(t, err)
	assert.True(t, ok)
	pttl, err = redis.Int64(s.Do("PTTL", "k"))
	require.NoError(t, err)
	assert.Greater(t, pttl, int64(4000))

	ok, err = n.Release(ctx, "k", "tok2", true)
	require.NoError(t, err)
	assert.False(t, ok, "only the owner releases")
	ok, err = n.Release(ctx, "k", "tok1", true)
	require.NoError(t, err)
	assert.True(t, ok)

	ok, err = n.Extend(ctx, "k", "tok1", time.Second)
	require.NoError(t, err)
	assert.False(t, ok, "extend never re-creates a key")
	exists, err := redis.Int(s.Do("EXISTS", "k"))
	require.NoError(t, err)
	assert.Zero(t, exists)

	_, err = s.Do("SET", "bad:f", "not-a-number")
	require.NoError(t, err)
	_, err = n.Acquire(ctx, "bad", "bad:f", "t", time.Second)
	assert.ErrorIs(t, err, node.ErrUnexpectedReply)
}

func TestPausedNodeNeverBlocks(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL(), node.WithTimeout(time.Minute))
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, n.Ping(context.Background()))
	s.Pause()
	defer s.Resume()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = n.Acquire(ctx, "k", "k:f", "t", time.Second)
	require.True(t, isTimeout(err), "the context's deadline bounds the call: %v", err)

	short, err := node.Dial(s.URL(), node.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer short.Close()
	_, err = short.Release(context.Background(), "k", "t", false)
	require.True(t, isTimeout(err), "the per-call timeout bounds the call without a context deadline: %v", err)

	cctx, ccancel := context.WithCancel(context.Background())
	go ccancel()
	_, err = n.Extend(cctx, "k", "t", time.Second)
	require.ErrorIs(t, err, context.Canceled, "cancellation interrupts a call in flight")
}

func TestFromPool(t *testing.T) {
	s := redistest.Start(t)
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", s.Addr()) }}
	defer pool.Close()
	n, err := node.FromPool(pool, "mine")
	require.NoError(t, err)
	a, err := n.Acquire(context.Background(), "p", "p:f", "t", time.Second)
	require.NoError(t, err)
	assert.True(t, a.OK)
	require.NoError(t, n.Close())
	_, err = pool.Get().Do("PING")
	assert.NoError(t, err, "Close leaves a caller's pool open")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
