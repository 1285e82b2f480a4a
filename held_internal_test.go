package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// firstAttemptWaits reports whether c counts a lock on resource as held: a
// Lock call's first attempt would wait for its release.
func firstAttemptWaits(c *Client, resource string) bool { return !c.mayAttempt(resource, true, false) }

// heldCount is the number of resources c counts locks held on.
func heldCount(c *Client) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return len(c.held)
}

// A lock left to expire stops counting as held once its validity ends, and
// its entry is freed: a job that takes locks as TTLs and never releases
// them used to leave one entry per resource for good, and its client's later
// Lock calls on such a resource never queued (they waited for a release of
// their own that would never come). A late Release of a lock whose entry
// was swept counts nothing against a lock taken since, and an Extend that
// returns after the sweep counts its lock again.
func TestHeldLocksExpire(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	fake := clock.NewFake(time.Now())
	c, err := New([]node.Node{n}, WithClock(fake), WithTTL(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.realNow = fake.Now // the keys' lifetime on the same clock (Lock.heldReal)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lock := func(resource string) *Lock {
		t.Helper()
		l, err := c.Lock(ctx, resource)
		require.NoError(t, err)
		return l
	}
	lock("expired")
	require.True(t, firstAttemptWaits(c, "expired"))
	require.True(t, c.holdsHere("expired"))
	require.False(t, c.shouldQueue("expired"))
	fake.Advance(10 * time.Second)
	require.False(t, firstAttemptWaits(c, "expired"), "held past its validity")
	require.False(t, c.holdsHere("expired"))

	// Past its validity, a lock's key lives on for the drift allowance: an
	// attempt of this client's then queues (it would land after that key,
	// released or expired, is gone).
	lock("overrun")
	fake.Advance(9950 * time.Millisecond)
	require.False(t, firstAttemptWaits(c, "overrun"))
	require.True(t, c.shouldQueue("overrun"), "an attempt while the lock's key may live does not queue")
	fake.Advance(50 * time.Millisecond)
	require.False(t, c.shouldQueue("overrun"))

	// Many locks never released: the entries of expired ones are swept as
	// new ones are taken, the live ones kept.
	for i := range 200 {
		lock(fmt.Sprintf("job%d", i))
	}
	require.GreaterOrEqual(t, heldCount(c), 200)
	fake.Advance(10 * time.Second)
	live := make([]*Lock, 0, 100)
	for i := range 100 {
		live = append(live, lock(fmt.Sprintf("next%d", i)))
	}
	require.Less(t, heldCount(c), 200, "the expired locks' entries were never swept")
	for _, l := range live {
		require.True(t, c.holdsHere(l.resource), "a live lock's entry was swept")
	}

	// One resource locked again and again, never released: its list keeps
	// only the locks still held.
	for range 100 {
		lock("again and again")
		fake.Advance(10 * time.Second)
		_, err := s.Do("DEL", c.lockKey("again and again")) // as if it expired on the node
		require.NoError(t, err)
	}
	c.qmu.Lock()
	listed := 0
	for l := c.held["again and again"]; l != nil; l = l.heldNext {
		listed++
	}
	c.qmu.Unlock()
	require.Equal(t, 1, listed, "locks no longer held stay listed")

	// A late Release of a swept lock leaves a newer lock's count alone.
	old := lock("again")
	fake.Advance(10 * time.Second)
	c.qmu.Lock()
	c.sweepHeld(fake.Now())
	c.qmu.Unlock()
	_, err = s.Do("DEL", c.lockKey("again")) // as if it expired on the node
	require.NoError(t, err)
	newer := lock("again")
	require.ErrorIs(t, old.Release(ctx), ErrLockLost)
	require.True(t, c.holdsHere("again"), "the old lock's late Release uncounted the new one")
	require.NoError(t, newer.Release(ctx))
	require.False(t, firstAttemptWaits(c, "again"))
	c.qmu.Lock()
	_, kept := c.held["again"]
	c.qmu.Unlock()
	require.False(t, kept, "a released resource's entry was kept")

	// An Extend that returns after its lock's entry was swept counts it
	// again.
	ext := lock("extended")
	c.qmu.Lock()
	c.sweepHeld(fake.Now().Add(time.Minute))
	c.qmu.Unlock()
	require.False(t, c.holdsHere("extended"))
	require.NoError(t, ext.Extend(ctx))
	require.True(t, c.holdsHere("extended"), "an extended lock does not count as held")
	require.NoError(t, ext.Release(ctx))
	require.False(t, firstAttemptWaits(c, "extended"))
}
