package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// bargeRig is two clients on three servers: A, whose attempts are counted,
// and B, whose nodes can hold back its next call (delayedNodes).
type bargeRig struct {
	t                   *testing.T
	servers             []*redistest.Server
	ctx                 context.Context
	a, b                *redlock.Client
	aAttempts, aGranted atomic.Int64
	bAttempts           atomic.Int64
	delay               []*delayedNode
}

func newBargeRig(t *testing.T) *bargeRig {
	r := &bargeRig{t: t, servers: redistest.StartN(t, 3), ctx: ctxT(t, 30*time.Second)}
	r.a = dialed(t, r.servers, redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
		r.aAttempts.Add(1)
		if e.Acquired {
			r.aGranted.Add(1)
		}
	}}))
	nodes, delay := delayedNodes(t, r.servers)
	r.delay = delay
	b, err := redlock.New(nodes, redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { r.bAttempts.Add(1) }}))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	r.b = b
	return r
}

// lock calls c.Lock on resource in a goroutine (lockAsync).
func (r *bargeRig) lock(c *redlock.Client, resource string) chan *redlock.Lock {
	return lockAsync(r.t, r.ctx, c, resource)
}

// lockAsync calls c.Lock(ctx, resource) in a goroutine; its lock (nil if it
// failed, which the test is told) comes on the channel.
func lockAsync(t *testing.T, ctx context.Context, c *redlock.Client, resource string) chan *redlock.Lock {
	done := make(chan *redlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, resource)
		assert.NoError(t, err)
		done <- l
	}()
	return done
}

// queueB starts B's Lock on resource, and returns once B is queued,
// listening, and past the attempt it makes once listening: its next call on
// every node will be the attempt a release wakes it for, which it holds back.
func (r *bargeRig) queueB(resource string) (bDone chan *redlock.Lock, held []*delayed) {
	bDone = r.lock(r.b, resource)
	require.Eventually(r.t, func() bool { return r.bAttempts.Load() >= 2 }, 10*time.Second, time.Millisecond)
	waitListening(r.t, r.servers, "redlock:{"+resource+"}")
	held = make([]*delayed, len(r.delay))
	for i, d := range r.delay {
		held[i] = d.delayNext()
	}
	return bDone, held
}

// afterRelease waits for A's next attempt since before, which must not have
// taken the lock (A was granted once, before), then lets B's held attempt go
// on: B must get the lock before A's call (aDone), and A after B's release.
func (r *bargeRig) afterRelease(before int64, held []*delayed, bDone, aDone chan *redlock.Lock, a string) {
	t := r.t
	require.Eventually(t, func() bool { return r.aAttempts.Load() > before }, 10*time.Second, time.Millisecond,
		"%s made no attempt after the release", a)
	assert.Equal(t, int64(1), r.aGranted.Load(),
		"%s took the lock at its attempt after the release, while B was queued and woken", a)
	for _, h := range held {
		close(h.send)
	}
	var lb *redlock.Lock
	select {
	case lb = <-bDone:
	case l := <-aDone:
		t.Fatalf("%s got the lock before B, queued before it (%s's lock: %v)", a, a, l != nil)
	case <-r.ctx.Done():
		t.Fatal("B, queued and woken, never got the lock")
	}
	require.NotNil(t, lb)
	require.NoError(t, lb.Release(r.ctx))
	select {
	case l := <-aDone:
		require.NotNil(t, l)
		require.NoError(t, l.Release(r.ctx))
	case <-r.ctx.Done():
		t.Fatalf("%s never got the lock after B released it", a)
	}
}

// newA returns a client over nodes (wrapping r's servers) whose attempts
// are counted in r, as r.a's are.
func (r *bargeRig) newA(nodes []node.Node, opts ...redlock.Option) *redlock.Client {
	a, err := redlock.New(nodes, append(opts, redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
		r.aAttempts.Add(1)
		if e.Acquired {
			r.aGranted.Add(1)
		}
	}}))...)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { a.Close() })
	return a
}

// latentNodes returns r's servers as latentNodes.
func (r *bargeRig) latentNodes() ([]*latentNode, []node.Node) {
	latent := make([]*latentNode, len(r.servers))
	nodes := make([]node.Node, len(r.servers))
	for i, s := range r.servers {
		n, err := node.Dial(s.URL())
		require.NoError(r.t, err)
		latent[i] = &latentNode{Node: n, releasing: make(chan struct{})}
		nodes[i] = latent[i]
	}
	return latent, nodes
}

// pollNodes returns r's servers as pollNodes whose held back acquisitions
// go once send is closed.
func (r *bargeRig) pollNodes() (polls []*pollNode, nodes []node.Node, send chan struct{}) {
	polls = make([]*pollNode, len(r.servers))
	nodes = make([]node.Node, len(r.servers))
	send = make(chan struct{})
	for i, s := range r.servers {
		n, err := node.Dial(s.URL())
		require.NoError(r.t, err)
		polls[i] = &pollNode{Node: n, sent: make(chan struct{}, 1), send: send}
		nodes[i] = polls[i]
	}
	return polls, nodes, send
}

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
	r := newBargeRig(t)
	la, err := r.a.Lock(r.ctx, "barge")
	require.NoError(t, err, "A's first attempt: never refused")
	bDone, held := r.queueB("barge")
	require.NoError(t, la.Release(r.ctx))
	before := r.aAttempts.Load()
	aDone := r.lock(r.a, "barge")
	r.afterRelease(before, held, bDone, aDone, "A's next Lock")
}

// The same, for a second goroutine of the releasing client: it called Lock
// while the first held the lock, so it waited for this client's release
// without queuing on the nodes (that release wakes it), and its attempt
// after the release took the lock in the gap before the woken head's attempt
// (14 of 20 rounds ahead of a queued B in a review's probe of 096ed98). The
// release's word that waiters are queued now makes it queue behind them;
// and while the release is on its way it makes no attempt (its backoff
// could fire then: 4 runs in 30 took the lock already freed on a majority).
//
// Constructed: A1 holds without ever having been refused; A2 waits in A's
// own queue (its one attempt refused, while A1 holds); B queues; A1
// releases, and B's woken attempt is held back until A2 has made its next
// attempt, which must not take the lock.
func TestReleasersOtherGoroutineQueuesBehindWaiters(t *testing.T) {
	r := newBargeRig(t)
	la, err := r.a.Lock(r.ctx, "barge2")
	require.NoError(t, err, "A1's first attempt: never refused")
	a2Done := r.lock(r.a, "barge2")
	// A2 is waiting in A's own queue (it makes no attempt while A1 holds
	// the lock: mayAttempt).
	require.Eventually(t, func() bool { return redlock.LocalWaiters(r.a, "barge2") == 1 }, 10*time.Second, time.Millisecond,
		"A2 is not waiting")
	require.Equal(t, int64(1), r.aGranted.Load())
	bDone, held := r.queueB("barge2")
	before := r.aAttempts.Load()
	require.NoError(t, la.Release(r.ctx))
	r.afterRelease(before, held, bDone, a2Done, "A2")
}

// A waiting call does not wait for its own client's Release to return: a
// release held up by a paused node (the lock already free on a majority)
// used to hold it for the whole node timeout once waiters made no attempt
// while their client released (a review of b7cc723; 3.00 s against 10 ms).
// Now the release counts as done for them (they queue, if the resource was
// contended lately) from the moment it is on its way.
func TestOwnSlowReleaseDoesNotHoldWaiters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	var attempts atomic.Int64
	a := dialed(t, servers, redlock.WithNodeTimeout(3*time.Second),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { attempts.Add(1) }}))
	// Granted on nodes 0 and 1 only: node 2 holds a stranger's key, which
	// then expires. Node 0 paused, the release is undecided (1 yes, 1 no)
	// until node 0's call times out, the lock free on nodes 1 and 2.
	const key = "redlock:{slowrel}"
	_, err := servers[2].Do("SET", key, "stranger", "PX", 300)
	require.NoError(t, err)
	l1, err := a.Lock(ctx, "slowrel")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := redis.Int(servers[2].Do("EXISTS", key))
		return err == nil && n == 0
	}, 5*time.Second, time.Millisecond)
	got := make(chan time.Time, 1)
	go func() {
		l2, err := a.Lock(ctx, "slowrel")
		if assert.NoError(t, err) {
			got <- time.Now()
			_ = l2
		}
	}()
	require.Eventually(t, func() bool { return redlock.LocalWaiters(a, "slowrel") == 1 }, 5*time.Second, time.Millisecond,
		"the second Lock call is not waiting")
	servers[0].Pause()
	defer servers[0].Resume()
	start := time.Now()
	go func() { _ = l1.Release(ctx) }()
	select {
	case at := <-got:
		assert.Less(t, at.Sub(start), 1500*time.Millisecond,
			"the waiting call waited for its client's release to give up on the paused node")
	case <-ctx.Done():
		t.Fatal("the second Lock call never got the lock")
	}
}

// panicky panics in its first ReleaseFair: a node with a bug.
type panicky struct {
	node.Node
	once atomic.Bool
}

func (p *panicky) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (bool, bool, error) {
	if p.once.CompareAndSwap(false, true) {
		panic("node bug")
	}
	return p.Node.ReleaseFair(ctx, key, token, waiter, tell)
}

// A Release that panics (recovered by the caller, as net/http does) still
// records its end: the resource's later Lock calls on the client are served
// once the lock expires (a review of b7cc723: they never attempted again).
func TestReleasePanicLeavesLockUsable(t *testing.T) {
	s := redistest.Start(t)
	n, err := node.Dial(s.URL())
	require.NoError(t, err)
	c, err := redlock.New([]node.Node{&panicky{Node: n}}, redlock.WithTTL(500*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	l, err := c.Lock(ctx, "pan")
	require.NoError(t, err)
	func() {
		defer func() { assert.NotNil(t, recover(), "the node's release did not panic") }()
		_ = l.Release(ctx)
	}()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l2, err := c.Lock(lctx, "pan")
	require.NoError(t, err, "the lock expired after 500 ms; Lock did not get it")
	require.NoError(t, l2.Release(ctx))
}

// latentNode puts a one-way latency (both ways) on a node's acquisitions
// and releases, once armed: a node some milliseconds away. Its first
// release once armed closes releasing.
type latentNode struct {
	node.Node
	d         atomic.Int64
	once      sync.Once
	releasing chan struct{}
}

func (l *latentNode) sleep() { time.Sleep(time.Duration(l.d.Load())) }

func (l *latentNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	l.sleep()
	defer l.sleep()
	return l.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

func (l *latentNode) AcquireFair(ctx context.Context, key, fenceKey, token string, ttl time.Duration, w node.Waiter) (node.Acquired, error) {
	l.sleep()
	defer l.sleep()
	return l.Node.AcquireFair(ctx, key, fenceKey, token, ttl, w)
}

func (l *latentNode) ReleaseFair(ctx context.Context, key, token, waiter string, tell bool) (bool, bool, error) {
	if l.d.Load() > 0 {
		l.once.Do(func() { close(l.releasing) })
	}
	l.sleep()
	defer l.sleep()
	return l.Node.ReleaseFair(ctx, key, token, waiter, tell)
}

// A goroutine that calls Lock while its client's Release is on its way
// queues behind the other clients' waiters, though the release's word that
// they are queued has not come back yet: with the nodes 20 ms away, its
// attempt after a 1–4 ms backoff, not queued, took the lock the release had
// just freed, ahead of B, queued and woken (a review of f698fb9: 5 runs in
// 5, as on c3bf36b).
func TestGoroutineDuringOwnReleaseQueues(t *testing.T) {
	r := newBargeRig(t)
	r.ownReleaseQueues("barge3", func(la *redlock.Lock, latent []*latentNode) (finish func()) {
		relDone := make(chan error, 1)
		go func() { relDone <- la.Release(r.ctx) }()
		<-latent[0].releasing // on its way
		// A3's attempt 0 waits (A holds the lock); its next comes after a
		// backoff of a few ms, the release still on its way (40 ms a node).
		return func() { require.NoError(t, <-relDone) }
	})
}

// ownWaiterAndB is the start of the timelines of a call waiting for its own
// client's lock: A1 takes resource through a (its first attempt, never
// refused), A2 waits for it in a's own queue, B queues (queueB), and from
// then on polls hold back a's plain acquisitions (pollNodes).
func (r *bargeRig) ownWaiterAndB(a *redlock.Client, resource string, polls []*pollNode) (la *redlock.Lock, a2Done, bDone chan *redlock.Lock, held []*delayed) {
	t := r.t
	la, err := a.Lock(r.ctx, resource)
	require.NoError(t, err, "A1's first attempt: never refused")
	a2Done = r.lock(a, resource)
	require.Eventually(t, func() bool { return redlock.LocalWaiters(a, resource) == 1 }, 10*time.Second, time.Millisecond,
		"A2 is not waiting")
	bDone, held = r.queueB(resource)
	for _, p := range polls {
		p.armed.Store(true)
	}
	return la, a2Done, bDone, held
}

// ownReleaseQueues is the timeline of the tests of a release of client A's
// own: A1 holds resource, its nodes 20 ms away once B queued; release
// releases A1's lock in its way and returns once A3 is to call Lock, and
// finish, which runs once A3 made an attempt; that attempt must not take
// the lock ahead of B, queued and woken (afterRelease).
func (r *bargeRig) ownReleaseQueues(resource string, release func(la *redlock.Lock, latent []*latentNode) (finish func())) {
	t := r.t
	latent, nodes := r.latentNodes()
	a := r.newA(nodes)
	la, err := a.Lock(r.ctx, resource)
	require.NoError(t, err, "A1's first attempt: never refused")
	bDone, held := r.queueB(resource)
	for _, l := range latent {
		l.d.Store(int64(20 * time.Millisecond))
	}
	finish := release(la, latent)
	before := r.aAttempts.Load()
	a3Done := r.lock(a, resource)
	require.Eventually(t, func() bool { return r.aAttempts.Load() > before }, 10*time.Second, time.Millisecond,
		"A3 made no attempt")
	finish()
	for _, l := range latent {
		l.d.Store(0)
	}
	r.afterRelease(before, held, bDone, a3Done, "A3")
}

// A client whose lock expired without a Release queues for the resource
// like any other: the expired lock counted as held for good, so its later
// Lock calls there never queued on the nodes (they polled, and could take
// the lock ahead of the waiters queued there), and waited first for a
// release of their own that would never come (older than 6 December 2026,
// found by a review of the waiting path). Also when the client locked and
// released the resource again meanwhile: the expired lock then counted
// again until that lock's validity ended (a review of b2be547).
//
// Constructed: A's lock expires unreleased; B holds the lock; A's next Lock
// call, refused, must queue on the node.
func TestExpiredLockDoesNotKeepClientFromQueuing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again bool // A locks and releases the resource once more before B holds it
	}{{"expired", false}, {"expired, then locked again", true}} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.StartN(t, 1)
			ctx := ctxT(t, 30*time.Second)
			a := dialed(t, servers)
			b := dialed(t, servers)
			const key = "redlock:{expired}"
			_, err := a.Lock(ctx, "expired", redlock.WithLockTTL(100*time.Millisecond))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				n, err := redis.Int(servers[0].Do("EXISTS", key))
				return err == nil && n == 0
			}, 5*time.Second, time.Millisecond, "A's lock never expired")
			if tc.again {
				l, err := a.Lock(ctx, "expired")
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
			}
			lb, err := b.Lock(ctx, "expired")
			require.NoError(t, err)
			aDone := lockAsync(t, ctx, a, "expired")
			queue, _ := node.QueueKeys(key)
			require.Eventually(t, func() bool {
				n, err := redis.Int(servers[0].Do("ZCARD", queue))
				return err == nil && n == 1
			}, 5*time.Second, time.Millisecond, "A, refused, never queued: its expired lock counts as held")
			require.NoError(t, lb.Release(ctx))
			select {
			case l := <-aDone:
				require.NotNil(t, l)
				require.NoError(t, l.Release(ctx))
			case <-ctx.Done():
				t.Fatal("A never got the lock after B released it")
			}
		})
	}
}

// pollNode holds back a client's plain acquisitions, once armed: each waits
// for send before it goes to the node, and is announced on sent first.
type pollNode struct {
	node.Node
	armed atomic.Bool
	sent  chan struct{} // an acquisition is held back
	send  chan struct{} // closed: held back acquisitions go
}

func (p *pollNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	if p.armed.Load() {
		select {
		case p.sent <- struct{}{}:
		default:
		}
		<-p.send
	}
	return p.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

// A call waiting for its own client's lock makes no attempt until that lock
// is released (or expires): it used to poll now and then, unqueued, and a
// poll that reached the nodes after its client's release took the freed lock
// ahead of the other clients' queued waiters (left open by a review of 6
// December 2026: the poll's goroutine descheduled for a round trip, or a
// pool's other connection overtaken).
//
// Constructed: A1 holds; A2 waits in A's own queue; B queues; A's plain
// acquisitions are held back from then on; A1 releases after A2 polled (or
// 300 ms, when it does not), and A2's held back poll, if any, goes; B's
// woken attempt is held back until A2 has made an attempt after the
// release, which must not take the lock.
func TestPollWhileHoldingDoesNotBarge(t *testing.T) {
	r := newBargeRig(t)
	polls, nodes, send := r.pollNodes()
	a := r.newA(nodes, redlock.WithRetryBackoff(time.Millisecond, 4*time.Millisecond))

	la, a2Done, bDone, held := r.ownWaiterAndB(a, "barge5", polls)
	select {
	case <-polls[0].sent: // A2 polled while A1 held the lock (before the fix)
	case <-time.After(300 * time.Millisecond):
	}
	before := r.aAttempts.Load()
	require.NoError(t, la.Release(r.ctx))
	close(send)
	r.afterRelease(before, held, bDone, a2Done, "A2")
}

// A lock its Extend finds lost no longer holds back its client's calls
// waiting for it (they make no attempt while it is held): they try at once,
// not when its validity would have ended.
func TestLostLockFreesOwnWaiters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	a := dialed(t, servers, redlock.WithTTL(20*time.Second))
	l1, err := a.Lock(ctx, "lost")
	require.NoError(t, err)
	got := lockAsync(t, ctx, a, "lost")
	require.Eventually(t, func() bool { return redlock.LocalWaiters(a, "lost") == 1 }, 5*time.Second, time.Millisecond)
	for _, s := range servers { // the lock's keys gone: a wiped node, say
		_, err := s.Do("DEL", "redlock:{lost}")
		require.NoError(t, err)
	}
	require.ErrorIs(t, l1.Extend(ctx), redlock.ErrLockLost)
	select {
	case l2 := <-got:
		require.NotNil(t, l2)
		require.NoError(t, l2.Release(ctx))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call still waits for the lost lock's validity to end")
	}
}
