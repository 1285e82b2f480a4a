package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// TestHeadThatCannotWinYields with P's breakers off (WithBreaker(0), a
// documented option): P's failures on n2 and n3 are "connection refused",
// never "node down", and P keeps the head of n1.
func TestNoBreakerHeadYields(t *testing.T) {
	s := redistest.StartN(t, 2)
	u1, u2 := s[0].URL(), s[1].URL()
	opts := []redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}
	newClientWith := func(urls []string, opts []redlock.Option) *redlock.Client {
		c, err := redlock.New(nodesOf(t, urls...), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	h, v := newClientWith([]string{u1, u2, ""}, opts), newClientWith([]string{u1, u2, ""}, opts)
	var pAttempts atomic.Int64
	p := newClientWith([]string{u1, "", ""}, append(opts, redlock.WithBreaker(0), redlock.WithHooks(redlock.Hooks{
		OnAttempt: func(redlock.AttemptEvent) { pAttempts.Add(1) }})))
	held, err := h.TryLock(ctxT(t, 5*time.Second), "part")
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	pdone := make(chan error, 1)
	go func() { _, err := p.Lock(pctx, "part"); pdone <- err }()
	require.Eventually(t, func() bool { return pAttempts.Load() >= 3 }, 10*time.Second, time.Millisecond)
	vdone := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := v.Lock(ctxT(t, 10*time.Second), "part")
		if err == nil {
			err = l.Release(context.Background())
		}
		vdone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, held.Release(ctxT(t, 5*time.Second)))
	err = <-vdone
	t.Logf("after %v: V: %v; P made %d attempts", time.Since(start).Round(time.Millisecond), err, pAttempts.Load())
	require.NoError(t, err)
	pcancel()
	<-pdone
}
