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

// A split vote with a paused node is decided without waiting for that node:
// one node refuses (another client holds it there), one grants, the third
// never answers. The attempt gives up at once, well before the node timeout or
// the lease, and releases what it took.
func TestSplitVoteDecidedEarly(t *testing.T) {
	replies := make(chan redlock.NodeReplyEvent, 10)
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(time.Minute), redlock.WithTTL(time.Minute),
		redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
			if e.Op == "acquire" {
				replies <- e
			}
		}}))
	_, err := servers[0].Do("SET", "redlock:{split}", "foreign", "PX", 60000)
	require.NoError(t, err)
	servers[2].Pause()
	ctx := ctxT(t, 30*time.Second)
	_, err = c.TryLock(ctx, "split")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, ctx.Err(), "the attempt waited for the paused node")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Refused)
	assert.Contains(t, err.Error(), "split")
	// The grant of the second node may land after the split was decided (a
	// loaded machine): count the answers themselves, not the error's snapshot.
	got := map[bool]int{}
	for range 2 {
		e := <-replies
		require.NoError(t, e.Err)
		got[e.OK]++
	}
	assert.Equal(t, map[bool]int{true: 1, false: 1}, got, "one grant, one refusal, the paused node silent")
	servers[2].Resume()
	require.NoError(t, c.Close()) // waits for the releases of the partial acquisition
	for _, s := range servers[1:] {
		assert.Empty(t, s.Keys("redlock:*"), "partial acquisition left behind on %s", s.Addr())
	}
	v, err := redis.String(servers[0].Do("GET", "redlock:{split}"))
	require.NoError(t, err)
	assert.Equal(t, "foreign", v)
}

// Separate clients contending with one node of three paused keep mutual
// exclusion and keep going: a split vote never waits for the paused node
// (its timeout and the lease are longer than the test).
func TestSeparateClientsPausedMinority(t *testing.T) {
	servers := redistest.StartN(t, 3)
	servers[2].Pause()
	ctx := ctxT(t, 40*time.Second)
	var occ occupancy
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		c, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(time.Minute), redlock.WithTTL(time.Minute))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				l, err := c.Lock(ctx, "hot")
				if !assert.NoError(t, err) {
					return
				}
				occ.enter()
				occ.leave()
				assert.NoError(t, l.Release(ctx))
			}
		}()
		defer func() { assert.NoError(t, c.Close()) }() // after Resume below: stragglers land
	}
	wg.Wait()
	servers[2].Resume()
	assert.Equal(t, int64(1), occ.most.Load())
	assert.Equal(t, int64(100), occ.total.Load())
}

// calls returns the number of calls of cmd (lower case) each server has run.
func calls(t *testing.T, servers []*redistest.Server, cmd string) []int64 {
	t.Helper()
	out := make([]int64, len(servers))
	for i, s := range servers {
		out[i] = s.Calls()[cmd]
	}
	return out
}

// A client that releases a contended lock and locks it again at once lets the
// waiter of another client, which has waited longer, go first (no barging):
// the release reserves the lock for the waiter it woke.
func TestReleaserYieldsToWaitingClient(t *testing.T) { releaserYields(t, dialed) }

func releaserYields(t *testing.T, dial func(*testing.T, []*redistest.Server, ...redlock.Option) *redlock.Client) {
	servers := redistest.StartN(t, 3)
	a := dial(t, servers)
	refused := make(chan struct{}, 100)
	b := dial(t, servers, redlock.WithHooks(redlock.Hooks{
		OnAttempt: func(e redlock.AttemptEvent) {
			if !e.Acquired {
				refused <- struct{}{}
			}
		},
	}))
	ctx := ctxT(t, 60*time.Second)

	// a waits for b's lock: from then on it knows the resource is contended.
	lb, err := b.Lock(ctx, "yield")
	require.NoError(t, err)
	aIn := lockAsync(t, ctx, a, "yield")
	waitListening(t, servers, "redlock:{yield}")
	require.NoError(t, lb.Release(ctx))
	held := <-aIn
	require.NotNil(t, held)

	const rounds = 20
	bFirst := 0
	for range rounds {
		for len(refused) > 0 {
			<-refused
		}
		order := make(chan string, 2)
		bDone := make(chan struct{})
		go func() {
			defer close(bDone)
			l, err := b.Lock(ctx, "yield")
			if assert.NoError(t, err) {
				order <- "b"
				assert.NoError(t, l.Release(ctx))
			}
		}()
		<-refused // b waits
		require.NoError(t, held.Release(ctx))
		held, err = a.Lock(ctx, "yield") // at once
		require.NoError(t, err)
		order <- "a"
		if <-order == "b" { // a got the lock once b released it
			bFirst++
			<-bDone
			continue
		}
		require.NoError(t, held.Release(ctx)) // a barged: let b through
		<-bDone
		held, err = a.Lock(ctx, "yield")
		require.NoError(t, err)
	}
	require.NoError(t, held.Release(ctx))
	// Without the yield, a barges in nearly every round (b first in 1 or 2 of
	// 20); with it, b goes first unless its wake-up takes longer than a's
	// yield (a loaded machine under -race: a few rounds).
	assert.GreaterOrEqual(t, bFirst, rounds/2, "the waiting client went first in %d of %d rounds", bFirst, rounds)
}

// waitListening waits until some client listens for key's releases on a
// waiter's channel (node.WaiterChannel).
func waitListening(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range servers {
			chans, err := redis.Strings(s.Do("PUBSUB", "CHANNELS", key+"*"))
			require.NoError(t, err)
			for _, ch := range chans {
				if listeners(t, s, ch) > 0 {
					return true
				}
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// listeners returns how many connections to s subscribe to channel.
func listeners(t *testing.T, s *redistest.Server, channel string) int {
	t.Helper()
	vals, err := redis.Values(s.Do("PUBSUB", "NUMSUB", channel))
	require.NoError(t, err)
	n, err := redis.Int(vals[1], nil)
	require.NoError(t, err)
	return n
}

// dialed is redlock.Dial on servers, closed when the test ends.
func dialed(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.Dial(redistest.URLs(servers), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// heldEverywhere waits until every server has key: a Lock returns at its
// majority, and a SET still on its way could grant a waiter's attempt first.
func heldEverywhere(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	for _, s := range servers {
		require.Eventually(t, func() bool {
			n, err := redis.Int(s.Do("EXISTS", key))
			return err == nil && n == 1
		}, 10*time.Second, time.Millisecond)
	}
}

// waitingClients starts n separate clients waiting for resource, held by
// another client, one after the other (each has made its two refused
// attempts, plain then queued, before the next starts), with a backoff of a
// minute: only a release wakes them. It returns the clients' attempt counts,
// and the index of each client that gets the lock with its lock, in order.
func waitingClients(ctx context.Context, t *testing.T, servers []*redistest.Server, resource string, n int) ([]*atomic.Int64, <-chan int, []chan *redlock.Lock) {
	t.Helper()
	attempts := make([]*atomic.Int64, n)
	order := make(chan int, n)
	locks := make([]chan *redlock.Lock, n)
	for i := range n {
		attempts[i], locks[i] = new(atomic.Int64), make(chan *redlock.Lock, 1)
		c := dialed(t, servers, redlock.WithRetryBackoff(time.Minute, time.Minute),
			redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { attempts[i].Add(1) }}))
		go func() {
			l, err := c.Lock(ctx, resource)
			if err == nil {
				order <- i
			}
			locks[i] <- l
		}()
		require.Eventually(t, func() bool { return attempts[i].Load() >= 2 }, 10*time.Second, time.Millisecond)
	}
	return attempts, order, locks
}

// Separate clients waiting for one lock are woken one at a time, in the order
// they started waiting: a release wakes the first waiter only, and the others
// send nothing until their turn (no herd).
func TestReleaseWakesOneWaitingClient(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	held, err := dialed(t, servers).Lock(ctx, "one")
	require.NoError(t, err)
	heldEverywhere(t, servers, "redlock:{one}")
	const n = 4
	attempts, order, locks := waitingClients(ctx, t, servers, "one", n)
	before := make([]int64, n)
	for i := range n {
		before[i] = attempts[i].Load()
	}
	require.NoError(t, held.Release(ctx))
	for want := range n {
		got := <-order
		require.Equal(t, want, got, "served in the order they started waiting")
		for j := range n {
			if j != got {
				assert.Equal(t, before[j], attempts[j].Load(), "client %d tried while client %d was woken", j, got)
			}
		}
		before[got] = attempts[got].Load()
		// A node may have refused the grant (the previous release had not
		// landed there yet); a grant still on its way is released as it lands.
		require.NoError(t, (<-locks[got]).Release(ctx))
	}
}

// A waiting client that gives up (its context ends) leaves the queues,
// and one that is closed no longer listens: either way the release wakes the
// next waiter, which gets the lock although its backoff is a minute.
func TestGoneWaiterDoesNotHoldTheNextBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed bool
		// own: the closed client was made by New over nodes that stay open
		// (their subscriptions linger): its waiter must leave the queues
		// before Close returns, or releases keep waking it.
		own bool
	}{
		{name: "gave up"},
		{name: "closed", closed: true},
		{name: "closed, nodes stay open", closed: true, own: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			ctx := ctxT(t, 30*time.Second)
			held, err := dialed(t, servers).Lock(ctx, "gone")
			require.NoError(t, err)
			heldEverywhere(t, servers, "redlock:{gone}")

			var early *redlock.Client
			if tc.own {
				early = ownNodes(t, servers, redlock.WithRetryBackoff(time.Minute, time.Minute))
			} else {
				early = dialed(t, servers, redlock.WithRetryBackoff(time.Minute, time.Minute))
			}
			ectx, cancel := context.WithCancel(ctx)
			defer cancel()
			gaveUp := make(chan error, 1)
			go func() {
				_, err := early.Lock(ectx, "gone")
				gaveUp <- err
			}()
			queue, _ := node.QueueKeys("redlock:{gone}")
			queuedOnAll := func(n int) func() bool {
				return func() bool {
					for _, s := range servers {
						v, _ := redis.Int(s.Do("ZCARD", queue))
						if v != n {
							return false
						}
					}
					return true
				}
			}
			require.Eventually(t, queuedOnAll(1), 10*time.Second, time.Millisecond)
			attempts, order, locks := waitingClients(ctx, t, servers, "gone", 1)
			require.Eventually(t, queuedOnAll(2), 10*time.Second, time.Millisecond)

			if tc.closed {
				require.NoError(t, early.Close())
				require.True(t, queuedOnAll(1)(), "Close returns once its waiter left every queue")
			} else {
				cancel()
				require.Eventually(t, queuedOnAll(1), 10*time.Second, time.Millisecond, "the waiter that gave up left")
			}
			err = <-gaveUp
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			if tc.closed {
				require.ErrorIs(t, err, redlock.ErrClosed, "Close ends a waiting Lock at once")
			}
			before := attempts[0].Load()
			start := time.Now()
			require.NoError(t, held.Release(ctx))
			require.Equal(t, 0, <-order)
			handoff := time.Since(start)
			// Within 50 ms of the release (issue 23); on a machine too busy
			// for that (a CI run saw 60 ms, its simulation and fault suite
			// beside it), what 50 ms stands for: woken by the release and
			// granted without backing off, long before the live waiter's
			// one-minute backoff or any reservation would have let it try
			// again. That is its first attempt after the release (or the
			// second, when the gone waiter's leave woke it too), plus the
			// quick retries (1 ms apart, at most 3) of an attempt granted
			// by some nodes while the release still lands on the others: a
			// loaded fresh-clone CI run (5 December 2026) saw 3 attempts
			// in 126 ms.
			if handoff >= 50*time.Millisecond {
				made := attempts[0].Load() - before
				t.Logf("the live waiter acquired %v after the release, by attempt %d after it (a busy machine)", handoff, made)
				assert.LessOrEqual(t, made, int64(2+3), "the live waiter was refused after the release: something held it back")
				assert.Less(t, handoff, time.Second, "the live waiter acquires at once after the release")
			}
			require.NoError(t, (<-locks[0]).Release(ctx))
		})
	}
}

// ownNodes is redlock.New over nodes dialed here, which stay open after the
// client's Close (until the test ends).
func ownNodes(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	nodes := make([]node.Node, len(servers))
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		nodes[i] = n
	}
	c, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
