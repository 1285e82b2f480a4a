package nodetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/nodetest"
	"github.com/redlock-go/redlock/redistest"
)

// TestRedis: the core's node passes the suite against a real redis-server:
// dialed (one pipelined connection, four, and with the restart quarantine on:
// the server has been up longer than it), and over a pool (FromPool).
func TestRedis(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.Start(t)       // restarted by the last variant
	s.WaitUptime(2 * time.Second) // up longer than the quarantine below (and Redis' rounding)
	dial := func(opts ...node.Option) func(t *testing.T) node.Node {
		return func(t *testing.T) node.Node {
			n, err := node.Dial(s.URL(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	for name, newNode := range map[string]func(t *testing.T) node.Node{
		"default":    dial(),
		"pipelined4": dial(node.WithConnections(4)),
		"quarantine": dial(node.WithRestartQuarantine(time.Second)),
		"pool": func(t *testing.T) node.Node {
			pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", s.Addr())
			}}
			t.Cleanup(func() { pool.Close() })
			n, err := node.FromPool(pool, s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
	} {
		t.Run(name, func(t *testing.T) {
			nodetest.Run(t, newNode, nodetest.WithPause(func(t *testing.T) func() {
				s.Pause()
				return s.Resume
			}))
		})
	}
	// The restart quarantine, checked by the suite's last subtest: r restarts
	// empty, and the nodes refuse grants for the 3 s after.
	t.Run("quarantine-restart", func(t *testing.T) {
		r.WaitUptime(3100 * time.Millisecond)
		nodetest.Run(t, func(t *testing.T) node.Node {
			n, err := node.Dial(r.URL(), node.WithRestartQuarantine(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}, nodetest.WithRestart(func(t *testing.T) { r.Restart() }))
	})
}
