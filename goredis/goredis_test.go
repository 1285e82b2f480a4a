package goredis_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/goredis"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/nodetest"
	"github.com/redlock-go/redlock/redistest"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // go-redis logs every failover step
	os.Exit(m.Run())
}

func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
}

func plainClient(t *testing.T, addr string, q *goredis.Quarantine) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
	if q != nil {
		o.OnConnect = q.OnConnect
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newNode(t *testing.T, c redis.UniversalClient, opts ...goredis.Option) *goredis.Node {
	n, err := goredis.New(c, opts...)
	require.NoError(t, err)
	return n
}

func pause(servers ...*redistest.Server) nodetest.Option {
	return nodetest.WithPause(func(t *testing.T) func() {
		for _, s := range servers {
			s.Pause()
		}
		return func() {
			for _, s := range servers {
				s.Resume()
			}
		}
	})
}

// TestPlain: a *redis.Client on one redis-server passes the conformance suite,
// with and without the quarantine (with it, the suite restarts the server
// last and sees grants refused: nodetest.WithRestart).
func TestPlain(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	s := redistest.Start(t)
	started := time.Now()
	t.Run("default", func(t *testing.T) {
		nodetest.Run(t, func(t *testing.T) node.Node {
			return newNode(t, plainClient(t, s.Addr(), nil))
		}, pause(s))
	})
	t.Run("quarantine", func(t *testing.T) {
		// A quarantine of 3 s: the suite's restart check makes about 25
		// calls, then a TryLock, which must all land while it lasts; 1 s
		// was a loaded machine's stall away from a grant (a flake audit, 6
		// December 2026).
		const d = 3 * time.Second
		time.Sleep(time.Until(started.Add(d + 1100*time.Millisecond))) // up long enough for the quarantine
		nodetest.Run(t, func(t *testing.T) node.Node {
			q, err := goredis.NewQuarantine(d)
			require.NoError(t, err)
			return newNode(t, plainClient(t, s.Addr(), q), goredis.WithQuarantine(q))
		}, pause(s), nodetest.WithRestart(func(t *testing.T) { s.Restart() }))
	})
}

func TestNew(t *testing.T) {
	_, err := goredis.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	assert.ErrorIs(t, err, node.ErrInvalidOption, "ContextTimeoutEnabled is required")
	_, err = goredis.New(redis.NewRing(&redis.RingOptions{ContextTimeoutEnabled: true}))
	assert.ErrorIs(t, err, node.ErrInvalidOption, "a Ring is not one node")
	_, err = goredis.New(nil)
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DB: 2, ContextTimeoutEnabled: true})
	n, err := goredis.New(c)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:1/2", n.Name())
	n, err = goredis.New(c, goredis.WithName("locks-a"))
	require.NoError(t, err)
	assert.Equal(t, "locks-a", n.Name())
	for _, o := range []goredis.Option{goredis.WithName(" "), goredis.WithTimeout(0), goredis.WithQuarantine(nil)} {
		_, err = goredis.New(c, o)
		assert.ErrorIs(t, err, node.ErrInvalidOption)
	}
	_, err = goredis.NewQuarantine(0)
	assert.ErrorIs(t, err, node.ErrInvalidOption)
}

func acquire(t *testing.T, n node.Node, key, token string) (node.Acquired, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return n.Acquire(ctx, "{"+key+"}", "{"+key+"}:fence", token, time.Minute)
}

// TestQuarantineRestart: a server restart (new run_id, data lost) quarantines
// the node for the full duration; a fresh server is quarantined for what is
// left of the duration; the quarantine ends.
func TestQuarantineRestart(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	const d = 3 * time.Second
	s := redistest.Start(t)
	q, err := goredis.NewQuarantine(d)
	require.NoError(t, err)
	n := newNode(t, plainClient(t, s.Addr(), q), goredis.WithQuarantine(q))

	_, err = acquire(t, n, "fresh", "t")
	var qe *node.QuarantineError
	require.ErrorAs(t, err, &qe, "a server up for less than the quarantine may have lost keys")
	assert.Empty(t, qe.PrevRunID)
	time.Sleep(time.Until(qe.Until))
	a, err := acquire(t, n, "k", "holder")
	require.NoError(t, err)
	require.True(t, a.OK)

	s.Restart() // no persistence: the lock key is gone
	_, err = acquire(t, n, "k", "other")
	require.ErrorAs(t, err, &qe, "the call that sees the restart is refused")
	assert.NotEmpty(t, qe.PrevRunID)
	assert.WithinDuration(t, time.Now().Add(d), qe.Until, time.Second)
	_, err = acquire(t, n, "k", "other")
	require.ErrorIs(t, err, node.ErrQuarantined, "refused without a request while it lasts")
	time.Sleep(time.Until(qe.Until))
	a, err = acquire(t, n, "k", "other")
	require.NoError(t, err)
	assert.True(t, a.OK)
}

// TestQuarantineNeedsHook: a quarantine that never saw a connection is not the
// client's OnConnect hook; the node refuses rather than run unprotected.
func TestQuarantineNeedsHook(t *testing.T) {
	s := redistest.Start(t)
	q, err := goredis.NewQuarantine(time.Second)
	require.NoError(t, err)
	n := newNode(t, plainClient(t, s.Addr(), nil), goredis.WithQuarantine(q))
	_, err = acquire(t, n, "k", "t")
	require.ErrorIs(t, err, node.ErrInvalidOption)
	assert.Contains(t, err.Error(), "OnConnect")
	keys, err := redis.NewClient(&redis.Options{Addr: s.Addr()}).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "the lock it took was deleted again")
}

// TestFenced: guarded writes through go-redis refuse a lower token, and share
// their format with fence.WriteRedis / fence.ReadRedis.
func TestFenced(t *testing.T) {
	s := redistest.Start(t)
	c := plainClient(t, s.Addr(), nil)
	ctx := context.Background()
	v, h, err := goredis.ReadFenced(ctx, c, "balance")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Zero(t, h)
	require.NoError(t, goredis.WriteFenced(ctx, c, "balance", 1<<53+1, "10"))
	err = goredis.WriteFenced(ctx, c, "balance", 1<<53, "stale")
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fence.StaleError{Token: 1 << 53, Highest: 1<<53 + 1}, *se)
	require.NoError(t, goredis.WriteFenced(ctx, c, "balance", 1<<53+1, "11"), "the same token writes again")
	v, h, err = goredis.ReadFenced(ctx, c, "balance")
	require.NoError(t, err)
	assert.Equal(t, "11", v)
	assert.Equal(t, uint64(1<<53+1), h)

	rc, err := s.Dial()
	require.NoError(t, err)
	defer rc.Close()
	v, h, err = fence.ReadRedis(ctx, rc, "balance")
	require.NoError(t, err)
	assert.Equal(t, "11", v)
	assert.Equal(t, uint64(1<<53+1), h)
	require.NoError(t, fence.WriteRedis(ctx, rc, "balance", 1<<60, "12"))
	err = goredis.WriteFenced(ctx, c, "balance", 1<<59, "x")
	assert.True(t, errors.As(err, &se))
}
