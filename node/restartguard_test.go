package node_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// infoCounter is a dialer that counts the connections it opens and the INFO
// commands written on them.
type infoCounter struct {
	dials atomic.Int64
	mu    sync.Mutex
	infos int
}

func (c *infoCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.dials.Add(1)
	return &countingConn{Conn: nc, c: c}, nil
}

type countingConn struct {
	net.Conn
	c *infoCounter
}

func (cc *countingConn) Write(p []byte) (int, error) {
	cc.c.mu.Lock()
	cc.c.infos += bytes.Count(bytes.ToUpper(p), []byte("$4\r\nINFO\r\n"))
	cc.c.mu.Unlock()
	return cc.Conn.Write(p)
}

func (c *infoCounter) counts() (dials, infos int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.dials.Load()), c.infos
}

// With the restart quarantine and the same-instance check both on, a new
// connection runs INFO server once, and both checks see it.
func TestOneInfoPerDial(t *testing.T) {
	for name, opts := range map[string][]node.Option{
		"both":       {node.WithInstances(node.NewInstances()), node.WithRestartQuarantine(time.Minute)},
		"quarantine": {node.WithRestartQuarantine(time.Minute)},
		"instances":  {node.WithInstances(node.NewInstances())},
	} {
		t.Run(name, func(t *testing.T) {
			s := redistest.Start(t)
			counter := &infoCounter{}
			n, err := node.Dial(s.URL(), append(opts, node.WithDialer(counter.dial), node.WithConnections(2))...)
			require.NoError(t, err)
			defer n.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for range 4 {
				require.NoError(t, n.Ping(ctx))
			}
			dials, infos := counter.counts()
			require.Positive(t, dials)
			assert.Equal(t, dials, infos, "one INFO per dial")
		})
	}
}

// A node made by FromPool refuses the options it cannot honour rather than
// ignore them: the pool dials.
func TestFromPoolRefusesDialOptions(t *testing.T) {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return nil, net.ErrClosed }}
	g, err := node.NewRestartGuard(time.Second)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		opt  node.Option
		want string // "" = accepted
	}{
		"quarantine":  {node.WithRestartQuarantine(time.Second), "WithRestartQuarantine"},
		"instances":   {node.WithInstances(node.NewInstances()), "WithInstances"},
		"tls":         {node.WithTLSConfig(&tls.Config{}), "WithTLSConfig"},
		"dialer":      {node.WithDialer((&net.Dialer{}).DialContext), "WithDialer"},
		"connections": {node.WithConnections(2), "WithConnections"},
		"limits":      {node.WithReplyLimits(1<<20, 1<<10), "WithReplyLimits"},
		"guard":       {node.WithRestartGuard(g), ""},
		"timeout":     {node.WithTimeout(time.Second), ""},
		"name":        {node.WithName("other"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := node.FromPool(pool, "p", tc.opt)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, n.Close())
				return
			}
			require.ErrorIs(t, err, node.ErrInvalidOption)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "FromPool")
		})
	}
}

func TestRestartGuardOption(t *testing.T) {
	g, err := node.NewRestartGuard(time.Second)
	require.NoError(t, err)
	for name, opts := range map[string][]node.Option{
		"nil guard":          {node.WithRestartGuard(nil)},
		"zero guard":         {node.WithRestartGuard(&node.RestartGuard{})},
		"guard + quarantine": {node.WithRestartGuard(g), node.WithRestartQuarantine(time.Second)},
		"quarantine + guard": {node.WithRestartQuarantine(time.Second), node.WithRestartGuard(g)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := node.Dial("redis://localhost", opts...)
			require.ErrorIs(t, err, node.ErrInvalidOption)
		})
	}
}

// A node made by FromPool refuses grants while its guard says so, whoever
// feeds the guard: Restarted (a restart known otherwise), or Observe with the
// INFO of a new connection. Releases and extensions go through.
func TestRestartGuardFromPool(t *testing.T) {
	s := redistest.Start(t)
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", s.Addr())
	}}
	defer pool.Close()
	const d = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		feed func(t *testing.T, g *node.RestartGuard)
	}{
		{"restarted", func(_ *testing.T, g *node.RestartGuard) { g.Restarted(time.Now()) }},
		{"observed", func(t *testing.T, g *node.RestartGuard) {
			info, err := redis.String(s.Do("INFO", "server")) // the server started just now
			require.NoError(t, err)
			require.NoError(t, g.Observe(info, time.Now()))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Do("FLUSHALL")
			require.NoError(t, err)
			g, err := node.NewRestartGuard(d)
			require.NoError(t, err)
			n, err := node.FromPool(pool, "pooled", node.WithRestartGuard(g))
			require.NoError(t, err)
			defer n.Close()
			a, err := n.Acquire(ctx, "k", "k:f", "t1", time.Minute)
			require.NoError(t, err)
			require.True(t, a.OK)
			require.NoError(t, n.Refusal())

			tc.feed(t, g)
			_, err = n.Acquire(ctx, "k2", "k2:f", "t2", time.Minute)
			require.ErrorIs(t, err, node.ErrQuarantined)
			var qe *node.QuarantineError
			require.ErrorAs(t, err, &qe)
			assert.Equal(t, d, qe.Quarantine)
			assert.WithinDuration(t, time.Now().Add(d), qe.Until, 2*time.Second)
			assert.ErrorIs(t, n.Refusal(), node.ErrQuarantined)
			assert.NotContains(t, s.Keys("*"), "k2", "the quarantined node must not receive the SET")

			ok, err := n.Extend(ctx, "k", "t1", time.Minute)
			require.NoError(t, err)
			assert.True(t, ok, "extensions go through")
			ok, err = n.Release(ctx, "k", "t1", false)
			require.NoError(t, err)
			assert.True(t, ok, "releases go through")
		})
	}
}

// A pool whose dial feeds the guard: the connection dialed for the first
// acquisition after a restart is the one that sees it, and that acquisition is
// refused with nothing written.
func TestRestartGuardFedByPoolDial(t *testing.T) {
	s := redistest.Start(t) // started just now: quarantined
	g, err := node.NewRestartGuard(time.Minute)
	require.NoError(t, err)
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialContext(ctx, "tcp", s.Addr())
		if err != nil {
			return nil, err
		}
		info, err := redis.String(redis.DoContext(c, ctx, "INFO", "server"))
		if err == nil {
			err = g.Observe(info, time.Now())
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}}
	defer pool.Close()
	n, err := node.FromPool(pool, "pooled", node.WithRestartGuard(g))
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, g.Refusal(), "nothing dialed yet")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = n.Acquire(ctx, "k", "k:f", "t", time.Minute)
	require.ErrorIs(t, err, node.ErrQuarantined)
	assert.Empty(t, s.Keys("*"), "the SET must not reach the node")
	ok, err := n.Release(ctx, "k", "t", false)
	require.NoError(t, err, "releases go through")
	assert.False(t, ok)
}

// A dialed node feeds a guard given with WithRestartGuard the INFO of its new
// connections, as WithRestartQuarantine does.
func TestRestartGuardDialFeedsGuard(t *testing.T) {
	s := redistest.Start(t)
	g, err := node.NewRestartGuard(time.Minute)
	require.NoError(t, err)
	n, err := node.Dial(s.URL(), node.WithRestartGuard(g))
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, g.Refusal(), "nothing seen yet")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, n.Ping(ctx))
	require.ErrorIs(t, g.Refusal(), node.ErrQuarantined, "the server started just now")
	_, err = n.Acquire(ctx, "k", "k:f", "t", time.Second)
	require.ErrorIs(t, err, node.ErrQuarantined)
}

func TestTimeoutOf(t *testing.T) {
	d, set, err := node.TimeoutOf(node.WithName("x"))
	require.NoError(t, err)
	assert.False(t, set)
	assert.Equal(t, node.DefaultTimeout, d)
	d, set, err = node.TimeoutOf(node.WithTimeout(time.Second), node.WithTimeout(2*time.Second))
	require.NoError(t, err)
	assert.True(t, set)
	assert.Equal(t, 2*time.Second, d)
	_, _, err = node.TimeoutOf(node.WithTimeout(-1))
	require.ErrorIs(t, err, node.ErrInvalidOption)
}
