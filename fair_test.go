package redlock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// In fair mode, separate clients get the lock in the order they asked for it.
func TestFairOrder(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	dial := func(opts ...redlock.Option) *redlock.Client {
		c, err := redlock.Dial(redistest.URLs(servers), append([]redlock.Option{redlock.WithFair()}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	held, err := dial().Lock(ctx, "fifo")
	require.NoError(t, err)

	const waiters = 4
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		attempted := make(chan struct{})
		var once sync.Once
		c := dial(redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) {
			once.Do(func() { close(attempted) })
		}}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, "fifo")
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, l.Release(ctx))
		}()
		<-attempted // queued: the next waiter comes after it
	}
	require.NoError(t, held.Release(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3}, order)
}

// A waiter that crashed at the head of the queue blocks the others only
// until its lease runs out.
func TestFairCrashedWaiter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const key, fence = "redlock:{crash}", "redlock:{crash}:fence"
	ghost := node.Waiter{ID: "ghost", Ticket: 1, Lease: 300 * time.Millisecond}
	holder := node.Waiter{ID: "holder", Ticket: 0, Lease: time.Minute}
	for _, s := range servers { // the ghost queued while the lock was held, and never came back
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		a, err := n.AcquireFair(ctx, key, fence, "holder-token", time.Minute, holder)
		require.NoError(t, err)
		require.True(t, a.OK)
		a, err = n.AcquireFair(ctx, key, fence, "ghost-token", time.Minute, ghost)
		require.NoError(t, err)
		require.False(t, a.OK)
		_, err = n.Release(ctx, key, "holder-token", false)
		require.NoError(t, err)
		require.NoError(t, n.Close())
	}
	var attempts atomic.Int64
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithFair(),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { attempts.Add(1) }}))
	require.NoError(t, err)
	defer c.Close()
	l, err := c.Lock(ctx, "crash")
	require.NoError(t, err)
	assert.Greater(t, attempts.Load(), int64(1), "the ghost at the head held the first attempt back")
	require.NoError(t, l.Release(ctx))
	_, err = c.TryLock(ctx, "crash")
	require.NoError(t, err, "TryLock queues too, and the queue is empty")
}
