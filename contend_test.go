package redlock_test

import (
	"context"
	"strconv"
	"strings"
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
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(time.Minute), redlock.WithTTL(time.Minute))
	_, err := servers[0].Do("SET", "redlock:{split}", "foreign", "PX", 60000)
	require.NoError(t, err)
	servers[2].Pause()
	ctx := ctxT(t, 30*time.Second)
	_, err = c.TryLock(ctx, "split")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, ctx.Err(), "the attempt waited for the paused node")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Agreed)
	assert.Equal(t, 1, qe.Refused)
	assert.Contains(t, err.Error(), "split")
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

// evalshas returns the number of EVALSHA calls each server has run.
func evalshas(t *testing.T, servers []*redistest.Server) []int64 {
	t.Helper()
	return calls(t, servers, "evalsha")
}

// calls returns the number of calls of cmd (lower case) each server has run.
func calls(t *testing.T, servers []*redistest.Server, cmd string) []int64 {
	t.Helper()
	out := make([]int64, len(servers))
	for i, s := range servers {
		info, err := redis.String(s.Do("INFO", "commandstats"))
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				out[i], err = strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				require.NoError(t, err)
			}
		}
	}
	return out
}

// A waiter woken by another client's release asks one node, the gate, first;
// while the lock is still held there, it asks no other node. Then the holder
// releases and the waiter gets the lock.
//
// The EVALSHA counts are read only when no script call of either client is
// in flight: a Lock returns at its majority and an attempt is decided early,
// so the last node's call of an earlier attempt can land at any moment later,
// and would be counted as the woken waiter's.
func TestWokenWaiterAsksTheGateOnly(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	calls := new(inflight)
	held, attempts, got := waitingClient(ctx, t, servers, "gate", calls)
	calls.quiet(ctx, t)
	before := evalshas(t, servers)
	// A notification that frees nothing. The waiter listens on one node
	// only, the gate: one wake.
	listeners := 0
	for _, s := range servers {
		n, err := redis.Int(s.Do("PUBLISH", "redlock:{gate}", "released"))
		require.NoError(t, err)
		listeners += n
	}
	require.Equal(t, 1, listeners, "the waiter listens on one node")
	e := <-attempts
	require.False(t, e.Acquired)
	calls.quiet(ctx, t)
	after := evalshas(t, servers)
	asked := 0
	for i := range servers {
		asked += int(after[i] - before[i])
	}
	assert.Equal(t, 1, asked, "EVALSHA calls per node before %v, after %v", before, after)

	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
}

// A stale key on one node (a release lost there, simulated by overwriting the
// holder's key) does not hold a waiter back for its TTL, even on the gate
// node, where the waiter listens and which it asks first: after two backoffs
// without a notification the waiter asks every node and gets the other two.
func TestStaleKeyOnGateDoesNotBlockWaiters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opts := []redlock.Option{redlock.WithRetryBackoff(time.Millisecond, 5*time.Millisecond)}
	holder := dialGated(t, servers, opts...)
	waiter := dialGated(t, servers, opts...)
	for i, stale := range servers { // one of them is the gate
		ctx := ctxT(t, 20*time.Second)
		held, err := holder.Lock(ctx, "stale")
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := waiter.Lock(ctx, "stale")
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		_, err = stale.Do("SET", "redlock:{stale}", "foreign", "PX", 60000)
		require.NoError(t, err)
		// Released on the two other nodes (Release may report too few, when a
		// node's grant was still in flight: it releases itself as it lands).
		_ = held.Release(ctx)
		require.NoError(t, <-got, "stale key on node %d", i)
		_, err = stale.Do("DEL", "redlock:{stale}")
		require.NoError(t, err)
	}
}

// An announcement that the lock was taken (node.TakenChannel) that reaches a
// waiter before a release, in the same reply stream, is older than that
// release: the waiter ignores it and asks the nodes.
func TestStaleAnnouncementDoesNotHoldWaiterBack(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	held, attempts, got := waitingClient(ctx, t, servers, "ann", nil)
	for range 3 {
		// On the node the waiter listens to, in one transaction.
		for _, s := range servers {
			if listeners(t, s, "redlock:{ann}") == 0 {
				continue
			}
			c, err := redis.Dial("tcp", s.Addr())
			require.NoError(t, err)
			require.NoError(t, c.Send("MULTI"))
			require.NoError(t, c.Send("PUBLISH", "redlock:{ann}:taken", "taken"))
			require.NoError(t, c.Send("PUBLISH", "redlock:{ann}", "released"))
			_, err = c.Do("EXEC")
			require.NoError(t, err)
			c.Close()
		}
		select {
		case e := <-attempts:
			require.False(t, e.Acquired)
		case <-ctx.Done():
			t.Fatal("the waiter ignored a release because of an older announcement")
		}
	}
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
}

// A client that releases a contended lock and locks it again at once lets the
// waiter of another client, which has waited longer, go first (no barging).
// The releaser knows the lock is contended because it waited for it itself.
// With wake queues the release reserves the lock for the waiter it woke; on
// gate nodes the releaser yields for a while.
func TestReleaserYieldsToWaitingClient(t *testing.T) {
	for name, dial := range map[string]func(*testing.T, []*redistest.Server, ...redlock.Option) *redlock.Client{
		"wake queue": dialed,
		"gate":       dialGated,
	} {
		t.Run(name, func(t *testing.T) { releaserYields(t, dial) })
	}
}

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
	aIn := make(chan *redlock.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, "yield")
		assert.NoError(t, err)
		aIn <- l
	}()
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

// waitListening waits until some client listens for key's releases: on the
// key's own channel (gate mode) or on a waiter's (node.WaiterChannel).
func waitListening(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range servers {
			chans, err := redis.Strings(s.Do("PUBSUB", "CHANNELS", key+"*"))
			require.NoError(t, err)
			for _, ch := range chans {
				if ch != node.TakenChannel(key) && listeners(t, s, ch) > 0 {
					return true
				}
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// gateNode is a node without a wake queue (node.WakeQueuer), as the nodes of
// the adapter modules are: the default mode then orders woken waiters through
// the gate (contend.go). With calls set, it counts its script calls in
// flight.
type gateNode struct {
	node.Node
	node.Watcher
	node.Announcer
	calls *inflight
}

func (g gateNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	defer g.calls.begin()()
	return g.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

func (g gateNode) AcquireAnnounced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	defer g.calls.begin()()
	return g.Announcer.AcquireAnnounced(ctx, key, fenceKey, token, ttl)
}

func (g gateNode) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	defer g.calls.begin()()
	return g.Node.Release(ctx, key, token, notify)
}

func (g gateNode) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	defer g.calls.begin()()
	return g.Node.Extend(ctx, key, token, ttl)
}

func (g gateNode) WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	defer g.calls.begin()()
	return g.Node.WriteFence(ctx, key, fenceKey, token, fence)
}

func (g gateNode) RaiseFence(ctx context.Context, fenceKey string, fence uint64) error {
	defer g.calls.begin()()
	return g.Node.RaiseFence(ctx, fenceKey, fence)
}

// inflight counts node calls in progress; a nil *inflight counts nothing.
type inflight struct {
	mu    sync.Mutex
	n     int
	idles []chan struct{} // closed when n drops to 0
}

// begin counts a call in; the function it returns counts it out.
func (f *inflight) begin() func() {
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n--; f.n == 0 {
			for _, c := range f.idles {
				close(c)
			}
			f.idles = nil
		}
	}
}

// quiet waits until no call is in progress: every call sent has been
// answered (and so counted by the server), or has failed.
func (f *inflight) quiet(ctx context.Context, t *testing.T) {
	t.Helper()
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	f.idles = append(f.idles, idle)
	f.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		t.Fatalf("node calls still in progress: %v", ctx.Err())
	}
}

// dialGated is redlock.Dial on gate nodes.
func dialGated(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return dialGatedCounting(t, servers, nil, opts...)
}

// dialGatedCounting is dialGated, its script calls in flight counted in calls.
func dialGatedCounting(t *testing.T, servers []*redistest.Server, calls *inflight, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	var nodes []node.Node
	for _, u := range redistest.URLs(servers) {
		n, err := node.Dial(u)
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, gateNode{n, n, n, calls})
	}
	c, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
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

// waitingClient makes a holder client take resource on servers, and a
// separate waiter client wait for it in the background, with a backoff of a
// minute (only notifications wake it), both on gate nodes whose script calls
// in flight are counted in calls (if not nil). The waiter starts once the
// holder's key is on every node, so that each of its attempts is refused
// everywhere. It returns the holder's lock once the waiter made its first two
// attempts (every node, then the gate once subscribed), the waiter's later
// attempts, and the outcome of its Lock and Release. Both clients are closed
// when the test ends.
func waitingClient(ctx context.Context, t *testing.T, servers []*redistest.Server, resource string, calls *inflight) (*redlock.Lock, <-chan redlock.AttemptEvent, <-chan error) {
	t.Helper()
	attempts := make(chan redlock.AttemptEvent, 100)
	holder := dialGatedCounting(t, servers, calls)
	waiter := dialGatedCounting(t, servers, calls, redlock.WithHooks(redlock.Hooks{
		OnAttempt: func(e redlock.AttemptEvent) { attempts <- e },
	}))

	held, err := holder.Lock(ctx, resource)
	require.NoError(t, err)
	heldEverywhere(t, servers, "redlock:{"+resource+"}")
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, resource, redlock.WithLockRetryBackoff(time.Minute, time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	for range 2 {
		require.False(t, (<-attempts).Acquired)
	}
	return held, attempts, got
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

// A waiting client that gives up (its context ends) leaves the wake queues,
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
			queue, _ := node.WakeQueueKeys("redlock:{gone}")
			queuedOnAll := func(n int) func() bool {
				return func() bool {
					for _, s := range servers {
						v, _ := redis.String(s.Do("GET", queue))
						if strings.Count(v, "\n") != n {
							return false
						}
					}
					return true
				}
			}
			require.Eventually(t, queuedOnAll(1), 10*time.Second, time.Millisecond)
			_, order, locks := waitingClients(ctx, t, servers, "gone", 1)
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
			start := time.Now()
			require.NoError(t, held.Release(ctx))
			require.Equal(t, 0, <-order)
			handoff := time.Since(start)
			assert.Less(t, handoff, 50*time.Millisecond, "the live waiter acquires within 50 ms of the release")
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
