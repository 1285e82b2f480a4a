package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// fn runs for several TTLs while another client is refused throughout.
func TestDoRenewsAcrossTTLs(t *testing.T) {
	servers := redistest.StartN(t, 3)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the client's goroutines all end with Close
	// 600 ms: renewals every 200 ms, with 400 ms to spare (300 ms failed
	// once at a load of 6 on 2 cores: a renewal late past the validity).
	const ttl = 600 * time.Millisecond
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithTTL(ttl))
	require.NoError(t, err)
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	ctx := ctxT(t, 20*time.Second)

	refused := 0
	err = c.Do(ctx, "job", func(ctx context.Context) error {
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			require.NoError(t, ctx.Err(), "fn's context ended while renewal worked")
			_, err := other.TryLock(ctx, "job")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			refused++
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, refused, 10)
	// Released at the end: free again well before the TTL. A Lock bounded
	// to a quarter of the TTL, not one TryLock, whose single attempt a node
	// still landing the release could refuse (as in TestDoPanicReleases);
	// a lock not released would still be valid then (renewed every third
	// of the TTL), even after a late renewal.
	lctx, cancel := context.WithTimeout(ctx, ttl/4)
	l, err := other.Lock(lctx, "job")
	cancel()
	require.NoError(t, err, "Do released at the end")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
	require.NoError(t, other.Close())
}

// Pausing a majority mid-hold ends fn's context no later than the lease would
// have ended, and Do reports ErrLockLost.
func TestDoPausedMajorityEndsContextBeforeLease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	const ttl = time.Second
	// The lease counts from the start of the attempt that was granted (the
	// nodes' keys expire no earlier than ttl after it): under load a first
	// attempt may fail at the 100 ms node timeout, and the one granted start
	// later than Do's call (a flake audit, 6 December 2026).
	var mu sync.Mutex
	var start time.Time
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
			if e.Acquired {
				mu.Lock()
				start = time.Now().Add(-e.Elapsed)
				mu.Unlock()
			}
		}}))
	require.NoError(t, err)
	defer c.Close()
	defer func() {
		for _, s := range servers[:2] {
			s.Resume()
		}
	}()
	var ended time.Time
	err = c.Do(ctxT(t, 20*time.Second), "paused", func(ctx context.Context) error {
		servers[0].Pause()
		servers[1].Pause()
		<-ctx.Done()
		ended = time.Now()
		assert.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
		return ctx.Err()
	})
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.ErrorIs(t, err, context.Canceled, "fn's error is kept")
	assert.NotContains(t, err.Error(), "\n", "one line: %q", err.Error())
	mu.Lock()
	defer mu.Unlock()
	require.False(t, start.IsZero(), "no attempt was granted")
	assert.True(t, ended.Before(start.Add(ttl)), "fn's context must end before the lease: ended %v after the granted attempt's start", ended.Sub(start))
}

func TestDoMaxHoldAndErrors(t *testing.T) {
	c, _ := cluster(t, 1)
	ctx := ctxT(t, 10*time.Second)
	err := c.Do(ctx, "bounded", func(ctx context.Context) error {
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), redlock.ErrMaxHold)
		return ctx.Err()
	}, redlock.WithMaxHold(100*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrMaxHold)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "fn's error is kept")
	assert.NotErrorIs(t, err, redlock.ErrLockLost)
	// fn that finished its work (nil) after the maximum hold: Do returns nil.
	err = c.Do(ctx, "bounded", func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}, redlock.WithMaxHold(50*time.Millisecond))
	require.NoError(t, err)

	boom := errors.New("boom")
	err = c.Do(ctx, "bounded", func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	l, err := c.TryLock(ctx, "bounded")
	require.NoError(t, err, "released after fn's error")
	require.NoError(t, l.Release(ctx))

	err = c.Do(ctx, "bounded", func(context.Context) error { return nil }, redlock.WithMaxHold(-1))
	require.ErrorIs(t, err, redlock.ErrInvalid)
}

func TestLockContext(t *testing.T) {
	c, _ := cluster(t, 3, redlock.WithTTL(400*time.Millisecond))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "ctx")
	require.NoError(t, err)
	lctx, cancel := l.Context(ctx)
	defer cancel()
	for i := 0; i < 3; i++ { // extensions keep it alive past the first lease
		require.NoError(t, lctx.Err())
		require.NoError(t, l.Extend(ctx))
	}
	<-lctx.Done()
	assert.ErrorIs(t, context.Cause(lctx), redlock.ErrLockLost)
	assert.False(t, time.Now().Before(l.Until()), "ended at the validity's end, not before")

	l2, err := c.TryLock(ctx, "ctx2")
	require.NoError(t, err)
	l2ctx, cancel2 := l2.Context(ctx, redlock.WithSafetyMargin(50*time.Millisecond))
	defer cancel2()
	require.NoError(t, l2.Release(ctx))
	<-l2ctx.Done()
	assert.ErrorIs(t, context.Cause(l2ctx), redlock.ErrLockLost, "release ends the context")
}

// A waiter in Lock learns of the release through pub/sub rather than waiting
// for its (here very long) backoff.
func TestWaiterWokenByRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	holder, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer holder.Close()
	waiter, err := redlock.Dial(redistest.URLs(servers), redlock.WithLogger(logger),
		redlock.WithRetryBackoff(time.Minute, time.Minute))
	require.NoError(t, err)
	defer waiter.Close()
	ctx := ctxT(t, 20*time.Second)

	for i := 0; i < 5; i++ {
		// A resource per round: a late message of the previous round cannot wake
		// this one.
		res := fmt.Sprintf("handoff-%d", i)
		buf.Reset() // count only this round's refusals
		l, err := holder.TryLock(ctx, res)
		require.NoError(t, err)
		heldEverywhere(t, servers, "redlock:{"+res+"}")
		got := make(chan *redlock.Lock, 1)
		go func() {
			w, err := waiter.Lock(ctx, res)
			assert.NoError(t, err)
			got <- w
		}()
		// Refused, subscribed, refused again: the waiter now waits for a release.
		require.Eventually(t, func() bool { return bytes.Count(buf.Bytes(), []byte("lock not acquired")) >= 2 },
			10*time.Second, time.Millisecond, "the waiter tried and was refused")
		buf.Reset()
		require.NoError(t, l.Release(ctx))
		w := <-got
		require.NotNil(t, w)
		assert.Contains(t, buf.String(), "waiter woken by a release", "iteration %d", i)
		require.NoError(t, w.Release(ctx))
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
func (s *syncBuffer) String() string { return string(s.Bytes()) }
func (s *syncBuffer) Reset()         { s.mu.Lock(); defer s.mu.Unlock(); s.b.Reset() }

func TestMultiLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the client's goroutines all end with Close
	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	ctx := ctxT(t, 20*time.Second)

	m, err := c.LockMulti(ctx, []string{"b", "a", "b"})
	require.NoError(t, err)
	var names []string
	for _, l := range m.Locks() {
		names = append(names, l.Resource())
	}
	assert.Equal(t, []string{"a", "b"}, names, "sorted, duplicates removed")
	_, err = other.TryLock(ctx, "a")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, m.Extend(ctx))
	assert.False(t, m.Until().IsZero())
	require.NoError(t, m.Release(ctx))

	// All or nothing: "c" is held elsewhere, so "a" is released again.
	held, err := other.TryLock(ctx, "c")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.LockMulti(short, []string{"c", "a"})
	cancel()
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// A Lock bounded to 2 s (the TTL is 10 s), not one TryLock, whose
	// single attempt a node still landing the release could refuse.
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	a, err := other.Lock(lctx, "a")
	lcancel()
	require.NoError(t, err, "what was taken was released")
	require.NoError(t, a.Release(ctx))
	require.NoError(t, held.Release(ctx))

	ran := false
	require.NoError(t, c.DoMulti(ctx, []string{"x", "y"}, func(ctx context.Context) error {
		ran = true
		_, err := other.TryLock(ctx, "y")
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		return nil
	}))
	assert.True(t, ran)
	_, err = c.LockMulti(ctx, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	require.NoError(t, c.Close())
	require.NoError(t, other.Close())
}
