package rueidis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	rd "github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/fence"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/nodetest"
	"github.com/redlock-go/redlock/redistest"
	rueidisnode "github.com/redlock-go/redlock/rueidis"
)

func client(t *testing.T, addrs ...string) rd.Client {
	c, err := rd.NewClient(rd.ClientOption{InitAddress: addrs, DisableRetry: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func newNode(t *testing.T, c rd.Client, opts ...rueidisnode.Option) node.Node {
	n, err := rueidisnode.New(c, opts...)
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

// TestPlain: a rueidis client on one redis-server passes the conformance suite.
func TestPlain(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	s := redistest.Start(t)
	nodetest.Run(t, func(t *testing.T) node.Node {
		return newNode(t, client(t, s.Addr()))
	}, pause(s))
}

// TestCluster: a rueidis cluster client over a real 3-master cluster passes
// the suite.
func TestCluster(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	c := redistest.StartCluster(t, 3)
	nodetest.Run(t, func(t *testing.T) node.Node {
		return newNode(t, client(t, c.Addrs()...))
	}, pause(c.Masters...))
}

func TestNew(t *testing.T) {
	_, err := rueidisnode.New(nil)
	assert.ErrorIs(t, err, node.ErrInvalidOption)
	s := redistest.Start(t)
	c := client(t, s.Addr())
	n := newNode(t, c)
	assert.Equal(t, "rueidis/"+s.Addr(), n.Name())
	assert.Equal(t, "locks-a", newNode(t, c, rueidisnode.WithName("locks-a")).Name())
	for _, o := range []rueidisnode.Option{rueidisnode.WithName(""), rueidisnode.WithTimeout(-1)} {
		_, err = rueidisnode.New(c, o)
		assert.ErrorIs(t, err, node.ErrInvalidOption)
	}
}

// TestFenced: guarded writes through rueidis refuse a lower token, and share
// their format with fence.WriteRedis / fence.ReadRedis.
func TestFenced(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s.Addr())
	ctx := context.Background()
	v, h, err := rueidisnode.ReadFenced(ctx, c, "balance")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Zero(t, h)
	require.NoError(t, rueidisnode.WriteFenced(ctx, c, "balance", 1<<53+1, "10"))
	err = rueidisnode.WriteFenced(ctx, c, "balance", 1<<53, "stale")
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fence.StaleError{Token: 1 << 53, Highest: 1<<53 + 1}, *se)
	require.NoError(t, rueidisnode.WriteFenced(ctx, c, "balance", 1<<53+1, "11"), "the same token writes again")

	rc, err := s.Dial()
	require.NoError(t, err)
	defer rc.Close()
	v, h, err = fence.ReadRedis(ctx, rc, "balance")
	require.NoError(t, err)
	assert.Equal(t, "11", v)
	assert.Equal(t, uint64(1<<53+1), h)
	require.NoError(t, fence.WriteRedis(ctx, rc, "balance", 1<<60, "12"))
	err = rueidisnode.WriteFenced(ctx, c, "balance", 1<<59, "x")
	assert.True(t, errors.As(err, &se))
	v, h, err = rueidisnode.ReadFenced(ctx, c, "balance")
	require.NoError(t, err)
	assert.Equal(t, "12", v)
	assert.Equal(t, uint64(1<<60), h)
}

// TestNoLeak: a node's goroutines end with Close (and the client's).
func TestNoLeak(t *testing.T) {
	s := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{s.Addr()}})
	require.NoError(t, err)
	n, err := rueidisnode.New(c)
	require.NoError(t, err)
	ctx := context.Background()
	_, stop, err := n.Watch(ctx, "{k}")
	require.NoError(t, err)
	_, _, err = n.Watch(ctx, "{k2}") // ended by Close
	require.NoError(t, err)
	_, err = n.Acquire(ctx, "{k}", "{k}:fence", "t", time.Minute)
	require.NoError(t, err)
	_, err = n.Release(ctx, "{k}", "t", true)
	require.NoError(t, err)
	stop()
	require.NoError(t, n.Close())
	c.Close()
}
