package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// nodesOf dials a node per URL; "" is a node that cannot be reached (a port
// nothing listens on, one per position).
func nodesOf(t *testing.T, urls ...string) []node.Node {
	t.Helper()
	var ns []node.Node
	for i, u := range urls {
		if u == "" {
			u = fmt.Sprintf("redis://127.0.0.1:%d/0", i+1)
		}
		n, err := node.Dial(u)
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		ns = append(ns, n)
	}
	return ns
}

// A waiter that reaches fewer than a majority of the nodes cannot win, and
// must not keep the head of the nodes it reaches: N = 3, n3 down for
// everyone, P cut off from n2 (it reaches n1 only) and waiting with a long
// deadline, V (n1 and n2) queued behind P on n1. Once H releases, V gets the
// lock. Found by an adversarial review of the one queue: V never got it
// while P waited (4 of 4 runs), in both modes.
func TestHeadThatCannotWinYields(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []redlock.Option
	}{{"default", nil}, {"fair", []redlock.Option{redlock.WithFair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s := redistest.StartN(t, 2)
			u1, u2 := s[0].URL(), s[1].URL()
			opts := append([]redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}, mode.opts...)
			newClientWith := func(urls []string, opts []redlock.Option) *redlock.Client {
				c, err := redlock.New(nodesOf(t, urls...), opts...)
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				return c
			}
			newClient := func(urls ...string) *redlock.Client { return newClientWith(urls, opts) }
			var pAttempts atomic.Int64
			h, v := newClient(u1, u2, ""), newClient(u1, u2, "")
			p := newClientWith([]string{u1, "", ""}, append(opts, redlock.WithHooks(redlock.Hooks{
				OnAttempt: func(redlock.AttemptEvent) { pAttempts.Add(1) }})))
			held, err := h.TryLock(ctxT(t, 5*time.Second), "part")
			require.NoError(t, err)
			q, _ := node.QueueKeys(redlock.LockKey("redlock:", "part"))
			queued := func(srv *redistest.Server) []string {
				ids, _ := redis.Strings(srv.Do("ZRANGE", q, 0, -1))
				return ids
			}

			pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer pcancel()
			pdone := make(chan error, 1)
			go func() { _, err := p.Lock(pctx, "part"); pdone <- err }()
			require.Eventually(t, func() bool { return pAttempts.Load() >= 3 }, 10*time.Second, time.Millisecond, "P waiting")

			vdone := make(chan error, 1)
			start := time.Now()
			go func() {
				l, err := v.Lock(ctxT(t, 10*time.Second), "part")
				if err == nil {
					err = l.Release(context.Background())
				}
				vdone <- err
			}()
			require.Eventually(t, func() bool { return len(queued(s[1])) == 1 }, 10*time.Second, time.Millisecond, "V queued on n2")
			require.NoError(t, held.Release(ctxT(t, 5*time.Second)))
			require.NoError(t, <-vdone, "V reaches a majority, and the lock is free on both its nodes")
			t.Logf("V got the lock %v after it started waiting; P made %d attempts", time.Since(start).Round(time.Millisecond), pAttempts.Load())
			pcancel()
			<-pdone
		})
	}
}
