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

// The queue's TTL must never be shortened to 2 × the *caller's* lease (as
// every fairacquire once did): a waiter L with a long backoff
// (WithLockRetryBackoff up to 1 min: its lease 2 s + 2 × max) is queued; a
// default waiter S (lease 2.5 s) tries once and gives up: the queue key
// would expire 5 s later, with L's place. H's
// release then finds nobody queued and publishes on the key's channel, which
// L does not listen to (it listens on its waiter channel): the free lock
// waits for L's backoff timer (uniform up to 40 s here).
func TestShortLeaseKeepsLongWaiter(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	servers := redistest.StartN(t, 3)
	h := dialed(t, servers, redlock.WithTTL(30*time.Second))
	var lAttempts atomic.Int64
	l := dialed(t, servers, redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { lAttempts.Add(1) }}))
	s := dialed(t, servers)
	ctx := ctxT(t, 90*time.Second)
	held, err := h.Lock(ctx, "exp")
	require.NoError(t, err)

	ldone := make(chan time.Time, 1)
	go func() {
		lk, err := l.Lock(ctx, "exp", redlock.WithLockRetryBackoff(20*time.Second, 60*time.Second))
		if err == nil {
			ldone <- time.Now()
			_ = lk.Release(ctx)
			return
		}
		close(ldone)
	}()
	require.Eventually(t, func() bool { return lAttempts.Load() >= 2 }, 5*time.Second, time.Millisecond)
	q, _ := node.QueueKeys(redlock.LockKey("redlock:", "exp"))
	pttl := func() int64 { v, _ := redis.Int64(servers[0].Do("PTTL", q)); return v }
	t.Logf("L queued (%d attempts); queue PTTL %d ms", lAttempts.Load(), pttl())

	gone := func() bool {
		for _, srv := range servers {
			if n, _ := redis.Int64(srv.Do("EXISTS", q)); n != 0 {
				return false
			}
		}
		return true
	}
	// S tries once and gives up; then 7 s pass, L's place expiring with the
	// queue key unless L happens to attempt meanwhile (then S again).
	for i := 0; i < 3; i++ {
		sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = s.Lock(sctx, "exp")
		scancel()
		require.Error(t, err)
		n0 := lAttempts.Load()
		t.Logf("after S's attempts: queue PTTL %d ms", pttl())
		deadline := time.Now().Add(7 * time.Second)
		for !gone() && lAttempts.Load() == n0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("queue gone: %v; L attempted meanwhile: %v", gone(), lAttempts.Load() != n0)
		if lAttempts.Load() == n0 {
			break
		}
	}
	rel := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case at, ok := <-ldone:
		require.True(t, ok)
		t.Logf("L got the lock %v after the release", at.Sub(rel).Round(time.Millisecond))
		require.Less(t, at.Sub(rel), 2*time.Second)
	case <-time.After(12 * time.Second):
		t.Fatalf("the lock has been free for 12 s (> its 10 s default TTL) and L, the only waiter, has not got it")
	}
}
