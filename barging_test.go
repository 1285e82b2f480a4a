package redlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// A client whose Lock calls keep winning at their first attempt is never
// refused, so it never learnt that others queue for the resource: each time
// it came back, its first attempt (take-if-free, default mode) took the lock
// in the gap between a release and the woken head's attempt, again and
// again (one client got 269 grants, 229 at the first attempt, while 997
// others got 40 or 41: issue 23, 1,000 waiters). Its release now learns
// that waiters are queued, and its next Lock call queues behind them.
//
// Constructed: A holds without ever having been refused; B queues; A
// releases, and B's woken attempt is held back until A's next Lock call has
// made its first attempt, which must not take the lock.
func TestReleaserQueuesBehindWaiters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	var aAttempts, aGranted atomic.Int64
	a := dialed(t, servers, redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
		aAttempts.Add(1)
		if e.Acquired {
			aGranted.Add(1)
		}
	}}))
	nodes, delay := delayedNodes(t, servers)
	var bAttempts atomic.Int64
	b, err := redlock.New(nodes, redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { bAttempts.Add(1) }}))
	require.NoError(t, err)
	defer b.Close()

	la, err := a.Lock(ctx, "barge")
	require.NoError(t, err, "A's first attempt: never refused")
	bDone := make(chan *redlock.Lock, 1)
	go func() {
		l, err := b.Lock(ctx, "barge")
		assert.NoError(t, err)
		bDone <- l
	}()
	// B queued, listening, and past the attempt it makes once listening.
	require.Eventually(t, func() bool { return bAttempts.Load() >= 2 }, 10*time.Second, time.Millisecond)
	waitListening(t, servers, "redlock:{barge}")
	held := make([]*delayed, len(delay)) // B's woken attempt, on every node
	for i, d := range delay {
		held[i] = d.delayNext()
	}
	require.NoError(t, la.Release(ctx))

	before := aAttempts.Load()
	aDone := make(chan *redlock.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, "barge")
		assert.NoError(t, err)
		aDone <- l
	}()
	require.Eventually(t, func() bool { return aAttempts.Load() > before }, 10*time.Second, time.Millisecond,
		"A's next Lock made no attempt")
	assert.Equal(t, int64(1), aGranted.Load(),
		"A's next Lock took the lock at its first attempt, while B was queued and woken")
	for _, h := range held {
		close(h.send)
	}
	var lb *redlock.Lock
	select {
	case lb = <-bDone:
	case l := <-aDone:
		t.Fatalf("A got the lock again before B, queued before it (A's lock: %v)", l != nil)
	case <-ctx.Done():
		t.Fatal("B, queued and woken, never got the lock")
	}
	require.NotNil(t, lb)
	require.NoError(t, lb.Release(ctx))
	select {
	case l := <-aDone:
		require.NotNil(t, l)
		require.NoError(t, l.Release(ctx))
	case <-ctx.Done():
		t.Fatal("A never got the lock after B released it")
	}
}

// The same, for a second goroutine of the releasing client: it called Lock
// while the first held the lock, so it waited for this client's release
// without queuing on the nodes (that release wakes it), and its attempt
// after the release took the lock in the gap before the woken head's attempt
// (14 of 20 rounds ahead of a queued B in a review's probe of 096ed98). The
// release's word that waiters are queued now makes it queue behind them.
//
// Constructed: A1 holds without ever having been refused; A2 waits in A's
// own queue (its one attempt refused, while A1 holds); B queues; A1
// releases, and B's woken attempt is held back until A2 has made its next
// attempt, which must not take the lock.
func TestReleasersOtherGoroutineQueuesBehindWaiters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	var aAttempts, aGranted atomic.Int64
	a := dialed(t, servers, redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
		aAttempts.Add(1)
		if e.Acquired {
			aGranted.Add(1)
		}
	}}))
	nodes, delay := delayedNodes(t, servers)
	var bAttempts atomic.Int64
	b, err := redlock.New(nodes, redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { bAttempts.Add(1) }}))
	require.NoError(t, err)
	defer b.Close()

	la, err := a.Lock(ctx, "barge2")
	require.NoError(t, err, "A1's first attempt: never refused")
	a2Done := make(chan *redlock.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, "barge2")
		assert.NoError(t, err)
		a2Done <- l
	}()
	// A2 is waiting: its first attempt (after a backoff: A holds the lock)
	// was refused.
	require.Eventually(t, func() bool { return aAttempts.Load() >= 2 }, 10*time.Second, time.Millisecond,
		"A2 made no attempt while A1 held the lock")
	require.Equal(t, int64(1), aGranted.Load())
	bDone := make(chan *redlock.Lock, 1)
	go func() {
		l, err := b.Lock(ctx, "barge2")
		assert.NoError(t, err)
		bDone <- l
	}()
	require.Eventually(t, func() bool { return bAttempts.Load() >= 2 }, 10*time.Second, time.Millisecond)
	waitListening(t, servers, "redlock:{barge2}")
	held := make([]*delayed, len(delay)) // B's woken attempt, on every node
	for i, d := range delay {
		held[i] = d.delayNext()
	}
	before := aAttempts.Load()
	require.NoError(t, la.Release(ctx))
	require.Eventually(t, func() bool { return aAttempts.Load() > before }, 10*time.Second, time.Millisecond,
		"A2 made no attempt after A1's release")
	assert.Equal(t, int64(1), aGranted.Load(),
		"A2 took the lock at its attempt after A1's release, while B was queued and woken")
	for _, h := range held {
		close(h.send)
	}
	var lb *redlock.Lock
	select {
	case lb = <-bDone:
	case l := <-a2Done:
		t.Fatalf("A2 got the lock before B, queued before it (A2's lock: %v)", l != nil)
	case <-ctx.Done():
		t.Fatal("B, queued and woken, never got the lock")
	}
	require.NotNil(t, lb)
	require.NoError(t, lb.Release(ctx))
	select {
	case l := <-a2Done:
		require.NotNil(t, l)
		require.NoError(t, l.Release(ctx))
	case <-ctx.Done():
		t.Fatal("A2 never got the lock after B released it")
	}
}
