package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// Found by an adversarial review (2026-12-03): TestHeadThatCannotWinYields with the second failed
// node quarantined for P (its restart guard) instead of unreachable. N = 3,
// n3 down for everyone; P's guard quarantines n2 (P saw n2's restart later
// than V did, so its quarantine ends later); V reaches n1 and n2. P is queued
// first (head of n1). H releases: the lock is free on n1 and n2, V could win
// both, but P keeps the head of n1 (its failures are "node down" + "quarantined",
// and yieldPlace counts only "node down").
func TestQuarantinedHeadYields(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []redlock.Option
	}{{"default", nil}, {"fair", []redlock.Option{redlock.WithFair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s := redistest.StartN(t, 2)
			u1, u2 := s[0].URL(), s[1].URL()
			opts := append([]redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}, mode.opts...)
			newClientWith := func(ns []node.Node, opts []redlock.Option) *redlock.Client {
				c, err := redlock.New(ns, opts...)
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				return c
			}
			h := newClientWith(nodesOf(t, u1, u2, ""), opts)
			v := newClientWith(nodesOf(t, u1, u2, ""), opts)
			g, err := node.NewRestartGuard(time.Minute)
			require.NoError(t, err)
			g.Restarted(time.Now()) // P learnt of n2's restart: quarantined for a minute
			pn2, err := node.Dial(u2, node.WithRestartGuard(g))
			require.NoError(t, err)
			t.Cleanup(func() { pn2.Close() })
			pns := nodesOf(t, u1, "", "")
			pns[1] = pn2
			var pAttempts atomic.Int64
			p := newClientWith(pns, append(opts, redlock.WithHooks(redlock.Hooks{
				OnAttempt: func(redlock.AttemptEvent) { pAttempts.Add(1) }})))

			held, err := h.TryLock(ctxT(t, 5*time.Second), "part")
			require.NoError(t, err)
			q, _ := node.QueueKeys(redlock.LockKey("redlock:", "part"))
			queued := func(srv *redistest.Server) []string {
				ids, _ := redis.Strings(srv.Do("ZRANGE", q, 0, -1))
				return ids
			}
			pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
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
			t.Logf("n1 queue %v, n2 queue %v", queued(s[0]), queued(s[1]))
			require.NoError(t, held.Release(ctxT(t, 5*time.Second)))
			err = <-vdone
			t.Logf("after %v: V: %v; P made %d attempts; n1 queue %v, n2 queue %v",
				time.Since(start).Round(time.Millisecond), err, pAttempts.Load(), queued(s[0]), queued(s[1]))
			require.NoError(t, err, "V reaches a majority (n1, n2 up and free), P cannot win")
			pcancel()
			<-pdone
		})
	}
}

// The same with P's n2 refusing P for a reason that is not a transport
// failure either: P's password is wrong on n2 (its breaker never opens).
func TestAuthFailedHeadYields(t *testing.T) {
	s := redistest.StartN(t, 2)
	u1, u2 := s[0].URL(), s[1].URL()
	opts := []redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}
	newClientWith := func(ns []node.Node, opts []redlock.Option) *redlock.Client {
		c, err := redlock.New(ns, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	h := newClientWith(nodesOf(t, u1, u2, ""), opts)
	v := newClientWith(nodesOf(t, u1, u2, ""), opts)
	bad := "redis://:wrong@" + u2[len("redis://"):]
	var pAttempts atomic.Int64
	var lastErr atomic.Value
	p := newClientWith(nodesOf(t, u1, bad, ""), append(opts, redlock.WithHooks(redlock.Hooks{
		OnAttempt: func(redlock.AttemptEvent) { pAttempts.Add(1) },
		OnNodeReply: func(e redlock.NodeReplyEvent) {
			if e.Err != nil {
				lastErr.Store(e.Node + ": " + e.Err.Error())
			}
		}})))
	held, err := h.TryLock(ctxT(t, 5*time.Second), "part")
	require.NoError(t, err)
	q, _ := node.QueueKeys(redlock.LockKey("redlock:", "part"))
	queued := func(srv *redistest.Server) []string {
		ids, _ := redis.Strings(srv.Do("ZRANGE", q, 0, -1))
		return ids
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	err = <-vdone
	t.Logf("after %v: V: %v; P made %d attempts (a node error: %v); n1 queue %v", time.Since(start).Round(time.Millisecond), err, pAttempts.Load(), lastErr.Load(), queued(s[0]))
	require.NoError(t, err)
	pcancel()
	<-pdone
}
