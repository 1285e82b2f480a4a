package redlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// Regression tests for late writes that re-created a wiped node's fence
// counter below a token it had accepted (docs/fencing.md §6), and for the
// fail-safe state of a resource whose counters are on a minority of nodes.

var errPartitioned = errors.New("partitioned (test)")

// gateNode is a client's link to one node. cut fails every call at once (a
// partition between that client and that node); holdRaise and holdCreate hold
// RaiseFence and CreateFence until released, and then send them whatever the
// caller's context says (a command held up in the network, or in a paused
// client, still lands): the caller sees its node timeout. A CreateFence that
// only checks (no owner token) is not held.
type gateNode struct {
	node.Node
	reads      *readBarrier // the client's: see readBarrier
	mu         sync.Mutex
	cut        bool
	cutOnRead  bool // cut once a ReadFence went through
	holdRaise  chan struct{}
	raised     chan error
	holdCreate chan struct{}
	created    chan error
}

func (g *gateNode) isCut() bool   { g.mu.Lock(); defer g.mu.Unlock(); return g.cut }
func (g *gateNode) setCut(v bool) { g.mu.Lock(); g.cut = v; g.mu.Unlock() }

// holdNextRaise holds the RaiseFence calls from now on; closing the returned
// channel sends the first one, whose error then arrives on g.raised.
func (g *gateNode) holdNextRaise() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdRaise, g.raised = make(chan struct{}), make(chan error, 1)
	return g.holdRaise
}

// holdNextCreate is holdNextRaise for the next CreateFence that creates (with
// an owner token; errors on g.created).
func (g *gateNode) holdNextCreate() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdCreate, g.created = make(chan struct{}), make(chan error, 1)
	return g.holdCreate
}

func (g *gateNode) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (node.Acquired, error) {
	if g.isCut() {
		return node.Acquired{}, errPartitioned
	}
	return g.Node.Acquire(ctx, key, fenceKey, token, ttl)
}

func (g *gateNode) ReadFence(ctx context.Context, key, fenceKey, token string) (node.Acquired, error) {
	if g.isCut() {
		g.reads.arrive(ctx)
		return node.Acquired{}, errPartitioned
	}
	a, err := g.Node.ReadFence(ctx, key, fenceKey, token)
	g.mu.Lock()
	g.cut = g.cut || g.cutOnRead
	g.mu.Unlock()
	g.reads.arrive(ctx)
	return a, err
}

// readBarrier holds a client's reads of the counters (a lazy Fence's round,
// sent to every node: the gated clients have no breaker to skip one) until
// every node answered, or failed at once for a cut: the round's majority
// then comes in with every reply. Fence waits
// for the others only a grace as long as the majority took (fence.go), and
// the tests below need each reachable node's reply in the plan (a suspect is
// repaired only if its reply is): under load a reply later than the grace
// left a suspect unrepaired (a CI run: counters [2 2 none] after Y1's
// Fence, where the repair of n2 was due).
type readBarrier struct {
	n       int // the client's nodes: the reads of one round
	mu      sync.Mutex
	arrived int
	next    chan struct{} // closed when the round's last read arrived
}

func newReadBarrier(n int) *readBarrier { return &readBarrier{n: n, next: make(chan struct{})} }

// arrive counts one node's read and waits for the round's others (or ctx).
func (b *readBarrier) arrive(ctx context.Context) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.arrived++
	ch := b.next
	if b.arrived%b.n == 0 {
		close(ch)
		b.next = make(chan struct{})
	}
	b.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (g *gateNode) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	if g.isCut() {
		return false, errPartitioned
	}
	return g.Node.Release(ctx, key, token, notify)
}

func (g *gateNode) WriteFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	if g.isCut() {
		return false, errPartitioned
	}
	return g.Node.WriteFence(ctx, key, fenceKey, token, f)
}

func (g *gateNode) RaiseFence(ctx context.Context, fenceKey string, f uint64) error {
	g.mu.Lock()
	hold, cut := g.holdRaise, g.cut
	g.holdRaise = nil
	g.mu.Unlock()
	if hold != nil {
		go func() {
			<-hold
			g.raised <- g.Node.RaiseFence(context.Background(), fenceKey, f)
		}()
		<-ctx.Done()
		return ctx.Err()
	}
	if cut {
		return errPartitioned
	}
	return g.Node.RaiseFence(ctx, fenceKey, f)
}

func (g *gateNode) CreateFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, bool, error) {
	g.mu.Lock()
	hold, cut := g.holdCreate, g.cut
	if token == "" {
		hold = nil // a check: only creations are held
	} else {
		g.holdCreate = nil
	}
	g.mu.Unlock()
	if hold != nil {
		go func() {
			<-hold
			_, _, err := g.Node.CreateFence(context.Background(), key, fenceKey, token, f)
			g.created <- err
		}()
		<-ctx.Done()
		return false, false, ctx.Err()
	}
	if cut {
		return false, false, errPartitioned
	}
	return g.Node.CreateFence(ctx, key, fenceKey, token, f)
}

// gatedClient is a lock client (a process of its own) over gated links to
// servers.
type gatedClient struct {
	*redlock.Client
	n        int
	acquired chan struct{} // one per node's answer to an acquisition
}

func newGatedClient(t *testing.T, servers []*redistest.Server) (*gatedClient, []*gateNode) {
	gs := make([]*gateNode, len(servers))
	ns := make([]node.Node, len(servers))
	reads := newReadBarrier(len(servers))
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		gs[i] = &gateNode{Node: n, reads: reads}
		ns[i] = gs[i]
	}
	g := &gatedClient{n: len(servers), acquired: make(chan struct{}, 1000)}
	c, err := redlock.New(ns, redlock.WithNodeTimeout(time.Second), redlock.WithBreaker(0),
		redlock.WithHooks(redlock.Hooks{OnNodeReply: func(e redlock.NodeReplyEvent) {
			if e.Op == "acquire" {
				g.acquired <- struct{}{}
			}
		}}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	g.Client = c
	return g, gs
}

// lock takes the lock on resource and returns once every node has answered the
// acquisition (a straggler's reply would make the outcome of a later Fence
// depend on timing: a node is trusted or repaired only once its reply is in).
func (g *gatedClient) lock(t *testing.T, ctx context.Context, resource string, opts ...redlock.LockOption) (*redlock.Lock, error) {
	t.Helper()
	l, err := g.Lock(ctx, resource, opts...)
	for i := 0; i < g.n; i++ {
		select {
		case <-g.acquired:
		case <-ctx.Done():
			t.Fatal("acquisition's replies")
		}
	}
	return l, err
}

// release releases l and waits until no server has its lock key: Release
// returns once a majority released, and another client's next grant must not
// depend on whether the last node's release landed before it.
func release(t *testing.T, ctx context.Context, servers []*redistest.Server, l *redlock.Lock) {
	t.Helper()
	require.NoError(t, l.Release(ctx))
	key := redlock.LockKey(redlock.DefaultKeyPrefix, l.Resource())
	for _, s := range servers {
		require.Eventually(t, func() bool {
			n, err := redis.Int(s.Do("EXISTS", key))
			return err == nil && n == 0
		}, 5*time.Second, time.Millisecond, "the release on %s did not land", s.URL())
	}
}

// counters returns each server's counter at fenceKey ("none" when absent).
func counters(t *testing.T, servers []*redistest.Server, fenceKey string) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		v, err := redis.String(s.Do("GET", fenceKey))
		if errors.Is(err, redis.ErrNil) {
			v, err = "none", nil
		}
		require.NoError(t, err)
		out[i] = v
	}
	return out
}

// awaitCounters waits, while the fenced lock is still held, until the
// servers' counters at fenceKey are want: Fence returns once a majority took
// its write, and the last node's write (a repair, lock-checked) is refused if
// it lands after the release (a CI run: n2 "none" where the repair was to
// write 2).
func awaitCounters(t *testing.T, servers []*redistest.Server, fenceKey string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := counters(t, servers, fenceKey)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters %v after 5s, want %v", got, want)
		}
		time.Sleep(time.Millisecond) // polling the servers: no signal to await
	}
}

// restoreCounters is the operator's procedure of docs/fencing.md §6 (the same
// script, verbatim): raise, never lower, the counter on every node to h.
func restoreCounters(t *testing.T, servers []*redistest.Server, fenceKey, h string) {
	const script = "local c = redis.call('GET', KEYS[1]) if (not c) or #c < #ARGV[1] or (#c == #ARGV[1] and c < ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end return redis.call('GET', KEYS[1])"
	for _, s := range servers {
		_, err := s.Do("EVAL", script, 1, fenceKey, h)
		require.NoError(t, err)
	}
}

// landed returns the error of a held call that was let go.
func landed(t *testing.T, ctx context.Context, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		t.Fatal("the held call did not land")
		return nil
	}
}

// fenced takes the lock on resource with c and fences it.
func fenced(t *testing.T, ctx context.Context, c *gatedClient, resource string) (*redlock.Lock, uint64, error) {
	t.Helper()
	l, err := c.lock(t, ctx, resource)
	require.NoError(t, err)
	tok, err := l.Fence(ctx)
	return l, tok, err
}

// TestFenceDelayedRaiseOnWipedNode: N=3, clients X, Y, Z (three processes);
// one node (n2) loses its data; no clock fault, every lease holds, every node
// is up. X's raise of n2 (X did not hold n2) is held in the network past Y's
// write-back of a larger token on n2 and past n2's wipe. Before the fix the
// raise re-created n2's counter at X's token, 2; Z then held n0 (2: Y's raise
// to it had failed) and n2 (2), trusted both and fenced 3, Y's token, although
// Z came after Y on n2. Now a raise never creates a counter: n2 stays without
// one, and Z, trusting only n0, gets no token.
func TestFenceDelayedRaiseOnWipedNode(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	const fenceKey = "redlock:{res}:fence"
	cx, gx := newGatedClient(t, servers)
	cy, gy := newGatedClient(t, servers)
	cz, gz := newGatedClient(t, servers)

	// A first fenced grant, G0, left counter 1 on every node: seeded, since
	// under load the first Fence's plan may lack a straggler's reply and
	// leave that node without a counter (a CI run saw [1 none 1]).
	for _, s := range servers {
		_, err := s.Do("SET", fenceKey, "1")
		require.NoError(t, err)
	}
	require.Equal(t, []string{"1", "1", "1"}, counters(t, servers, fenceKey))

	// X cannot reach n2 when it acquires; its raise of n2 is held.
	gx[2].setCut(true)
	x, err := cx.lock(t, ctx, "res")
	require.NoError(t, err)
	gx[2].setCut(false)
	landX := gx[2].holdNextRaise()
	tokX, err := x.Fence(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), tokX)
	release(t, ctx, servers, x)

	// Y cannot reach n0: it holds n1 (2) and n2 (1) and fences 3.
	gy[0].setCut(true)
	y, tokY, err := fenced(t, ctx, cy, "res")
	require.NoError(t, err)
	require.Equal(t, uint64(3), tokY)
	release(t, ctx, servers, y)
	require.Equal(t, []string{"2", "3", "3"}, counters(t, servers, fenceKey))

	// n2 loses its data; X's raise lands there.
	_, err = servers[2].Do("FLUSHALL")
	require.NoError(t, err)
	close(landX)
	require.NoError(t, landed(t, ctx, gx[2].raised))
	assert.Equal(t, []string{"2", "3", "none"}, counters(t, servers, fenceKey),
		"a late raise re-created the wiped node's counter below the token it had accepted")

	// Z cannot reach n1: it holds n0 (2) and n2 (no counter: a suspect).
	gz[1].setCut(true)
	z, tokZ, err := fenced(t, ctx, cz, "res")
	if err == nil {
		require.NotEqual(t, tokY, tokZ, "token %d granted to Y and to Z, and Z came after Y on n2", tokY)
	}
	// n1, cut off, has a counter: not heard, not the operator's case.
	require.ErrorIs(t, err, redlock.ErrUnavailable, "Z trusts n0 only")
	require.ErrorContains(t, err, "too few nodes answered")
	release(t, ctx, servers, z)

	// With every node reachable, the next fenced grant trusts n0 and n1 and
	// repairs n2 inside its lock: the sequence goes on above Y's token.
	gz[1].setCut(false)
	w, tokW, err := fenced(t, ctx, cz, "res")
	require.NoError(t, err)
	require.Equal(t, uint64(4), tokW)
	awaitCounters(t, servers, fenceKey, "4", "4", "4")
	release(t, ctx, servers, w)
	require.Equal(t, []string{"4", "4", "4"}, counters(t, servers, fenceKey))
}

// TestFenceDelayedCreateOnWipedNode: as TestFenceDelayedRaiseOnWipedNode, with
// the first token's creation (CreateFence, by X, which held n2) held on its way
// to n2 until n2 has accepted a larger token (Y2's 3) and lost its data. Before
// the fix it re-created n2's counter at 1 whatever the lock key held, and Z,
// holding n0 (2) and n2 (1), fenced 3 again. The prototype of the fix created
// it only if some lock key existed: that still re-creates it when another
// grant, which never repairs n2 (it does not fence), holds n2 at that moment.
// Now the counter is created only inside X's own lock window, which n2's wipe
// closed: nothing is written.
func TestFenceDelayedCreateOnWipedNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// holder: while the creation lands, another client holds n2's lock
		// key (and never fences).
		holder bool
	}{
		{"no lock key", false},
		{"another holder's lock key", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			ctx := ctxT(t, 20*time.Second)
			const fenceKey = "redlock:{res}:fence"
			cx, gx := newGatedClient(t, servers)
			cy, gy := newGatedClient(t, servers)
			cw, _ := newGatedClient(t, servers)
			cz, gz := newGatedClient(t, servers)

			// X: fresh resource; its creation on n2 is held (X sees a timeout).
			landX := gx[2].holdNextCreate()
			x, tokX, err := fenced(t, ctx, cx, "res")
			require.NoError(t, err)
			require.Equal(t, uint64(1), tokX)
			release(t, ctx, servers, x)
			require.Equal(t, []string{"1", "1", "none"}, counters(t, servers, fenceKey))

			// Y1: n2 is a suspect, repaired inside Y1's lock with 2.
			y1, tokY1, err := fenced(t, ctx, cy, "res")
			require.NoError(t, err)
			require.Equal(t, uint64(2), tokY1)
			awaitCounters(t, servers, fenceKey, "2", "2", "2")
			release(t, ctx, servers, y1)
			require.Equal(t, []string{"2", "2", "2"}, counters(t, servers, fenceKey))

			// Y2 cannot reach n0: it fences 3 on n1 and n2.
			gy[0].setCut(true)
			y2, tokY2, err := fenced(t, ctx, cy, "res")
			require.NoError(t, err)
			require.Equal(t, uint64(3), tokY2)
			release(t, ctx, servers, y2)
			gy[0].setCut(false)

			_, err = servers[2].Do("FLUSHALL")
			require.NoError(t, err)
			var w *redlock.Lock
			if tc.holder {
				w, err = cw.lock(t, ctx, "res")
				require.NoError(t, err)
			}
			close(landX)
			require.NoError(t, landed(t, ctx, gx[2].created))
			assert.Equal(t, []string{"2", "3", "none"}, counters(t, servers, fenceKey),
				"a late creation re-created the wiped node's counter below the token it had accepted")
			if w != nil {
				release(t, ctx, servers, w)
			}

			// Z cannot reach n1: it holds n0 (2) and n2 (no counter).
			gz[1].setCut(true)
			z, tokZ, err := fenced(t, ctx, cz, "res")
			if err == nil {
				require.NotEqual(t, tokY2, tokZ, "token %d granted to Y2 and to Z, and Z came after Y2 on n2", tokY2)
			}
			// n1, cut off, has a counter: not heard, not the operator's case.
			require.ErrorIs(t, err, redlock.ErrUnavailable, "Z trusts n0 only")
			require.ErrorContains(t, err, "too few nodes answered")
			release(t, ctx, servers, z)
		})
	}
}

// TestFenceMinorityCounterFailsSafe: the first Fence of a fresh resource
// creates the counter on one node of three (the other two are cut off once the
// counters were read, for the write-back) and fails. No node loses anything, and afterwards every node
// answers; but the counter is on a minority, and a node without it is not
// trusted (it could be a wiped node), so every later Fence fails with
// ErrLockLost, as after the loss of a majority's counters. This is the
// fail-safe state of docs/fencing.md §6, unchanged by the fix; the operator's
// procedure documented there (raise the counter on every node) ends it.
func TestFenceMinorityCounterFailsSafe(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	const fenceKey = "redlock:{res}:fence"
	c, gs := newGatedClient(t, servers)

	l, err := c.lock(t, ctx, "res")
	require.NoError(t, err)
	for _, g := range gs[1:] { // Fence reads the counters from all three, then writes to n0 only
		g.mu.Lock()
		g.cutOnRead = true
		g.mu.Unlock()
	}
	_, err = l.Fence(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	for _, g := range gs[1:] {
		g.mu.Lock()
		g.cut, g.cutOnRead = false, false
		g.mu.Unlock()
	}
	require.NoError(t, l.Release(ctx))
	require.Equal(t, []string{"1", "none", "none"}, counters(t, servers, fenceKey))

	for i := 0; i < 5; i++ {
		l, _, err := fenced(t, ctx, c, "res")
		require.ErrorIs(t, err, redlock.ErrLockLost, "grant %d", i)
		require.ErrorContains(t, err, "fence counter missing")
		require.NoError(t, l.Release(ctx))
		_, err = c.lock(t, ctx, "res", redlock.WithFence())
		require.ErrorIs(t, err, redlock.ErrLockLost, "an eager lock fails too")
	}
	require.Equal(t, []string{"1", "none", "none"}, counters(t, servers, fenceKey))

	// The operator: the resource never accepted a token (H = 0), the largest
	// counter is 1: every node is raised to 1.
	restoreCounters(t, servers, fenceKey, "1")
	l, tok, err := fenced(t, ctx, c, "res")
	require.NoError(t, err)
	require.Equal(t, uint64(2), tok)
	require.NoError(t, l.Release(ctx))
}

// TestFenceFailedFirstFenceCreatesNothing: N=3 (j, k, l), one node (k) loses
// its data, every node answers. B takes j and l before the resource is fenced,
// its acquisition on k is delayed, and its key on j ends early. A1, A2, A3
// take j and k (l refuses: B holds it) and fence 1, 2, 3. k is wiped, B's
// delayed acquisition lands there, and B fences from a fresh plan (its replies
// from j and l predate every counter). B's first-token write-back finds j's
// counter and fails. Before the fix it was one round, in which B also created
// counters at 1 on k and l, where it holds the lock: k had accepted 3 before
// its wipe. Z then held k and l (1, 1; its acquisition on j straggling) and
// fenced 2, below A3's 3, although Z came after A3 on k. Now the first round
// only checks, on every node, and nothing is created when a counter exists;
// Z sees no counter, waits for j (3), trusts j only and gets no token.
func TestFenceFailedFirstFenceCreatesNothing(t *testing.T) {
	for _, m := range lateReads {
		t.Run(m.name, func(t *testing.T) { testFenceFailedFirstFenceCreatesNothing(t, m.write, m.fair, m.cause) })
	}
}

func testFenceFailedFirstFenceCreatesNothing(t *testing.T, write, fair bool, cause string) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	nodes, delay := delayedNodes(t, servers)
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(10*time.Second))
	require.NoError(t, err)
	defer c.Close()
	const key, fenceKey = "redlock:{res}", "redlock:{res}:fence"
	j, k := 0, 1 // l = 2
	onK, hook := acquireReplies(nodes[k])
	cb := bClient(t, nodes, fair, hook)

	bOnK := delay[k].delayNext()
	b, err := bLock(ctx, cb, "res", write)
	require.NoError(t, err, "B holds j and l")
	<-bOnK.arrived
	_, err = servers[j].Do("DEL", key) // B's key on j ends early
	require.NoError(t, err)

	var last uint64
	for i := 0; i < 3; i++ {
		// Lock, not TryLock: l's refusal could make a single attempt give
		// up before j and k answer (a split vote).
		a, err := c.Lock(ctx, "res")
		require.NoError(t, err, "A%d holds j and k", i+1)
		last, err = a.Fence(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), last)
		require.NoError(t, a.Release(ctx))
	}
	assert.Equal(t, []string{"3", "3", "none"}, counters(t, servers, fenceKey), "l is not raised: it has no counter")

	_, err = servers[k].Do("FLUSHALL")
	require.NoError(t, err)
	close(bOnK.send)
	<-bOnK.landed
	awaitCounted(t, ctx, onK) // B's Release then asks k too
	_, err = b.Fence(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.ErrorContains(t, err, cause)
	assert.Equal(t, []string{"3", "none", "none"}, counters(t, servers, fenceKey),
		"a failed first Fence created counters")
	require.NoError(t, b.Release(ctx))

	zOnJ := delay[j].delayNext()
	z, err := c.TryLock(ctx, "res")
	require.NoError(t, err, "Z holds k and l")
	type result struct {
		tok uint64
		err error
	}
	done := make(chan result, 1)
	go func() { tok, err := z.Fence(ctx); done <- result{tok, err} }()
	time.Sleep(200 * time.Millisecond) // Z plans without j's reply
	close(zOnJ.send)
	<-zOnJ.landed
	r := <-done
	if r.err == nil {
		require.Greater(t, r.tok, last, "Z fenced %d after A3's %d, and came after A3 on k", r.tok, last)
	}
	require.ErrorIs(t, r.err, redlock.ErrLockLost, "Z trusts j only")
	require.NoError(t, z.Release(ctx))
}

// TestFenceReadsAfterOwnAcquisition: a default client's Fence reads the
// counters after Lock returned, and Lock returns on a majority. Here the
// counters are on j and k only (l's was never written: the first token's
// creation reached a bare majority) and the lock's acquisition on j is still
// in flight (not even sent) when Fence starts, so the lock holds k and l:
// k has a counter, l is a suspect. Before the fix the read reached j before
// the acquisition and found the lock not held there: one trusted node, and
// Fence failed with ErrLockLost ("another grant can fence") while the lock
// was held (CI run u9, 5 December 2026, through ExampleLock_Fence). The read
// on j now waits for the lock's own acquisition there, and Fence gets 2.
func TestFenceReadsAfterOwnAcquisition(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	nodes, delay := delayedNodes(t, servers)
	var mu sync.Mutex
	fenced := map[string]bool{}    // nodes whose fence read was counted
	read := make(chan struct{}, 1) // a wake-up: the map says what was counted
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(10*time.Second), redlock.WithHooks(redlock.Hooks{
		OnNodeReply: func(e redlock.NodeReplyEvent) {
			if e.Op != "fence" {
				return
			}
			mu.Lock()
			fenced[e.Node] = true
			mu.Unlock()
			select {
			case read <- struct{}{}:
			default:
			}
		},
	}))
	require.NoError(t, err)
	defer c.Close()
	const fenceKey = "redlock:{res}:fence"
	j, k, l := 0, 1, 2
	for _, i := range []int{j, k} {
		_, err := servers[i].Do("SET", fenceKey, "1")
		require.NoError(t, err)
	}

	onJ := delay[j].delayNext()
	lk, err := c.TryLock(ctx, "res")
	require.NoError(t, err, "the lock holds k and l")
	<-onJ.arrived
	type result struct {
		tok uint64
		err error
	}
	done := make(chan result, 1)
	go func() { tok, err := lk.Fence(ctx); done <- result{tok, err} }()
	// Let the acquisition on j go once k's and l's reads were counted.
	for {
		select {
		case <-read:
		case <-ctx.Done():
			t.Fatal("the reads of k and l were not counted")
		}
		mu.Lock()
		both := fenced[nodes[k].Name()] && fenced[nodes[l].Name()]
		mu.Unlock()
		if both {
			break
		}
	}
	close(onJ.send)
	<-onJ.landed
	r := <-done
	require.NoError(t, r.err, "Fence while the lock is held on every node")
	require.Equal(t, uint64(2), r.tok)
	require.NoError(t, lk.Release(ctx))
}
