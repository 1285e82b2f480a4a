package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// recorder counts hook events.
type recorder struct {
	mu       sync.Mutex
	attempts map[bool]int
	acquires map[bool]int
	nodes    map[string]int // op -> replies
	extends  map[bool]int
	renewals int
	lost     int
	releases int
	held     []time.Duration
}

func newRecorder() *recorder {
	return &recorder{attempts: map[bool]int{}, acquires: map[bool]int{}, nodes: map[string]int{}, extends: map[bool]int{}}
}

func (r *recorder) hooks() redlock.Hooks {
	return redlock.Hooks{
		OnAttempt:        func(e redlock.AttemptEvent) { r.mu.Lock(); r.attempts[e.Acquired]++; r.mu.Unlock() },
		OnAcquire:        func(e redlock.AcquireEvent) { r.mu.Lock(); r.acquires[e.Acquired]++; r.mu.Unlock() },
		OnNodeReply:      func(e redlock.NodeReplyEvent) { r.mu.Lock(); r.nodes[e.Op]++; r.mu.Unlock() },
		OnExtend:         func(e redlock.ExtendEvent) { r.mu.Lock(); r.extends[e.OK]++; r.mu.Unlock() },
		OnRenewalFailure: func(redlock.RenewalFailureEvent) { r.mu.Lock(); r.renewals++; r.mu.Unlock() },
		OnLost:           func(redlock.LostEvent) { r.mu.Lock(); r.lost++; r.mu.Unlock() },
		OnRelease: func(e redlock.ReleaseEvent) {
			r.mu.Lock()
			r.releases++
			r.held = append(r.held, e.Held)
			r.mu.Unlock()
		},
	}
}

func TestHooks(t *testing.T) {
	rec := newRecorder()
	c, servers := cluster(t, 3, redlock.WithHooks(rec.hooks()), redlock.WithTTL(time.Second))
	ctx := ctxT(t, 20*time.Second)

	a, err := c.TryLock(ctx, "h") // acquired
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "h") // conflict
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Lock(short, "h") // waits for a's release (no attempt meanwhile), gives up
	cancel()
	require.Error(t, err)
	require.NoError(t, a.Extend(ctx))
	require.NoError(t, a.Release(ctx))

	// A lost lock: its keys vanish, Extend finds out.
	b, err := c.TryLock(ctx, "h")
	require.NoError(t, err)
	for _, s := range servers {
		_, err := s.Do("DEL", "redlock:{h}")
		require.NoError(t, err)
	}
	require.ErrorIs(t, b.Extend(ctx), redlock.ErrLockLost)
	require.NoError(t, c.Close()) // stragglers' node replies are in

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, 2, rec.acquires[true])
	assert.Equal(t, 2, rec.acquires[false], "TryLock conflict and Lock timeout")
	assert.Equal(t, 2, rec.attempts[true])
	assert.Equal(t, 1, rec.attempts[false], "the TryLock conflict; the Lock call makes no attempt while its client holds the lock")
	assert.Equal(t, 1, rec.extends[true])
	assert.Equal(t, 1, rec.extends[false])
	assert.Equal(t, 1, rec.lost)
	assert.Equal(t, 1, rec.releases)
	assert.Equal(t, 3*(rec.attempts[true]+rec.attempts[false]), rec.nodes["acquire"], "every node's reply to every attempt")
	assert.GreaterOrEqual(t, rec.nodes["release"], 2, "the nodes whose acquisition had answered")
	assert.LessOrEqual(t, rec.nodes["release"], 3)
	assert.Equal(t, 6, rec.nodes["extend"])
	assert.Greater(t, rec.held[0], time.Duration(0))
}

func TestHooksRenewalFailureAndLoss(t *testing.T) {
	rec := newRecorder()
	c, servers := cluster(t, 3, redlock.WithHooks(rec.hooks()), redlock.WithTTL(600*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond))
	defer func() {
		for _, s := range servers[:2] {
			s.Resume()
		}
	}()
	err := c.Do(ctxT(t, 20*time.Second), "r", func(ctx context.Context) error {
		servers[0].Pause()
		servers[1].Pause()
		<-ctx.Done()
		return nil
	})
	require.ErrorIs(t, err, redlock.ErrLockLost)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.GreaterOrEqual(t, rec.renewals, 1)
	assert.Equal(t, 1, rec.lost, "validity ran out under Do")
}

// OnLost fires once per lock: a lock whose keys are gone, extended again
// and again (as a caller's own renewal loop would), is reported lost once,
// so that a metric of OnLost counts locks, not calls.
func TestOnLostOncePerLock(t *testing.T) {
	var lost atomic.Int32
	c, servers := cluster(t, 1, redlock.WithHooks(redlock.Hooks{OnLost: func(redlock.LostEvent) { lost.Add(1) }}))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "lost-once")
	require.NoError(t, err)
	other, err := c.Lock(ctx, "lost-other")
	require.NoError(t, err)
	for _, k := range servers[0].Keys("*lost-*") {
		_, err := servers[0].Do("DEL", k)
		require.NoError(t, err)
	}
	for range 3 {
		require.ErrorIs(t, l.Extend(ctx), redlock.ErrLockLost)
	}
	assert.Equal(t, int32(1), lost.Load(), "one lock lost, extended three times")
	require.ErrorIs(t, other.Extend(ctx), redlock.ErrLockLost)
	assert.Equal(t, int32(2), lost.Load(), "another lock lost")
}

// OnLost fires for read locks too, once per read lock: when ReadLock.Extend
// finds the reader gone (however often it is called again), and when the
// validity ReadLock.Keep watches runs out with the node paused (its
// renewals fail without a refusal, so only the lease's end tells).
func TestOnLostReadLock(t *testing.T) {
	t.Run("extend", func(t *testing.T) {
		var lost atomic.Int32
		c, servers := cluster(t, 1, redlock.WithHooks(redlock.Hooks{OnLost: func(redlock.LostEvent) { lost.Add(1) }}))
		ctx := ctxT(t, 10*time.Second)
		r, err := c.RLock(ctx, "rlost")
		require.NoError(t, err)
		for _, k := range servers[0].Keys("*rlost*") {
			_, err := servers[0].Do("DEL", k)
			require.NoError(t, err)
		}
		for range 3 {
			require.ErrorIs(t, r.Extend(ctx), redlock.ErrLockLost)
		}
		assert.Equal(t, int32(1), lost.Load(), "one read lock lost, extended three times")
	})
	t.Run("keep", func(t *testing.T) {
		lost := make(chan redlock.LostEvent, 4)
		c, servers := cluster(t, 1, redlock.WithTTL(600*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond),
			redlock.WithHooks(redlock.Hooks{OnLost: func(e redlock.LostEvent) { lost <- e }}))
		ctx := ctxT(t, 10*time.Second)
		r, err := c.RLock(ctx, "rkeep")
		require.NoError(t, err)
		kctx, cancel := r.Keep(ctx)
		defer cancel()
		servers[0].Pause()
		defer servers[0].Resume()
		select {
		case <-kctx.Done():
		case <-ctx.Done():
			t.Fatal("Keep's context did not end with the node paused")
		}
		require.ErrorIs(t, context.Cause(kctx), redlock.ErrLockLost)
		select {
		case e := <-lost:
			assert.Equal(t, "rkeep", e.Resource)
			require.ErrorIs(t, e.Err, redlock.ErrLockLost)
		case <-ctx.Done():
			t.Fatal("no OnLost for the read lock whose validity ran out")
		}
		time.Sleep(time.Until(r.Until())) // Keep ends a margin before Until
		require.ErrorIs(t, r.Extend(ctx), redlock.ErrLockLost, "validity ended: nothing sent")
		assert.Empty(t, lost, "OnLost fired twice for one read lock")
	})
}

// TestNodeReplyHookOnNodeGoroutine: with one node and a context that cannot
// be cancelled, the acquisition and release run their node call on the
// caller's goroutine, except with an OnNodeReply hook, which is promised the
// node's goroutine: a hook that hands its event to the caller (an unbuffered
// channel the caller reads after TryLock) must not deadlock (an adversarial
// review of the inline rounds found it did).
func TestNodeReplyHookOnNodeGoroutine(t *testing.T) {
	events := make(chan redlock.NodeReplyEvent) // unbuffered
	s := redistest.Start(t)
	c, err := redlock.Dial([]string{s.URL()}, redlock.WithHooks(redlock.Hooks{
		OnNodeReply: func(e redlock.NodeReplyEvent) { events <- e },
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	done := make(chan error, 1)
	go func() {
		// The caller reads the event after TryLock returned, and the
		// release's after Release returned.
		l, err := c.TryLock(context.Background(), "hooked")
		if err != nil {
			done <- err
			return
		}
		if e := <-events; e.Op != "acquire" {
			done <- fmt.Errorf("hook saw %q first", e.Op)
			return
		}
		err = l.Release(context.Background())
		<-events
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		go func() { // unblock the hook, so that Close can end
			for range events {
			}
		}()
		t.Fatal("TryLock or Release waits for its own hook: deadlock")
	}
}
