package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// A lock's late Release, while its client's clock says its validity
// ended but its key lives on the nodes, counts as a release on its way: a
// goroutine that calls Lock meanwhile queues behind the other clients'
// waiters. Uncounted, it took the lock the release freed, unqueued, ahead of
// a queued, woken B: when the lock's entry was swept as expired (a review
// of b2be547, 10 runs in 10; a sweep now keeps a lock whose key may still
// live, which the first case checks) and when Extend had found it lost
// (a review of b3bddfa, 10 runs in 10).
//
// Constructed as TestGoroutineDuringOwnReleaseQueues, with A's clock fake:
// A's lock expires on it (its key lives 10 s on the nodes), then A
// releases it; A3 calls Lock once the release landed, its replies on their
// way back.
func TestLateReleaseQueuesOwnGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before runs before B queues, after once it has; fake is A's
		// clock, la A's lock.
		before, after func(t *testing.T, r *bargeRig, a *redlock.Client, fake *clock.Fake, la *redlock.Lock)
	}{{
		name: "sweep keeps it",
		before: func(t *testing.T, r *bargeRig, a *redlock.Client, _ *clock.Fake, _ *redlock.Lock) {
			for i := range redlock.HeldSweepMin - 1 { // A's locks up to the sweep's threshold
				_, err := a.Lock(r.ctx, fmt.Sprintf("other%d", i))
				require.NoError(t, err)
			}
		},
		after: func(t *testing.T, r *bargeRig, a *redlock.Client, fake *clock.Fake, _ *redlock.Lock) {
			fake.Advance(11 * time.Second)
			_, err := a.Lock(r.ctx, "trigger") // a new resource: the sweep
			require.NoError(t, err)
		},
	}, {
		name: "lost",
		before: func(t *testing.T, r *bargeRig, _ *redlock.Client, fake *clock.Fake, la *redlock.Lock) {
			fake.Advance(11 * time.Second)
			require.ErrorIs(t, la.Extend(r.ctx), redlock.ErrLockLost, "validity ended on A's clock: nothing sent")
		},
		after: func(*testing.T, *bargeRig, *redlock.Client, *clock.Fake, *redlock.Lock) {},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newBargeRig(t)
			latent, nodes := r.latentNodes()
			fake := clock.NewFake(time.Now())
			attempts := make(chan bool, 1000) // whether each attempt on "late" took the lock
			a, err := redlock.New(nodes, redlock.WithClock(fake), redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
				if e.Resource == "late" {
					attempts <- e.Acquired
				}
			}}))
			require.NoError(t, err)
			defer a.Close()

			la, err := a.Lock(r.ctx, "late") // 10 s on the nodes
			require.NoError(t, err)
			require.True(t, <-attempts)
			tc.before(t, r, a, fake, la)
			bDone, held := r.queueB("late")
			tc.after(t, r, a, fake, la)
			for _, l := range latent {
				l.d.Store(int64(20 * time.Millisecond))
			}
			relDone := make(chan error, 1)
			go func() { relDone <- la.Release(r.ctx) }()
			<-latent[0].releasing // on its way
			releasedOnAll(t, r, "redlock:{late}", la.Token())
			a3Done := r.lock(a, "late")
			var first bool
			select {
			case first = <-attempts:
			case <-r.ctx.Done():
				t.Fatal("A3 made no attempt")
			}
			<-relDone
			for _, l := range latent {
				l.d.Store(0)
			}
			for _, h := range held {
				close(h.send)
			}
			assert.False(t, first, "A3, unqueued, took the lock its client's release had just freed while B was queued and woken")
			lb := <-bDone
			require.NotNil(t, lb)
			require.NoError(t, lb.Release(r.ctx))
			l := <-a3Done
			require.NotNil(t, l)
			require.NoError(t, l.Release(r.ctx))
		})
	}
}

// slowReplyNode delays the replies of releases (the delete lands at once).
type slowReplyNode struct {
	node.Node
	d time.Duration
}

func (s *slowReplyNode) Release(ctx context.Context, key, token string, tell bool) (bool, error) {
	defer time.Sleep(s.d)
	return s.Node.Release(ctx, key, token, tell)
}

func (s *slowReplyNode) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (bool, bool, error) {
	defer time.Sleep(s.d)
	return s.Node.ReleaseFair(ctx, key, token, waiter, tell)
}

// Each lock counts as held until its own validity ends: a lock of 300 ms,
// taken while the client's 10 s lock on the resource was being released and
// then left to expire, held the client's next Lock call for the 10 s of the
// released one (a review of a count per resource with the latest validity
// among its locks).
func TestHeldUntilIsEachLocksOwn(t *testing.T) {
	servers := redistest.StartN(t, 1)
	n, err := node.Dial(servers[0].URL())
	require.NoError(t, err)
	slow := &slowReplyNode{Node: n}
	a, err := redlock.New([]node.Node{slow}, redlock.WithTTL(10*time.Second), redlock.WithRetryBackoff(2*time.Millisecond, 50*time.Millisecond))
	require.NoError(t, err)
	defer a.Close()
	ctx := ctxT(t, 30*time.Second)

	l1, err := a.Lock(ctx, "u")
	require.NoError(t, err)
	slow.d = 400 * time.Millisecond // set before the release starts
	relDone := make(chan error, 1)
	go func() { relDone <- l1.Release(ctx) }()
	require.Eventually(t, func() bool {
		e, err := redis.Int(servers[0].Do("EXISTS", "redlock:{u}"))
		return err == nil && e == 0
	}, 5*time.Second, time.Millisecond)
	_, err = a.Lock(ctx, "u", redlock.WithLockTTL(300*time.Millisecond)) // left to expire
	require.NoError(t, err)
	select {
	case <-relDone:
		t.Fatal("the first lock's release returned before the second lock was granted")
	default:
	}
	require.NoError(t, <-relDone)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l3, err := a.Lock(wctx, "u")
	require.NoError(t, err, "the third Lock call waited for the released lock's validity")
	require.NoError(t, l3.Release(ctx))
}

// A client whose Clock stands still (a Fake nobody advances) is not held
// back for good by a lock of its own left to expire: such a lock counts as
// held for its TTL on the real clock at most (a review: the call waited
// until its context ended, where it used to poll and get the lock once the
// key expired).
func TestStoppedClockDoesNotHoldWaiters(t *testing.T) {
	servers := redistest.StartN(t, 1)
	fake := clock.NewFake(time.Now())
	a := dialed(t, servers, redlock.WithClock(fake), redlock.WithRetryBackoff(5*time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := a.Lock(ctx, "stopped", redlock.WithLockTTL(300*time.Millisecond))
	require.NoError(t, err)
	l, err := a.Lock(ctx, "stopped")
	require.NoError(t, err, "the second Lock call waited for a lock that expired on the node")
	require.NoError(t, l.Release(ctx))
}

// releasedOnAll waits until no server of r holds token in key: a release
// on its way has landed (B's woken attempt may have come after it, if a
// poll of B's was the call the rig held back).
func releasedOnAll(t *testing.T, r *bargeRig, key, token string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range r.servers {
			v, err := redis.String(s.Do("GET", key))
			if err != nil && err != redis.ErrNil || v == token {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the release never landed")
}

// A goroutine whose client's lock overran its validity (its key lives on
// for the drift allowance) queues before its attempt: let go by that
// validity's end, its poll, unqueued, landed after the holder's late Release
// had freed the key, and took the lock ahead of B, queued and woken (a
// review of bb7b3be, 5 runs in 5; also open at 434a842, where such polls
// were made all along).
//
// Constructed: A1 holds; A2 waits in A's own queue; B queues; A's clock
// passes A1's validity (its key lives 10 s on the nodes); A2's plain
// acquisitions are held back, if any; A1 releases; B's woken attempt is
// held back until A2 has made an attempt after the release, which must not
// take the lock.
func TestOverrunLocksReleaseQueuesOwnGoroutines(t *testing.T) {
	r := newBargeRig(t)
	polls, nodes, send := r.pollNodes()
	fake := clock.NewFake(time.Now())
	a := r.newA(nodes, redlock.WithClock(fake), redlock.WithRetryBackoff(time.Millisecond, 4*time.Millisecond))

	la, a2Done, bDone, held := r.ownWaiterAndB(a, "overrun", polls)
	// A1's validity over on A's clock; its key lives 10 s on the nodes.
	fake.Advance(10 * time.Second)
	awaitPlainOrQueued(t, r, polls[0], "redlock:{overrun}")
	before := r.aAttempts.Load()
	require.NoError(t, la.Release(r.ctx), "A1's key was still there")
	releasedOnAll(t, r, "redlock:{overrun}", la.Token())
	close(send)
	r.afterRelease(before, held, bDone, a2Done, "A2")
}

// lateExtendNode's extensions land at once and answer d later.
type lateExtendNode struct {
	node.Node
	d time.Duration
}

func (n *lateExtendNode) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	ok, err := n.Node.Extend(context.WithoutCancel(ctx), key, token, ttl)
	time.Sleep(n.d)
	return ok, err
}

// An Extend whose replies come after the lock's validity reports it lost,
// though its extensions landed: the key lives a TTL from then, and the
// client's calls queue until that has passed too. Counted only from the
// grant, the key was taken for gone, a call's plain poll landed after the
// holder's Release and took the lock ahead of a queued, woken B (a review
// of f62a6d0: 5 runs in 5; also at 04ec666).
//
// Real clock, TTL 1 s: A1 extends at 850 ms, the replies 300 ms late; at
// 1150 ms (past the grant's TTL, the key alive until about 1850 ms) A2
// calls Lock; its plain acquisitions, if any, are held back; A1 releases;
// B's next call is held back until A2 has made an attempt after the
// release, which must not take the lock.
func TestLateExtensionKeepsOwnCallsQueued(t *testing.T) {
	r := newBargeRig(t)
	polls, nodes, send := r.pollNodes()
	for i := range nodes {
		nodes[i] = &lateExtendNode{Node: polls[i], d: 300 * time.Millisecond}
	}
	a := r.newA(nodes, redlock.WithTTL(time.Second))

	t0 := time.Now()
	la, err := a.Lock(r.ctx, "late-extend")
	require.NoError(t, err)
	bDone, held := r.queueB("late-extend")
	require.Less(t, time.Since(t0), 800*time.Millisecond, "setup too slow for the test's timeline")
	time.Sleep(time.Until(t0.Add(850 * time.Millisecond)))
	require.Error(t, la.Extend(r.ctx), "the replies came after the validity")
	time.Sleep(time.Until(t0.Add(1150 * time.Millisecond)))
	pttl, err := redis.Int(r.servers[0].Do("PTTL", "redlock:{late-extend}"))
	require.NoError(t, err)
	require.Greater(t, pttl, 300, "the extension did not land")
	for _, p := range polls {
		p.armed.Store(true)
	}
	before := r.aAttempts.Load()
	a2Done := r.lock(a, "late-extend")
	awaitPlainOrQueued(t, r, polls[0], "redlock:{late-extend}")
	for i, d := range r.delay { // B's next call (a poll, or its woken attempt) held back from now
		close(held[i].send) // B's call held back since it queued (a poll, if any) goes
		held[i] = d.delayNext()
	}
	require.NoError(t, la.Release(r.ctx), "A1's key was still there")
	releasedOnAll(t, r, "redlock:{late-extend}", la.Token())
	close(send)
	r.afterRelease(before, held, bDone, a2Done, "A2")
}

// A Release that returns before a majority confirmed it (its ctx ended)
// leaves its deletes on their way: a goroutine calling Lock then queues, as
// while the release was on its way, since its attempt could land after
// them. Unlisted at that return, the lock let such an attempt take the
// lock ahead of a queued, woken B (a code review of this list; also at
// 434a842).
func TestUnconfirmedReleaseQueuesOwnGoroutines(t *testing.T) {
	r := newBargeRig(t)
	r.ownReleaseQueues("unconfirmed", func(la *redlock.Lock, _ []*latentNode) (finish func()) {
		short, cancel := context.WithTimeout(r.ctx, 5*time.Millisecond)
		defer cancel()
		require.Error(t, la.Release(short), "the release returned before its deletes landed")
		// A3's attempt lands after the deletes (20 ms each way).
		return func() {}
	})
}

// awaitPlainOrQueued waits until A (whose plain acquisitions p holds back)
// sent a plain acquisition, or queued behind B on the nodes: the two ways
// its waiting call can go once its own lock no longer holds it back.
func awaitPlainOrQueued(t *testing.T, r *bargeRig, p *pollNode, key string) {
	t.Helper()
	queue, _ := node.QueueKeys(key)
	require.Eventually(t, func() bool {
		select {
		case <-p.sent:
			return true
		default:
		}
		n, err := redis.Int(r.servers[0].Do("ZCARD", queue))
		return err == nil && n == 2
	}, 10*time.Second, time.Millisecond, "A2 made no attempt")
}
