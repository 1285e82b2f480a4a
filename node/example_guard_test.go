package node_test

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/node"
)

// A node made by FromPool cannot see its pool's new connections: its owner
// feeds a RestartGuard the INFO server of each one, and the node refuses
// acquisitions while the guard says so.
func ExampleWithRestartGuard() {
	const addr = "127.0.0.1:6379"
	g, err := node.NewRestartGuard(11 * time.Second) // at least the longest TTL
	if err != nil {
		panic(err)
	}
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		info, err := redis.String(redis.DoContext(c, ctx, "INFO", "server"))
		if err == nil {
			err = g.Observe(info, time.Now()) // a restart, or a node up less than 11s
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}}
	n, err := node.FromPool(pool, addr+"/0", node.WithRestartGuard(g))
	if err != nil {
		panic(err)
	}
	defer n.Close()
	// A restart known otherwise (an orchestrator's event) starts a full
	// quarantine too:
	g.Restarted(time.Now())
}
