package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// Two candidates: one leads, the other waits, and leads after Resign at once
// (the release wakes it, well before the lease would have lapsed), with a
// higher term; Leader follows.
func TestCampaignResignHandsOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		opts  []redlock.Option
	}{
		{"N=1", 1, nil},
		{"N=3", 3, nil},
		{"N=3 fair", 3, []redlock.Option{redlock.WithFair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ttl = 10 * time.Second
			servers := redistest.StartN(t, tc.nodes)
			opts := append([]redlock.Option{redlock.WithTTL(ttl)}, tc.opts...)
			a, err := redlock.Dial(redistest.URLs(servers), opts...)
			require.NoError(t, err)
			defer a.Close()
			b, err := redlock.Dial(redistest.URLs(servers), opts...)
			require.NoError(t, err)
			defer b.Close()
			ctx := ctxT(t, 30*time.Second)

			la, err := a.Campaign(ctx, "primary", "a:1")
			require.NoError(t, err)
			assert.Positive(t, la.Term())
			assert.Equal(t, "a:1", la.Value())
			assert.Equal(t, "primary", la.Name())
			require.NoError(t, la.Context().Err())

			elected := make(chan *redlock.Leadership, 1)
			errs := make(chan error, 1)
			go func() {
				lb, err := b.Campaign(ctx, "primary", "b:1")
				errs <- err
				elected <- lb
			}()
			info, err := b.Leader(ctx, "primary")
			require.NoError(t, err)
			assert.Equal(t, la.Info(), info, "Leader reads the leader's record")

			resigned := time.Now()
			require.NoError(t, la.Resign(ctx))
			require.NoError(t, <-errs)
			lb := <-elected
			defer lb.Resign(context.Background())
			assert.Less(t, time.Since(resigned), ttl/2, "the next candidate waited for the lease instead of the release")
			assert.Greater(t, lb.Term(), la.Term(), "terms increase across leaders")
			assert.ErrorIs(t, context.Cause(la.Context()), context.Canceled, "the resigned leader's context ended")
			require.NoError(t, la.Resign(ctx), "resigning twice")

			info, err = a.Leader(ctx, "primary")
			require.NoError(t, err)
			assert.Equal(t, redlock.LeaderInfo{Name: "primary", Value: "b:1", Term: lb.Term(), Since: lb.Since()}, info)
			assert.False(t, info.Since.IsZero())
		})
	}
}

// A leader whose nodes are paused sees its context end before its lease
// could have lapsed on them (Until is the validity, TTL − drift after the
// last renewal's start, which is earlier than the nodes' expiry).
func TestLeadershipContextEndsBeforeLease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	const ttl = 2 * time.Second // the context ends TTL/10 before the validity
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	defer func() {
		for _, s := range servers[:2] {
			s.Resume()
		}
	}()
	ctx := ctxT(t, 20*time.Second)
	ld, err := c.Campaign(ctx, "paused", "me")
	require.NoError(t, err)
	servers[0].Pause()
	servers[1].Pause()
	paused := time.Now()
	<-ld.Done()
	ended := time.Now()
	until := ld.Until()
	assert.ErrorIs(t, context.Cause(ld.Context()), redlock.ErrLockLost)
	assert.True(t, ended.Before(until), "the leadership's context ended %v after the validity", ended.Sub(until))
	assert.True(t, ended.Before(paused.Add(ttl)), "ended %v after the pause: later than a lease taken at the pause", ended.Sub(paused))
	err = ld.Proclaim(ctx, "still me?")
	require.ErrorIs(t, err, redlock.ErrLockLost, "a leader whose leadership ended proclaims nothing")
}

// A deposed leader (its lock gone, another elected) cannot Proclaim: the
// nodes refuse it, its context ends, and the record stays the new leader's.
func TestProclaimByDeposedLeaderFails(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithTTL(10*time.Second))
	ctx := ctxT(t, 20*time.Second)
	old, err := c.Campaign(ctx, "svc", "old")
	require.NoError(t, err)
	require.NoError(t, old.Proclaim(ctx, "old, v2"), "Proclaim by the leader")
	info, err := c.Leader(ctx, "svc")
	require.NoError(t, err)
	assert.Equal(t, "old, v2", info.Value)
	assert.Equal(t, uint64(1), info.Rev)

	for _, s := range servers { // the lease lapses, as after a long pause
		_, err := s.Do("DEL", redlock.LockKey(redlock.DefaultKeyPrefix, "svc"))
		require.NoError(t, err)
	}
	other, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer other.Close()
	now, err := other.Campaign(ctx, "svc", "new")
	require.NoError(t, err)
	defer now.Resign(context.Background())
	assert.Greater(t, now.Term(), old.Term())

	err = old.Proclaim(ctx, "old, v3")
	require.ErrorIs(t, err, redlock.ErrLockLost)
	<-old.Done()
	assert.ErrorIs(t, context.Cause(old.Context()), redlock.ErrLockLost)
	info, err = c.Leader(ctx, "svc")
	require.NoError(t, err)
	assert.Equal(t, "new", info.Value)
	assert.Equal(t, now.Term(), info.Term)
	assert.ErrorIs(t, old.Resign(ctx), redlock.ErrLockLost, "the deposed leader's lock was not held")
}

// Leader returns the highest term among a majority's answers: a lapsed
// leader's record left on one node loses against the new leader's, whichever
// majority answers.
func TestLeaderReturnsHighestTerm(t *testing.T) {
	for _, paused := range []int{0, 1} {
		t.Run("paused node "+string(rune('0'+paused)), func(t *testing.T) {
			// The first leader's client waits for its nodes (a generous node
			// timeout): its fence counter must reach every node, or a node
			// whose write timed out under load would hold the lock of the
			// second leader below without a counter while the others have
			// one, which no grant may trust (docs/fencing.md), and the second
			// Campaign could not win before the first lease ends (CI, 6
			// December 2026).
			c, servers := cluster(t, 3, redlock.WithTTL(20*time.Second), redlock.WithNodeTimeout(5*time.Second))
			ctx := ctxT(t, 20*time.Second)
			first, err := c.Campaign(ctx, "db", "first")
			require.NoError(t, err)
			key := redlock.LockKey(redlock.DefaultKeyPrefix, "db")
			for _, s := range servers {
				awaitKeyOn(t, s, redlock.FenceKey(redlock.DefaultKeyPrefix, "db"))
			}
			awaitRecordOn(t, servers[2], key) // the record that node 2 keeps
			for _, s := range servers[:2] {   // lapsed on nodes 0 and 1, still on node 2
				_, err := s.Do("DEL", key)
				require.NoError(t, err)
			}
			other, err := redlock.Dial(redistest.URLs(servers), redlock.WithTTL(20*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
			require.NoError(t, err)
			defer other.Close()
			second, err := other.Campaign(ctx, "db", "second")
			require.NoError(t, err)
			require.Greater(t, second.Term(), first.Term())
			awaitRecordOn(t, servers[0], key)
			awaitRecordOn(t, servers[1], key)

			servers[paused].Pause()
			defer servers[paused].Resume()
			info, err := other.Leader(ctx, "db")
			require.NoError(t, err)
			assert.Equal(t, "second", info.Value)
			assert.Equal(t, second.Term(), info.Term)
		})
	}
}

// awaitRecordOn waits until s stores a record beside key (the write reached
// a majority before Campaign returned; the last node may answer later).
func awaitRecordOn(t *testing.T, s *redistest.Server, key string) {
	t.Helper()
	awaitKeyOn(t, s, key+":meta")
}

// awaitKeyOn waits until s stores key.
func awaitKeyOn(t *testing.T, s *redistest.Server, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := s.Do("EXISTS", key)
		return err == nil && v == int64(1)
	}, 5*time.Second, 5*time.Millisecond, "%s never reached the node", key)
}

// Observe sees the initial vacancy, each new leader and each new value,
// through notifications: with the resync pushed out of the test's reach,
// nothing is read but when a node tells of a change.
func TestObserveSeesEachChange(t *testing.T) {
	defer redlock.SetObserveResync(time.Hour)()
	servers := redistest.StartN(t, 3)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // Observe's goroutines end with Close
	// The nodes' replies to the observer's reads (op "leader").
	var reads atomic.Int64
	count := func() int { return int(reads.Load()) }
	watcher, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
		if e.Op == "leader" {
			reads.Add(1)
		}
	}}))
	require.NoError(t, err)
	defer watcher.Close()
	a, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer a.Close()
	b, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	seen, err := watcher.Observe(octx, "svc")
	require.NoError(t, err)
	next := func() redlock.LeaderInfo {
		t.Helper()
		select {
		case li, ok := <-seen:
			require.True(t, ok, "Observe's channel closed early")
			return li
		case <-ctx.Done():
			t.Fatal("Observe saw no change")
		}
		return redlock.LeaderInfo{}
	}
	first := next()
	assert.True(t, first.Vacant(), "nobody leads yet: %+v", first)
	assert.Equal(t, "svc", first.Name)

	la, err := a.Campaign(ctx, "svc", "a")
	require.NoError(t, err)
	li := next()
	assert.Equal(t, la.Info(), li)

	require.NoError(t, la.Proclaim(ctx, "a, v2"))
	li = next()
	assert.Equal(t, "a, v2", li.Value)
	assert.Equal(t, la.Term(), li.Term)
	assert.Equal(t, uint64(1), li.Rev)

	elected := make(chan *redlock.Leadership, 1)
	go func() {
		lb, err := b.Campaign(ctx, "svc", "b")
		assert.NoError(t, err)
		elected <- lb
	}()
	require.NoError(t, la.Resign(ctx))
	lb := <-elected
	require.NotNil(t, lb)
	li = next()
	if li.Vacant() { // the release, seen before b's record
		li = next()
	}
	assert.Equal(t, lb.Info(), li)
	assert.Greater(t, li.Term, la.Term())

	require.NoError(t, lb.Resign(ctx))
	li = next()
	assert.True(t, li.Vacant(), "the last leader resigned: %+v", li)
	assert.Positive(t, count())
	assert.Less(t, count(), 200, "reads on notifications only, not polling")

	stopObserving()
	for range seen { // closed once its context ended
	}
}

// A resignation is told by the release itself: a leader elected without
// waiting leaves no waiters' queue on the nodes, and its release still tells
// the name's channel (an election's lock key is watched: a plain lock's
// release tells only its queue), so the observer sees the vacancy at once,
// with the resync out of reach.
func TestObserveSeesAResignationWithNobodyQueued(t *testing.T) {
	defer redlock.SetObserveResync(time.Hour)()
	ctx := ctxT(t, 10*time.Second)
	a, next := observedClient(t, ctx, "lone")
	require.True(t, next("the vacancy").Vacant())
	la, err := a.Campaign(ctx, "lone", "a")
	require.NoError(t, err)
	assert.Equal(t, la.Info(), next("the leader"))
	require.NoError(t, la.Resign(ctx))
	assert.True(t, next("the resignation").Vacant())
}

// A plain lock taken WithMetadata has a holder's record that Observe and
// Leader read: its release tells the key's channel as an election's does
// (found by an adversarial review of the queue's mark: it did not).
func TestObserveSeesTheReleaseOfALockWithMetadata(t *testing.T) {
	defer redlock.SetObserveResync(time.Hour)()
	ctx := ctxT(t, 10*time.Second)
	a, next := observedClient(t, ctx, "plain")
	require.True(t, next("the vacancy").Vacant())
	l, err := a.Lock(ctx, "plain", redlock.WithMetadata("a"))
	require.NoError(t, err)
	assert.Equal(t, "a", next("the holder").Value)
	require.NoError(t, l.Release(ctx))
	assert.True(t, next("the release").Vacant())
}

// observedClient starts three servers, a client observing name on them (its
// resync is the caller's to set) and another client, a, to lock with; next
// returns the next record the observer is sent, failing the test with what
// it waited for when ctx ends first.
func observedClient(t *testing.T, ctx context.Context, name string) (a *redlock.Client, next func(what string) redlock.LeaderInfo) {
	t.Helper()
	servers := redistest.StartN(t, 3)
	watcher, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	t.Cleanup(func() { _ = watcher.Close() })
	a, err = redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	seen, err := watcher.Observe(ctx, name)
	require.NoError(t, err)
	return a, func(what string) redlock.LeaderInfo {
		t.Helper()
		select {
		case li, ok := <-seen:
			require.True(t, ok, "Observe's channel closed early")
			return li
		case <-ctx.Done():
			t.Fatalf("Observe did not see %s", what)
		}
		return redlock.LeaderInfo{}
	}
}

// A change that no node tells of, a holder's lease lapsing (a key's expiry
// publishes nothing), is seen on the next resync: within 1 s of the keys'
// expiry with the resync at 250 ms (a period and a read, with room for a
// loaded machine), and not within 2 s with it out of the test's reach (so it
// is the resync that saw it).
func TestObserveResyncSeesALapse(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	const ttl = 600 * time.Millisecond
	for _, tc := range []struct {
		name   string
		resync time.Duration
		within time.Duration // the lapse is to be seen this soon after the keys expired, or not at all
		seen   bool
	}{
		{"resync 250ms", 250 * time.Millisecond, time.Second, true},
		{"resync 1h", time.Hour, 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer redlock.SetObserveResync(tc.resync)()
			c, _ := cluster(t, 3, redlock.WithTTL(ttl))
			ctx := ctxT(t, 20*time.Second)
			start := time.Now() // before every node's SET: each key expires before start+ttl
			l, err := c.Lock(ctx, "job", redlock.WithMetadata("holder-1"))
			require.NoError(t, err)
			octx, stopObserving := context.WithCancel(ctx)
			defer stopObserving()
			seen, err := c.Observe(octx, "job")
			require.NoError(t, err)
			select {
			case li := <-seen:
				require.False(t, li.Vacant(), "the lock is held: %+v", li)
				assert.Equal(t, "holder-1", li.Value)
			case <-ctx.Done():
				t.Fatal("Observe sent nothing")
			}
			require.True(t, time.Now().Before(l.Until()), "the first record came after the lease ended: the test is too slow to say anything")

			expired := start.Add(ttl)
			wait := time.NewTimer(time.Until(expired.Add(tc.within)))
			defer wait.Stop()
			select {
			case li := <-seen:
				lag := time.Since(expired)
				require.True(t, tc.seen, "a record %v after the keys expired, with no resync in reach: %+v", lag, li)
				assert.True(t, li.Vacant(), "the lease lapsed: %+v", li)
				t.Logf("the lapse seen %v after the keys expired (resync %v)", lag, tc.resync)
			case <-wait.C:
				require.False(t, tc.seen, "the lapse not seen within %v of the keys' expiry (resync %v)", tc.within, tc.resync)
			}
			stopObserving()
			for range seen {
			}
		})
	}
}

// The holder metadata of a plain lock: Leader reads it (with the token as
// its term when fenced), only while the lock is held.
func TestWithMetadata(t *testing.T) {
	c, servers := cluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	_, err := c.Leader(ctx, "job")
	require.ErrorIs(t, err, redlock.ErrNoLeader)

	l, err := c.Lock(ctx, "job", redlock.WithMetadata("host-1 pid 42"))
	require.NoError(t, err)
	info, err := c.Leader(ctx, "job")
	require.NoError(t, err)
	assert.Equal(t, "host-1 pid 42", info.Value)
	assert.Zero(t, info.Term, "not fenced")
	assert.WithinDuration(t, time.Now(), info.Since, 5*time.Second)
	require.NoError(t, l.Release(ctx))
	// Release returns at a majority: the last node's delete may land later,
	// and until then its record is the holder's (a leftover on one node).
	key := redlock.LockKey(redlock.DefaultKeyPrefix, "job")
	// The record was written on a majority when Lock returned; the last
	// node's write may land after the release there, and is then refused
	// (writemeta.lua writes only beside the writer's own lock key).
	records := 0
	for _, s := range servers {
		require.Eventually(t, func() bool { return len(s.Keys(key)) == 0 }, 5*time.Second, 5*time.Millisecond)
		records += len(s.Keys(key + ":meta"))
	}
	assert.GreaterOrEqual(t, records, 2, "the record stays on a majority, until its TTL")
	_, err = c.Leader(ctx, "job")
	require.ErrorIs(t, err, redlock.ErrNoLeader, "a released holder's record is not read")

	l, err = c.Lock(ctx, "job", redlock.WithMetadata("fenced"), redlock.WithFence())
	require.NoError(t, err)
	defer l.Release(ctx)
	tok, err := l.Fence(ctx)
	require.NoError(t, err)
	info, err = c.Leader(ctx, "job")
	require.NoError(t, err)
	assert.Equal(t, tok, info.Term)

	other, err := c.Lock(ctx, "other") // without metadata
	require.NoError(t, err)
	defer other.Release(ctx)
	_, err = c.Leader(ctx, "other")
	require.ErrorIs(t, err, redlock.ErrNoLeader)
}

// Bad input is a clear ErrInvalid, before anything is sent, never a panic.
func TestElectionInvalidInput(t *testing.T) {
	c, _ := cluster(t, 1)
	ctx := ctxT(t, 10*time.Second)
	long := strings.Repeat("x", redlock.MaxMetadataLen+1)
	for name, err := range map[string]error{
		"Campaign empty name":   errOf(c.Campaign(ctx, "", "v")),
		"Campaign nil ctx":      errOf(c.Campaign(nil, "n", "v")), //nolint:staticcheck
		"Campaign long value":   errOf(c.Campaign(ctx, "n", long)),
		"Campaign metadata":     errOf(c.Campaign(ctx, "n", "v", redlock.WithMetadata("x"))),
		"Campaign bad ttl":      errOf(c.Campaign(ctx, "n", "v", redlock.WithLockTTL(-1))),
		"Campaign bad margin":   errOf(c.Campaign(ctx, "n", "v", redlock.WithSafetyMargin(time.Hour))),
		"Leader empty name":     errOf(c.Leader(ctx, "")),
		"Leader nil ctx":        errOf(c.Leader(nil, "n")), //nolint:staticcheck
		"Observe empty name":    errOf(c.Observe(ctx, "")),
		"Observe nil ctx":       errOf(c.Observe(nil, "n")), //nolint:staticcheck
		"WithMetadata too long": errOf(c.Lock(ctx, "n", redlock.WithMetadata(long))),
	} {
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
	ld, err := c.Campaign(ctx, "n", "v")
	require.NoError(t, err)
	assert.ErrorIs(t, ld.Proclaim(ctx, long), redlock.ErrInvalid)
	assert.ErrorIs(t, ld.Proclaim(nil, "v"), redlock.ErrInvalid) //nolint:staticcheck
	assert.ErrorIs(t, ld.Resign(nil), redlock.ErrInvalid)        //nolint:staticcheck
	require.NoError(t, ld.Resign(ctx))
	assert.ErrorIs(t, ld.Proclaim(ctx, "v"), redlock.ErrLockLost, "after Resign")
}

func errOf[T any](_ T, err error) error { return err }

// A user with only the minimal ACL (docs/operations.md) campaigns,
// proclaims, renews, reads and observes the leader, and resigns: the
// record's scripts call no other command.
func TestElectionMinimalACL(t *testing.T) {
	s := redistest.Start(t)
	args := []any{"SETUSER", "locker"}
	for _, f := range strings.Fields(MinimalACL) {
		args = append(args, f)
	}
	_, err := s.Do("ACL", args...)
	require.NoError(t, err)
	url := "redis://locker:lock-pw@" + s.Addr()
	// A TTL of 600 ms (renewed every 200 ms): at 300 ms, a stall of about
	// 165 ms ended the leadership's context (a flake audit, 6 December 2026;
	// TestDoRenewsAcrossTTLs was moved to 600 ms for the same reason).
	c, err := redlock.Dial([]string{url}, redlock.WithTTL(600*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)

	seen, err := c.Observe(ctx, "acl-election")
	require.NoError(t, err)
	assert.True(t, (<-seen).Vacant())
	ld, err := c.Campaign(ctx, "acl-election", "v1")
	require.NoError(t, err)
	assert.Equal(t, ld.Info(), <-seen)
	require.NoError(t, ld.Proclaim(ctx, "v2"))
	assert.Equal(t, "v2", (<-seen).Value)
	// Renewed past several TTLs, the record with it.
	deadline := time.Now().Add(1800 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.NoError(t, ld.Context().Err())
		info, err := c.Leader(ctx, "acl-election")
		require.NoError(t, err)
		require.Equal(t, "v2", info.Value)
		<-time.After(50 * time.Millisecond) // a read every 50 ms over the second, not a condition awaited
	}
	require.NoError(t, ld.Resign(ctx))
	assert.True(t, (<-seen).Vacant())
}

// Terms are fence counters: when a majority of the nodes lost them (emptied,
// as by restarts without persistence: docs/safety.md P5), no term can be
// trusted to be above the last leader's, and Campaign refuses at once
// (ErrLockLost, op fence) instead of electing anyone: an expected refusal,
// until an operator restores the counters (docs/fencing.md §6).
func TestCampaignRefusesAfterCountersLost(t *testing.T) {
	c, servers := cluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	ld, err := c.Campaign(ctx, "svc", "first")
	require.NoError(t, err)
	require.NoError(t, ld.Resign(ctx))
	// The first term's counter must be on every node before two of them lose
	// it: a grant returns once a majority fenced, and a write to the third
	// still in flight (a loaded machine: run f1 of 6 December 2026) would
	// leave no node with the counter once two are flushed, and the second
	// Campaign would rightly start afresh.
	for _, s := range servers {
		awaitKeyOn(t, s, redlock.FenceKey(redlock.DefaultKeyPrefix, "svc"))
	}
	for _, s := range servers[:2] {
		_, err := s.Do("FLUSHALL")
		require.NoError(t, err)
	}
	_, err = c.Campaign(ctx, "svc", "second")
	require.ErrorIs(t, err, redlock.ErrLockLost)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "fence", qe.Op)
	require.NoError(t, ctx.Err(), "refused at once, not retried until the context ended")
	_, err = c.Leader(ctx, "svc")
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "nobody elected")

	// Restored (docs/fencing.md §6: the surviving counter set on every node),
	// the next leader's term is above the first's.
	fence, err := servers[2].Do("GET", redlock.FenceKey(redlock.DefaultKeyPrefix, "svc"))
	require.NoError(t, err)
	for _, s := range servers[:2] {
		_, err := s.Do("SET", redlock.FenceKey(redlock.DefaultKeyPrefix, "svc"), fence)
		require.NoError(t, err)
	}
	next, err := c.Campaign(ctx, "svc", "second")
	require.NoError(t, err)
	defer next.Resign(context.Background())
	assert.Greater(t, next.Term(), ld.Term())
}

// Many candidates over several clients, in both modes: one leader at a time,
// and each leader's term is above every earlier leader's.
func TestCampaignManyCandidates(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			var opts []redlock.Option
			if fair {
				opts = append(opts, redlock.WithFair())
			}
			ctx := ctxT(t, 60*time.Second)
			var (
				inside occupancy
				mu     sync.Mutex
				terms  []uint64 // in the order the leaders took over
				wg     sync.WaitGroup
			)
			for i := range 4 {
				c, err := redlock.Dial(redistest.URLs(servers), opts...)
				require.NoError(t, err)
				defer c.Close()
				for j := range 2 {
					wg.Go(func() {
						for k := range 3 {
							ld, err := c.Campaign(ctx, "many", fmt.Sprintf("c%d/%d round %d", i, j, k))
							if !assert.NoError(t, err) {
								return
							}
							inside.enter()
							mu.Lock()
							terms = append(terms, ld.Term())
							mu.Unlock()
							assert.NoError(t, ld.Proclaim(ctx, "working"))
							inside.leave()
							assert.NoError(t, ld.Resign(ctx))
						}
					})
				}
			}
			wg.Wait()
			assert.Equal(t, int64(1), inside.most.Load(), "two leaders at once")
			assert.Len(t, terms, 24)
			for i := 1; i < len(terms); i++ {
				assert.Greater(t, terms[i], terms[i-1], "terms in the order of the leaders: %v", terms)
			}
		})
	}
}
