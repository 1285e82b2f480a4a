package node

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/redistest"
)

// connections returns the server's total_connections_received.
func connections(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}

// TestSubscriberIdle: once nothing is watched, the subscriber closes its
// connection at the next keep-alive instead of reconnecting again and again (a
// PING outside subscribe mode answers +PONG, which is not a failure).
func TestSubscriberIdle(t *testing.T) {
	defer func(p, l time.Duration) { watchPing, watchLinger = p, l }(watchPing, watchLinger)
	watchPing, watchLinger = 100*time.Millisecond, 50*time.Millisecond
	s := redistest.Start(t)
	n, err := Dial(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, stop, err := n.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	before := connections(t, s)
	time.Sleep(time.Second) // 10 keep-alive periods
	// One connection is the INFO of connections itself.
	if got := connections(t, s) - before; got != 1 {
		t.Errorf("%d connections opened while idle, want none", got-1)
	}
	n.sub.mu.Lock()
	running, conn := n.sub.running, n.sub.conn
	n.sub.mu.Unlock()
	if running || conn != nil {
		t.Errorf("idle subscriber still running (%v) or connected (%v)", running, conn != nil)
	}
	// Watching again starts it again.
	if _, stop, err = n.Watch(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	stop()
}
