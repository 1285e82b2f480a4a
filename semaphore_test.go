package redlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// TestSemaphoreInvalid: bad input is refused with an error that names the
// problem, before any node is asked.
func TestSemaphoreInvalid(t *testing.T) {
	c3, err := redlock.Dial([]string{"redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"})
	require.NoError(t, err)
	defer c3.Close()
	c1, err := redlock.Dial([]string{"redis://127.0.0.1:1"})
	require.NoError(t, err)
	defer c1.Close()
	c2, err := redlock.Dial([]string{"redis://127.0.0.1:1", "redis://127.0.0.1:2"})
	require.NoError(t, err)
	defer c2.Close()
	for _, tc := range []struct {
		name string
		c    *redlock.Client
		sem  string
		n    int
		opts []redlock.SemaphoreOption
		want string
	}{
		{"empty name", c3, "", 2, nil, "empty name"},
		{"no permits", c3, "s", 0, nil, "0 permits"},
		{"negative permits", c3, "s", -3, nil, "-3 permits"},
		{"too many permits", c3, "s", redlock.MaxPermits + 1, nil, "1025 permits: it must have 1 to 1024"},
		{"name too long", c3, strings.Repeat("x", redlock.MaxResourceLen), 2, nil, "semaphore name of 1024 bytes too long: its slots' resource names are 1042 bytes, above 1024"},
		{"ttl below 1ms", c3, "s", 2, []redlock.SemaphoreOption{redlock.WithPermitTTL(time.Microsecond)}, "at least 1ms"},
		{"one node", c1, "s", 2, nil, "1 node(s) tolerate no failure: a permit needs 1 of 1 nodes"},
		{"two nodes", c2, "s", 2, nil, "2 node(s) tolerate no failure: a permit needs 2 of 2 nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.c.Semaphore(tc.sem, tc.n, tc.opts...)
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, s)
		})
	}
	s, err := c1.Semaphore("s", 2, redlock.AllowNoFaultTolerance())
	require.NoError(t, err, "one node is accepted when asked for")
	assert.Equal(t, 2, s.Permits())
	s, err = c3.Semaphore("s", 1)
	require.NoError(t, err)
	_, err = s.TryAcquire(context.Background(), redlock.WithPermitTTL(-time.Second))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = s.Acquire(context.Background(), redlock.AllowNoFaultTolerance())
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "AllowNoFaultTolerance applies to Client.Semaphore, not to one acquisition")
	var nilCtx context.Context // a variable: staticcheck flags a literal nil
	_, err = s.Acquire(nilCtx)
	require.ErrorIs(t, err, redlock.ErrInvalid, "a nil context is an error, not a panic")
	_, err = s.TryAcquire(nilCtx)
	require.ErrorIs(t, err, redlock.ErrInvalid)
}

// holding is one permit's time in the critical section, as its holder saw
// it.
type holding struct {
	in, out time.Time
}

// TestSemaphoreNeverMoreThanPermits: goroutines of several clients contend
// for the permits of one semaphore; at no time do more than permits of them
// hold one (counted live, and checked again on the history of every
// holder's time inside, each ending before its permit's validity did), and
// every permit is in use at some time.
func TestSemaphoreNeverMoreThanPermits(t *testing.T) {
	const (
		permits    = 3
		clients    = 3
		goroutines = 4 // per client
		each       = 8 // acquisitions per goroutine
	)
	servers := redistest.StartN(t, 3)
	var occ occupancy
	var mu sync.Mutex
	var history []holding
	var wg sync.WaitGroup
	ctx := ctxT(t, 60*time.Second)
	for range clients {
		c, err := redlock.Dial(redistest.URLs(servers))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		sem, err := c.Semaphore("jobs", permits, redlock.WithPermitTTL(5*time.Second))
		require.NoError(t, err)
		for range goroutines {
			wg.Go(func() {
				for range each {
					p, err := sem.Acquire(ctx)
					if !assert.NoError(t, err) {
						return
					}
					in := time.Now()
					occ.enter()
					time.Sleep(time.Duration(rand.N(5)+1) * time.Millisecond)
					occ.leave()
					out := time.Now()
					assert.True(t, out.Before(p.Until()), "held past the permit's validity")
					mu.Lock()
					history = append(history, holding{in, out})
					mu.Unlock()
					assert.NoError(t, p.Release(ctx))
				}
			})
		}
	}
	wg.Wait()
	assert.LessOrEqual(t, occ.most.Load(), int64(permits), "more holders than permits at once")
	assert.Equal(t, int64(permits), occ.most.Load(), "every permit in use at some time")
	assert.Equal(t, int64(clients*goroutines*each), occ.total.Load())
	// The history: sweep the entries and exits in time order.
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	for _, h := range history {
		events = append(events, event{h.in, 1}, event{h.out, -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an exit before an entry at the same instant
	})
	inside, most := 0, 0
	for _, e := range events {
		inside += e.delta
		most = max(most, inside)
	}
	assert.LessOrEqual(t, most, permits, "the history has more holders than permits at once")
}

// TestSemaphoreCrashedHolderExpires: a holder that never releases (it
// crashed) frees its permit when its lease runs out, and a waiter of another
// client gets it then.
func TestSemaphoreCrashedHolderExpires(t *testing.T) {
	servers := redistest.StartN(t, 3)
	crashed, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer crashed.Close()
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer other.Close()
	const ttl = 400 * time.Millisecond
	sem, err := crashed.Semaphore("crash", 2, redlock.WithPermitTTL(ttl))
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	for range 2 {
		_, err := sem.Acquire(ctx)
		require.NoError(t, err)
	}
	sem2, err := other.Semaphore("crash", 2)
	require.NoError(t, err)
	_, err = sem2.TryAcquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "both permits are held")
	p, err := sem2.Acquire(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), ttl-50*time.Millisecond, "granted before the crashed holder's lease ran out")
	require.NoError(t, p.Release(ctx))
}

// TestSemaphoreExtend: an extended permit outlives its first lease, and its
// slot is not given to anyone meanwhile.
func TestSemaphoreExtend(t *testing.T) {
	c, servers := cluster(t, 3)
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer other.Close()
	const ttl = 600 * time.Millisecond
	sem, err := c.Semaphore("ext", 1, redlock.WithPermitTTL(ttl))
	require.NoError(t, err)
	sem2, err := other.Semaphore("ext", 1)
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, ttl, p.TTL())
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		time.Sleep(ttl / 4)
		before := p.Until()
		require.NoError(t, p.Extend(ctx))
		assert.True(t, p.Until().After(before), "Extend moves Until")
		_, err := sem2.TryAcquire(ctx)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "the extended permit's slot was given away")
	}
	require.NoError(t, p.Release(ctx))
	// An Acquire bounded to half the TTL, not one TryAcquire, whose single
	// attempt a node still landing the release could refuse.
	actx, cancel := context.WithTimeout(ctx, ttl/2)
	q, err := sem2.Acquire(actx)
	cancel()
	require.NoError(t, err, "released, the permit is free")
	require.NoError(t, q.Release(ctx))
	require.ErrorIs(t, p.Extend(ctx), redlock.ErrLockLost, "a released permit is not extended")
}

// TestSemaphoreMixedTTLs: holders of different TTLs share a semaphore; a
// later one with a short TTL never shortens the lease of an earlier one: once
// the short one expired, the others still hold their slots on every node with
// the TTL they asked for, and exactly its slot is free again.
func TestSemaphoreMixedTTLs(t *testing.T) {
	c, servers := cluster(t, 3)
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer other.Close()
	sem, err := c.Semaphore("mixed", 3)
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	long1, err := sem.Acquire(ctx, redlock.WithPermitTTL(8*time.Second))
	require.NoError(t, err)
	short, err := sem.Acquire(ctx, redlock.WithPermitTTL(200*time.Millisecond))
	require.NoError(t, err)
	long2, err := sem.Acquire(ctx, redlock.WithPermitTTL(6*time.Second))
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the short lease is over
	for _, p := range []*redlock.Permit{long1, long2} {
		key := redlock.LockKey(redlock.DefaultKeyPrefix, redlock.SemaphoreSlot("mixed", p.Slot()))
		for _, srv := range servers {
			pttl, err := redis.Int64(srv.Do("PTTL", key))
			require.NoError(t, err)
			assert.Greater(t, pttl, (p.TTL() - time.Second).Milliseconds(), "slot %d's lease was shortened on %s", p.Slot(), srv.Addr())
		}
		assert.True(t, time.Now().Before(p.Until()))
	}
	sem2, err := other.Semaphore("mixed", 3)
	require.NoError(t, err)
	q, err := sem2.TryAcquire(ctx)
	require.NoError(t, err, "the short permit's slot is free")
	assert.Equal(t, short.Slot(), q.Slot())
	_, err = sem2.TryAcquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "only the short permit's slot was free")
	require.NoError(t, long1.Extend(ctx))
	require.NoError(t, long2.Extend(ctx))
	for _, p := range []*redlock.Permit{long1, long2, q} {
		require.NoError(t, p.Release(ctx))
	}
	require.ErrorIs(t, short.Extend(ctx), redlock.ErrLockLost, "an expired permit is not revived")
}

// TestSemaphoreWaiterWoken: a waiting Acquire is woken by another client's
// release, not by its resync, which this client spaces out to seconds.
func TestSemaphoreWaiterWoken(t *testing.T) {
	servers := redistest.StartN(t, 3)
	waiter, err := redlock.Dial(redistest.URLs(servers), redlock.WithRetryBackoff(time.Millisecond, 20*time.Second))
	require.NoError(t, err)
	defer waiter.Close()
	holder, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer holder.Close()
	ctx := ctxT(t, 30*time.Second)
	hsem, err := holder.Semaphore("wake", 2)
	require.NoError(t, err)
	var held []*redlock.Permit
	for range 2 {
		p, err := hsem.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, p)
	}
	wsem, err := waiter.Semaphore("wake", 2)
	require.NoError(t, err)
	got := make(chan *redlock.Permit, 1)
	go func() {
		p, err := wsem.Acquire(ctx)
		assert.NoError(t, err)
		got <- p
	}()
	time.Sleep(300 * time.Millisecond) // the waiter made its passes and listens
	select {
	case <-got:
		t.Fatal("granted while every permit is held")
	default:
	}
	released := time.Now()
	require.NoError(t, held[1].Release(ctx))
	select {
	case p := <-got:
		require.NotNil(t, p)
		t.Logf("woken %v after the release", time.Since(released))
		assert.Equal(t, held[1].Slot(), p.Slot())
		require.NoError(t, p.Release(ctx))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release (its resync is 10 to 20 s away)")
	}
	require.NoError(t, held[0].Release(ctx))
}

// TestSemaphoreNodeDown: with a node killed, then another paused (within the
// fault tolerance of N=5, two nodes), permits are still granted, extended and
// released, never more than permits of them at once, and waiters are still
// served.
func TestSemaphoreNodeDown(t *testing.T) {
	servers := redistest.StartN(t, 5)
	// With two nodes down, every call needs all three others: a node timeout
	// of 200 ms was one scheduling stall away from a failed Extend or
	// Release on a loaded machine (a flake audit, 6 December 2026); what is
	// tested is exclusion and progress, not latency.
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer c.Close()
	sem, err := c.Semaphore("down", 2, redlock.WithPermitTTL(3*time.Second))
	require.NoError(t, err)
	ctx := ctxT(t, 60*time.Second)
	servers[4].Kill()
	servers[0].Pause()
	defer servers[0].Resume()
	var occ occupancy
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 3 {
				p, err := sem.Acquire(ctx)
				if !assert.NoError(t, err) {
					return
				}
				occ.enter()
				time.Sleep(2 * time.Millisecond)
				assert.NoError(t, p.Extend(ctx))
				occ.leave()
				assert.NoError(t, p.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, occ.most.Load(), int64(2))
	assert.Equal(t, int64(12), occ.total.Load())
}

// TestSemaphoreAcquireEnds: a waiting Acquire returns when its context ends
// (ErrNotAcquired and the context's error) and when the client is closed
// (ErrClosed).
func TestSemaphoreAcquireEnds(t *testing.T) {
	c, _ := cluster(t, 3)
	sem, err := c.Semaphore("ends", 1)
	require.NoError(t, err)
	p, err := sem.Acquire(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	_, err = sem.TryAcquire(ctxT(t, 5*time.Second))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), `semaphore "ends": each of its 1 permits is held or being taken through this Semaphore`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = sem.Acquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	done := make(chan error, 1)
	go func() {
		_, err := sem.Acquire(context.Background())
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.Close())
	select {
	case err := <-done:
		require.True(t, errors.Is(err, redlock.ErrClosed), "got %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return at Close")
	}
	_ = p
}

// TestSemaphoreExpiredServeEveryWaiter: permits that expire (no release, so no
// notification) are found by the waiters' resync, whichever waiter is first;
// the permits they release then wake the others.
func TestSemaphoreExpiredServeEveryWaiter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	crashed, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer crashed.Close()
	c, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	gone, err := crashed.Semaphore("expire-all", 2, redlock.WithPermitTTL(300*time.Millisecond))
	require.NoError(t, err)
	for range 2 {
		_, err := gone.Acquire(ctx)
		require.NoError(t, err)
	}
	sem, err := c.Semaphore("expire-all", 2, redlock.WithPermitTTL(5*time.Second))
	require.NoError(t, err)
	got := make(chan *redlock.Permit, 4)
	for range 4 {
		go func() {
			p, err := sem.Acquire(ctx)
			assert.NoError(t, err)
			got <- p
		}()
	}
	var first []*redlock.Permit
	for range 2 {
		select {
		case p := <-got:
			require.NotNil(t, p)
			first = append(first, p)
		case <-time.After(5 * time.Second):
			t.Fatal("the expired permits were not found")
		}
	}
	select {
	case <-got:
		t.Fatal("a third permit of 2")
	case <-time.After(200 * time.Millisecond):
	}
	for _, p := range first {
		require.NoError(t, p.Release(ctx))
	}
	for range 2 {
		select {
		case p := <-got:
			require.NotNil(t, p)
			require.NoError(t, p.Release(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not served after the releases")
		}
	}
}
