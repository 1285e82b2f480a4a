package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// fairQueue drives the waiters' queue of one key on one node.
type fairQueue struct {
	t          *testing.T
	n          *node.Redis
	ctx        context.Context
	key, fence string
	base       int64 // added to the waiters' tickets: now, in µs
}

// waiter is a waiter leased for a minute. Its ticket is an offset: the
// queue helpers (fairQueue, wakeQueue) add their base, a time on the nodes'
// clocks (a node queues a waiter only within node.TicketBound of its clock).
func waiter(id string, ticket int64) node.Waiter {
	return node.Waiter{ID: id, Ticket: ticket, Lease: time.Minute}
}

// acquire is AcquireFair with a TTL of a minute; it must not fail.
func (f fairQueue) acquire(token string, w node.Waiter) node.Acquired {
	f.t.Helper()
	w.Ticket += f.base
	a, err := f.n.AcquireFair(f.ctx, f.key, f.fence, token, time.Minute, w)
	require.NoError(f.t, err)
	return a
}

// release is ReleaseFair; it must not fail.
func (f fairQueue) release(token, waiter string) bool {
	f.t.Helper()
	ok, _, err := f.n.ReleaseFair(f.ctx, f.key, token, waiter, true)
	require.NoError(f.t, err)
	return ok
}

// The waiters' queue serves the lowest ticket first, whatever the order of
// arrival; a waiter that leaves, or whose lease runs out, gives its turn.
func TestFairQueue(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)
	const key, fence = "redlock:{q}", "redlock:{q}:fence"
	q, qx := node.QueueKeys(key)
	queued := func() []string {
		members, err := redis.Strings(s.Do("ZRANGE", q, 0, -1))
		require.NoError(t, err)
		return members
	}
	f := fairQueue{t, n, ctx, key, fence, time.Now().UnixMicro()}
	acquire, release := f.acquire, func(token, id string) { require.True(t, f.release(token, id)) }

	// Alone in the queue: its turn. The holder stays at the head until its
	// release takes it out.
	a := acquire("t-first", waiter("first", 200))
	require.True(t, a.OK)
	assert.Zero(t, a.Ahead, "a grant has nobody ahead")
	assert.Equal(t, []string{"first"}, queued(), "the holder stays at the head")
	release("t-first", "first")
	assert.Empty(t, queued(), "its release takes it out")

	// early and late both queued, late first: early has the lower ticket.
	require.True(t, acquire("t-holder", waiter("holder", 10)).OK)
	late, early := waiter("late", 200), waiter("early", 100)
	a = acquire("t-late", late)
	require.False(t, a.OK, "held")
	assert.Equal(t, 1, a.Ahead, "the holder is ahead")
	a = acquire("t-early", early)
	require.False(t, a.OK, "held")
	assert.Equal(t, 1, a.Ahead, "the lower ticket goes before late")
	release("t-holder", "holder")
	a = acquire("t-late", late)
	require.False(t, a.OK, "early is queued ahead, though it came after")
	assert.Equal(t, 1, a.Ahead, "early is ahead")
	require.NoError(t, n.LeaveQueue(ctx, key, early.ID))
	// An attempt of early that reaches the node after its leave (sent before
	// it, on another connection) is refused, and does not queue it again.
	require.False(t, acquire("t-early2", early).OK, "early left: a late attempt")
	assert.NotContains(t, queued(), early.ID)
	require.True(t, acquire("t-late", late).OK, "early left")
	release("t-late", "late")

	// crashed queues (the lock is held), then never comes back: once the lock
	// is free, the next waiter waits until crashed's lease runs out.
	require.True(t, acquire("t-holder2", waiter("holder2", 10)).OK)
	crashed := node.Waiter{ID: "crashed", Ticket: 50, Lease: 50 * time.Millisecond}
	require.False(t, acquire("t-crashed", crashed).OK)
	release("t-holder2", "holder2")
	next := waiter("next", 200)
	for !acquire("t-next", next).OK {
		select {
		case <-ctx.Done():
			t.Fatal("the crashed waiter's lease never ran out")
		case <-time.After(10 * time.Millisecond): // polling, as a waiter does
		}
	}
	assert.Equal(t, []string{"next"}, queued())
	release("t-next", "next")
	n0, err := redis.Int64(s.Do("EXISTS", q))
	require.NoError(t, err)
	assert.Zero(t, n0, "an empty queue is gone")
	left, err := redis.Strings(s.Do("ZRANGE", qx, 0, -1))
	require.NoError(t, err)
	for _, m := range left {
		assert.True(t, strings.HasPrefix(m, "-"), "only the marks of waiters that left remain: %q", m)
	}
	ttl, err := redis.Int64(s.Do("PTTL", qx))
	require.NoError(t, err)
	assert.Positive(t, ttl, "and they expire")
}

// A fair release wakes the head of the queue only, on its own channel; with
// nobody queued, the key's watchers.
func TestFairReleaseWakesTheHead(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)
	const key, fence = "redlock:{h}", "redlock:{h}:fence"

	sub, err := s.Dial()
	require.NoError(t, err)
	defer sub.Close()
	psc := redis.PubSubConn{Conn: sub}
	require.NoError(t, psc.PSubscribe("redlock:{h}*"))
	_, ok := psc.Receive().(redis.Subscription)
	require.True(t, ok)
	published := func() []string { // channels published until a marker
		_, err := s.Do("PUBLISH", "redlock:{h}:marker", "x")
		require.NoError(t, err)
		var got []string
		for {
			m, ok := psc.Receive().(redis.Message)
			require.True(t, ok)
			if m.Channel == "redlock:{h}:marker" {
				return got
			}
			got = append(got, m.Channel)
		}
	}

	f := fairQueue{t, n, ctx, key, fence, time.Now().UnixMicro()}
	a := f.acquire("t-holder", waiter("holder", 1))
	require.True(t, a.OK)
	for i, id := range []string{"c", "b"} { // b has the lower ticket
		a = f.acquire("t-"+id, waiter(id, int64(30-10*i)))
		require.False(t, a.OK)
	}
	assert.False(t, f.release("t-other", ""), "not the owner")
	assert.Empty(t, published(), "nothing released, nobody woken")
	assert.True(t, f.release("t-holder", "holder"))
	assert.Equal(t, []string{node.WaiterChannel(key, "b")}, published(), "the holder left the head")

	// b leaves from the head, the lock free: it passes its turn on to c (a
	// waiter woken that gives up would otherwise leave the next one to its
	// poll).
	require.NoError(t, n.LeaveQueue(ctx, key, "b"))
	assert.Equal(t, []string{node.WaiterChannel(key, "c")}, published(), "the head left: the next one woken")

	// A waiter named group/rest is told on its group's channel.
	a = f.acquire("t-g", waiter("g/1", 5))
	require.True(t, a.OK)
	assert.True(t, f.release("t-g", "g/1"))
	assert.Equal(t, []string{node.WaiterChannel(key, "c")}, published())
	f.acquire("t-c", waiter("c", 30))
	f.acquire("t-g", waiter("g/2", 6))
	assert.True(t, f.release("t-c", "c"))
	assert.Equal(t, []string{key + ":w:g"}, published())
	assert.Equal(t, key+":w:g", node.WaiterChannel(key, "g/2"))

	require.NoError(t, n.LeaveQueue(ctx, key, "g/2"))
	require.NoError(t, n.LeaveQueue(ctx, key, "c"))
	assert.Empty(t, published(), "nobody left to wake")
	assert.False(t, f.release("t-holder", ""))
	assert.Equal(t, []string{key}, published(), "the key is free and nobody is queued")

	// x got the lock elsewhere while this node, still held by p, refused it
	// and kept it at the head: p's release wakes x, for nothing; x's release
	// takes it out of the queue and wakes the next waiter.
	_, err = s.Do("SET", key, "t-p")
	require.NoError(t, err)
	for i, id := range []string{"x", "y"} {
		a = f.acquire("t-"+id, waiter(id, int64(100+i)))
		require.False(t, a.OK)
	}
	assert.True(t, f.release("t-p", ""))
	assert.Equal(t, []string{node.WaiterChannel(key, "x")}, published())
	assert.False(t, f.release("t-x", "x"), "x held nothing here")
	assert.Equal(t, []string{node.WaiterChannel(key, "y")}, published(), "x left the queue")

	// y missed that wake-up: an attempt by a waiter behind it, the lock free,
	// wakes it again. While the lock is held, such an attempt wakes nobody.
	a = f.acquire("t-z", waiter("z", 300))
	require.False(t, a.OK)
	assert.Equal(t, 1, a.Ahead)
	assert.Equal(t, []string{node.WaiterChannel(key, "y")}, published(), "the head woken again")
	_, err = s.Do("SET", key, "t-p")
	require.NoError(t, err)
	a = f.acquire("t-z", waiter("z", 300))
	require.False(t, a.OK)
	assert.Empty(t, published(), "held: no wake-up")
	_, err = s.Do("DEL", key)
	require.NoError(t, err)
	require.NoError(t, n.LeaveQueue(ctx, key, "y"))
	require.NoError(t, n.LeaveQueue(ctx, key, "z"))
}

// The queue's mark outlives the queue: whenever the queue exists, its mark
// expires no earlier (PEXPIRETIME), whatever the waiters' leases and the
// order of their arrivals, leaves and releases, so that a release that finds
// no mark (fairrelease.lua: one MGET with the lock key) may skip the queue.
// And the release reads the queue, and wakes its head, while it has one.
func TestQueueMarkOutlivesTheQueue(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)
	const key, fence = "redlock:{mark}", "redlock:{mark}:fence"
	q, _ := node.QueueKeys(key)
	mark := node.QueueMarkKey(key)
	withQueue := 0
	check := func(step string) {
		t.Helper()
		if checkQueueExpiries(t, s, key, step) {
			withQueue++
		}
	}
	base := time.Now().UnixMicro()
	leases := []time.Duration{100 * time.Millisecond, 5 * time.Second, time.Second, 20 * time.Second, 300 * time.Millisecond}
	holder := ""
	for i := range 60 {
		w := node.Waiter{ID: "w/" + string(rune('a'+i%7)), Ticket: base + int64(i%7), Lease: leases[i%len(leases)]}
		switch i % 4 {
		case 0, 1: // queue, or take the lock at the head
			tok := "t" + w.ID
			a, err := n.AcquireFair(ctx, key, fence, tok, time.Minute, w)
			require.NoError(t, err)
			if a.OK {
				holder = w.ID
			}
		case 2: // leave
			require.NoError(t, n.LeaveQueue(ctx, key, w.ID))
		case 3: // the holder releases
			if holder != "" {
				ok, _, err := n.ReleaseFair(ctx, key, "t"+holder, holder, false)
				require.NoError(t, err)
				require.True(t, ok)
				holder = ""
			}
		}
		check(strings.Repeat("·", i%4) + w.ID)
		if i == 30 { // every waiter gone at once: the queue goes, the mark may stay
			_, err := s.Do("DEL", q)
			require.NoError(t, err)
		}
	}

	require.Greater(t, withQueue, 15, "the steps seldom had a queue: they test little")

	// With a waiter queued and the lock free, a release that finds the mark
	// wakes the head on its channel, told of the key's watchers or not.
	_, err := s.Do("DEL", key, q, mark)
	require.NoError(t, err)
	base = time.Now().UnixMicro() // the steps above may have taken longer than node.TicketBound
	require.True(t, fairQueue{t, n, ctx, key, fence, base}.acquire("t-h", waiter("h/1", 1)).OK)
	_, err = n.AcquireFair(ctx, key, fence, "t-next", time.Minute, node.Waiter{ID: "next/1", Ticket: base + 2, Lease: time.Minute})
	require.NoError(t, err)
	woken, stop, err := n.Watch(ctx, node.WaiterChannel(key, "next/1"))
	require.NoError(t, err)
	defer stop()
	ok, queued, err := n.ReleaseFair(ctx, key, "t-h", "h/1", false)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, queued, "a waiter was queued: the releaser is told")
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatal("the head was not woken")
	}
}

// A queued attempt lengthens the expiries of the queue, its mark and the
// leases (to twice the caller's lease) only when less than one lease is
// left: most attempts write none of them (issue 26, server commands: three
// writes per attempt before), every live lease stays within them, and none
// is ever shortened.
func TestQueueExpiriesLengthenedOnlyWhenLow(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)
	const key, fence = "redlock:{exp}", "redlock:{exp}:fence"
	q, qx := node.QueueKeys(key)
	mark := node.QueueMarkKey(key)
	const lease = time.Minute
	f := fairQueue{t, n, ctx, key, fence, time.Now().UnixMicro()}
	pttl := func(k string) time.Duration {
		ms, err := redis.Int64(s.Do("PTTL", k))
		require.NoError(t, err)
		return time.Duration(ms) * time.Millisecond
	}
	writes := func() int64 {
		calls := s.Calls()
		return calls["pexpire"] + calls["set"]
	}

	require.True(t, f.acquire("t-h", waiter("h", 1)).OK)
	require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	for _, k := range []string{q, qx, mark} {
		assert.Greater(t, pttl(k), lease, "%s: a new queue's expiry covers the lease", k)
	}
	before := writes()
	for range 3 {
		time.Sleep(2 * time.Millisecond) // the expiries go down (PTTL counts in ms)
		require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	}
	assert.Equal(t, before, writes(), "attempts with more than a lease left wrote an expiry")

	// Just over a lease left: nothing written.
	set := func(k string, d time.Duration) {
		_, err := s.Do("PEXPIRE", k, d.Milliseconds())
		require.NoError(t, err)
	}
	for _, k := range []string{q, qx, mark} {
		set(k, lease+5*time.Second)
	}
	before = writes()
	require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	assert.Equal(t, before, writes(), "an attempt with more than a lease left wrote an expiry")

	// Just under a lease left: lengthened, the three together.
	for _, k := range []string{q, qx, mark} {
		set(k, lease-5*time.Second)
	}
	require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	for _, k := range []string{q, qx, mark} {
		assert.InDelta(t, float64(2*lease), float64(pttl(k)), float64(5*time.Second), "%s lengthened to twice the lease", k)
	}

	// The leases outlive the queue, whatever else set their expiry: a
	// waiter is dropped only through its lease there (an adversarial
	// review: the leases' key expired with a crashed head's lease, and the
	// queue, renewed by the others, kept it at its head for good).
	set(q, lease+20*time.Second)
	set(qx, lease+5*time.Second)
	require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	assert.GreaterOrEqual(t, expireTime(t, s, qx), expireTime(t, s, q), "the leases expire before the queue")

	// The same through the scripts alone (a second review): a waiter with a
	// short lease queues; a leave gives the leases 10 s; a waiter with a
	// longer lease then lengthens the queue to twice its own: the leases
	// must follow.
	g := fairQueue{t, n, ctx, "redlock:{exp2}", "redlock:{exp2}:fence", time.Now().UnixMicro()}
	q2, qx2 := node.QueueKeys(g.key)
	require.True(t, g.acquire("t-h", node.Waiter{ID: "h", Ticket: 1, Lease: time.Second}).OK)
	require.False(t, g.acquire("t-a", node.Waiter{ID: "a", Ticket: 2, Lease: time.Second}).OK)
	require.NoError(t, n.LeaveQueue(ctx, g.key, "gone"))
	time.Sleep(2 * time.Millisecond) // the leases' expiry goes down from 10 s
	require.False(t, g.acquire("t-b", node.Waiter{ID: "b", Ticket: 3, Lease: 5 * time.Second}).OK)
	assert.GreaterOrEqual(t, expireTime(t, s, qx2), expireTime(t, s, q2), "the leases expire before the queue")

	// Never shortened: a longer expiry (another waiter's longer lease) stays.
	for _, k := range []string{q, qx, mark} {
		_, err := s.Do("PEXPIRE", k, (10 * time.Minute).Milliseconds())
		require.NoError(t, err)
	}
	require.False(t, f.acquire("t-w", waiter("w", 2)).OK)
	for _, k := range []string{q, qx, mark} {
		assert.Greater(t, pttl(k), 9*time.Minute, "%s shortened", k)
	}
}

// The scripts keep the queue's invariants whatever they run in what order,
// with short leases that lapse and expiries that run low: every queued
// waiter has a lease; the leases' key expires no sooner than the queue, and
// the queue no sooner than any live lease in it; the queue's mark lives as
// long as the queue. A random walk of attempts, releases and leaves on a
// real server, checked after every step.
func TestQueueExpiryInvariants(t *testing.T) {
	s, n, ctx := dialed(t, 30*time.Second)
	const key = "redlock:{inv}"
	rng := rand.New(rand.NewPCG(26, 6))
	check := func(step int, what string) {
		t.Helper()
		checkQueueExpiries(t, s, key, fmt.Sprintf("step %d (%s)", step, what))
	}
	holder, holderWaiter := "", ""
	var grants, releases, behind int
	var gen [5]int
	var ticket [5]int64
	for i := range ticket {
		ticket[i] = time.Now().UnixMicro()
	}
	next := func(i int) { gen[i]++; ticket[i] = time.Now().UnixMicro() } // a new Lock call
	for step := range 400 {
		i := rng.IntN(5)
		id := fmt.Sprintf("w%d.%d", i, gen[i])
		lease := time.Duration(20+rng.IntN(200)) * time.Millisecond
		var what string
		switch op := rng.IntN(10); {
		case op < 6:
			token := fmt.Sprintf("t-%s-%d", id, step)
			a, err := n.AcquireFair(ctx, key, key, token, time.Minute,
				node.Waiter{ID: id, Ticket: ticket[i], Lease: lease})
			require.NoError(t, err)
			what = "attempt of " + id
			if a.OK {
				require.Empty(t, holder, "step %d: granted while %s holds", step, holderWaiter)
				holder, holderWaiter = token, id
				grants++
			} else if a.Queue == node.Queued && a.Ahead > 0 {
				behind++
			}
		case op < 8 && holder != "":
			ok, _, err := n.ReleaseFair(ctx, key, holder, holderWaiter, false)
			require.NoError(t, err)
			require.True(t, ok)
			what = "release by " + holderWaiter
			releases++
			var j int
			_, _ = fmt.Sscanf(holderWaiter, "w%d.", &j)
			next(j)
			holder, holderWaiter = "", ""
		case op < 9 && id != holderWaiter:
			require.NoError(t, n.LeaveQueue(ctx, key, id))
			what = "leave of " + id
			next(i)
		default:
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
			what = "a pause"
		}
		check(step, what)
	}
	t.Logf("grants %d, releases %d, refused behind others %d", grants, releases, behind)
	require.Greater(t, grants, 20, "the walk hardly granted: it checked little")
	require.Greater(t, behind, 20, "the walk hardly queued anyone behind another")
}

// Waiters that crashed while the lock was held are dropped by the refused
// attempts of the live waiters behind them, not left for the release, which
// drops at most 100 (oldest deadline first) before it wakes the head: with
// 250 crashed waiters ahead of a live one W, the release must wake W, and
// W's next attempt be granted. (An adversarial review of cc075b4, 6
// December 2026, which dropped them only while the lock was free, to save a
// command per refused attempt: the release then woke a dead head, and W
// waited for its poll, 190–790 ms across three nodes instead of 4–8 ms.)
func TestCrashedWaitersDroppedWhileHeld(t *testing.T) {
	s, n, ctx := dialed(t, 30*time.Second)
	const key = "redlock:{pile}"
	q, _ := node.QueueKeys(key)
	f := fairQueue{t, n, ctx, key, key, time.Now().UnixMicro()}
	require.True(t, f.acquire("t-x", waiter("x/1", 1)).OK)
	for i := range 250 {
		require.False(t, f.acquire("t-d", node.Waiter{ID: fmt.Sprintf("d%d/1", i), Ticket: int64(10 + i), Lease: 30 * time.Millisecond}).OK)
	}
	w := node.Waiter{ID: "w/1", Ticket: 10000, Lease: time.Minute}
	woken, stop, err := n.Watch(ctx, node.WaiterChannel(key, w.ID))
	require.NoError(t, err)
	defer stop()
	time.Sleep(60 * time.Millisecond) // the crashed waiters' leases lapse (a lease is only read in ms)
	for range 3 {                     // W keeps its place while X holds, as a waiter polls
		require.False(t, f.acquire("t-w", w).OK)
	}
	require.True(t, f.release("t-x", "x/1"))
	head, err := redis.Strings(s.Do("ZRANGE", q, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, []string{"w/1"}, head, "the release woke a crashed waiter")
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("W was not woken by the release")
	}
	assert.True(t, f.acquire("t-w", w).OK, "W, the live head, was refused after the release")
}

// expireTime returns k's PEXPIRETIME on s: -2 with no key, -1 with no expiry.
func expireTime(t *testing.T, s *redistest.Server, k string) int64 {
	t.Helper()
	ms, err := redis.Int64(s.Do("PEXPIRETIME", k))
	require.NoError(t, err)
	return ms
}

// checkQueueExpiries checks the expiries of key's waiters' queue on s, at
// step: the queue and the leases always have one; while the queue exists,
// its mark and the leases expire no sooner, every queued waiter has a
// lease, and the queue outlives every live one. It reports whether the
// queue exists.
func checkQueueExpiries(t *testing.T, s *redistest.Server, key, step string) bool {
	t.Helper()
	q, qx := node.QueueKeys(key)
	members, err := redis.Strings(s.Do("ZRANGE", q, 0, -1))
	require.NoError(t, err)
	qExp, xExp, mExp := expireTime(t, s, q), expireTime(t, s, qx), expireTime(t, s, node.QueueMarkKey(key))
	require.NotEqual(t, int64(-1), qExp, "%s: the queue has no expiry", step)
	require.NotEqual(t, int64(-1), xExp, "%s: the leases have no expiry", step)
	if qExp == -2 {
		require.Empty(t, members)
		return false
	}
	require.GreaterOrEqual(t, xExp, qExp, "%s: the leases expire before the queue", step)
	require.GreaterOrEqual(t, mExp, qExp, "%s: the mark expires before the queue", step)
	tm, err := redis.Int64s(s.Do("TIME"))
	require.NoError(t, err)
	now := tm[0]*1000 + tm[1]/1000
	for _, m := range members {
		dl, err := redis.Int64(s.Do("ZSCORE", qx, m))
		require.NoError(t, err, "%s: queued waiter %s has no lease", step, m)
		if dl >= now {
			require.GreaterOrEqual(t, qExp, dl, "%s: the queue expires before %s's live lease", step, m)
		}
	}
	return true
}

// A head in its place, queued and renewed less than a tenth of its lease ago,
// takes the lock with nothing else written: the attempt of a waiter woken by a release runs
// TIME, ZSCORE (its place and its lease), ZRANK and the SET NX, and leaves
// its lease and the expiries as its last attempt left them (issue 26, server
// commands: it also renewed its lease and read both expiries, 2 commands
// more per acquisition). A head refused because the lock is held renews its
// lease as any queued attempt does, tries the SET NX once, and does not read
// its lease first: 8 commands, as before. A head granted with less than nine
// tenths of its lease left renews it. A head queued over a tenth of its lease
// ago takes the full path, as before (8 commands: reading its lease first
// would cost one more where waits are long).
func TestHeadTakesTheLockWithNothingElseWritten(t *testing.T) {
	s, n, ctx := dialed(t, 10*time.Second)
	const key = "redlock:{head}"
	_, qx := node.QueueKeys(key)
	f := fairQueue{t, n, ctx, key, key, time.Now().UnixMicro()}
	lease := func(id string) int64 {
		t.Helper()
		ms, err := redis.Int64(s.Do("ZSCORE", qx, id))
		require.NoError(t, err)
		return ms
	}
	// calls returns the commands s ran while f ran, INFO and the node's
	// own PING and HELLO aside.
	calls := func(f func()) map[string]int64 {
		t.Helper()
		before := s.Calls()
		f()
		diff := map[string]int64{}
		for name, c := range s.Calls() {
			if d := c - before[name]; d > 0 && !strings.HasPrefix(name, "info") && name != "ping" && name != "hello" && name != "client|setinfo" {
				diff[name] = d
			}
		}
		return diff
	}

	require.True(t, f.acquire("t-h", waiter("h/1", 1)).OK)
	require.False(t, f.acquire("t-w", waiter("w/1", 2)).OK)
	require.False(t, f.acquire("t-x", waiter("x/1", 3)).OK)
	require.True(t, f.release("t-h", "h/1"))
	wLease := lease("w/1")
	time.Sleep(2 * time.Millisecond) // a renewal would move the lease (ms)

	var a node.Acquired
	ran := calls(func() { a = f.acquire("t-w", waiter("w/1", 2)) })
	require.True(t, a.OK, "the head was refused a free lock")
	assert.Equal(t, node.Queued, a.Queue)
	assert.Equal(t, map[string]int64{"evalsha": 1, "time": 1, "zscore": 2, "zrank": 1, "set": 1}, ran,
		"the head's granted attempt ran more than TIME, ZSCORE (place, lease), ZRANK and SET")
	assert.Equal(t, wLease, lease("w/1"), "the granted head's lease was written")
	checkQueueExpiries(t, s, key, "the head granted")

	// The holder releases; another client's plain SET takes the lock
	// before the new head X attempts (acquire.lua grants a free lock to a
	// call not queued): X is refused at the head, its lease renewed.
	require.True(t, f.release("t-w", "w/1"))
	_, err := s.Do("SET", key, "t-other", "PX", 60000)
	require.NoError(t, err)
	xLease := lease("x/1")
	time.Sleep(2 * time.Millisecond)
	ran = calls(func() { a = f.acquire("t-x", waiter("x/1", 3)) })
	require.False(t, a.OK, "the head took a held lock")
	assert.Equal(t, 0, a.Ahead)
	assert.Equal(t, node.Queued, a.Queue)
	assert.Equal(t, int64(1), ran["set"], "the refused head tried the SET NX more than once: %v", ran)
	assert.Equal(t, int64(1), ran["zadd"], "the refused head's lease was not renewed: %v", ran)
	assert.Equal(t, int64(1), ran["zscore"], "the refused head read more than its place (a third review: it read its lease too, a command more than before): %v", ran)
	assert.Equal(t, int64(8), ran["evalsha"]+ran["time"]+ran["zscore"]+ran["zrank"]+ran["set"]+ran["zadd"]+ran["pttl"], "the refused head's attempt: %v", ran)
	assert.Greater(t, lease("x/1"), xLease, "the refused head's lease was not renewed")
	checkQueueExpiries(t, s, key, "the head refused")

	// The other client releases; X's lease was renewed over a tenth of it
	// ago (half a minute of a minute left): granted, its lease renewed.
	_, err = s.Do("DEL", key)
	require.NoError(t, err)
	tm, err := redis.Int64s(s.Do("TIME"))
	require.NoError(t, err)
	_, err = s.Do("ZADD", qx, "XX", tm[0]*1000+tm[1]/1000+30_000, "x/1")
	require.NoError(t, err)
	ran = calls(func() { a = f.acquire("t-x", waiter("x/1", 3)) })
	require.True(t, a.OK, "the head was refused a free lock")
	assert.Equal(t, int64(1), ran["set"], "the head tried the SET NX more than once: %v", ran)
	assert.Equal(t, int64(1), ran["zadd"], "the head granted with half its lease left did not renew it: %v", ran)
	assert.Greater(t, lease("x/1"), tm[0]*1000+tm[1]/1000+50_000, "the head granted with half its lease left did not renew it")
	checkQueueExpiries(t, s, key, "the head granted, renewed")

	// A head queued over a tenth of its lease ago (a second lease, a ticket
	// 200 ms old: with 1,000 waiters on one key) takes the full path, its
	// lease renewed without being read first: the 8 commands it ran before.
	const old = "redlock:{head-old}"
	tm, err = redis.Int64s(s.Do("TIME"))
	require.NoError(t, err)
	y := node.Waiter{ID: "y/1", Ticket: tm[0]*1000000 + tm[1] - 200_000, Lease: time.Second}
	_, err = s.Do("SET", old, "t-other", "PX", 60000)
	require.NoError(t, err)
	a, err = n.AcquireFair(ctx, old, old, "t-y", time.Minute, y)
	require.NoError(t, err)
	require.False(t, a.OK)
	require.Equal(t, node.Queued, a.Queue)
	_, err = s.Do("DEL", old)
	require.NoError(t, err)
	ran = calls(func() {
		a, err = n.AcquireFair(ctx, old, old, "t-y", time.Minute, y)
		require.NoError(t, err)
	})
	require.True(t, a.OK, "the head was refused a free lock")
	assert.Equal(t, map[string]int64{"evalsha": 1, "time": 1, "zscore": 1, "zadd": 1, "pttl": 2, "zrank": 1, "set": 1}, ran,
		"the head queued long ago did not run the full path")
	checkQueueExpiries(t, s, old, "a head queued long ago granted")
}

// A head that one node grants while the others refuse (the lock is held
// there) gives the grant back and tries again, keeping its place: its lease
// on the granting node must outlast the silence before its next attempt as
// it did when every attempt renewed it (nine tenths of it now), or a later
// waiter's first attempt there drops it, takes its place on that node alone
// (the nodes disagree on the head), and, the head's ticket being too old to
// queue with again, gets the lock before it. Two adversarial reviews: of
// 846881f, whose granted head renewed nothing whatever lease it had left
// (polling: heads [w h h] after W's attempt, then W granted first), and of
// ec67548, which renewed only with half the lease or less left (one gap of
// 0.8 of the lease after polling: the same).
func TestHeadGrantedAloneKeepsItsPlace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lease, gap time.Duration // gap: H's silence after polling, W attempting at 7/8 of it
	}{
		{"polling", 1500 * time.Millisecond, 40 * time.Millisecond},
		{"one long gap", 3 * time.Second, 2300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { headGrantedAlone(t, tc.lease, tc.gap) })
	}
}

// headGrantedAlone is TestHeadGrantedAloneKeepsItsPlace's timeline: H polls
// every 40 ms for over two leases (before a gap of over half a lease, for a
// lease at most, and only until its lease on A has less than 0.55 of it
// left), stays silent for gap, W's first attempt landing at 7/8 of it; X
// then releases. With a lease of 3 s and a gap of 2.3 s, W attempts 2 s into
// the silence: 0.65 s before the least H can have left now (0.9 of the lease,
// less a poll), 0.35 s after the most it had when renewals came at half.
func headGrantedAlone(t *testing.T, lease, gap time.Duration) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "redlock:{alone}"
	q, qx := node.QueueKeys(key)
	ns := make([]*node.Redis, len(servers))
	for i, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		ns[i] = n
	}
	clock := func() int64 {
		tm, err := redis.Int64s(servers[0].Do("TIME"))
		require.NoError(t, err)
		return tm[0]*1000000 + tm[1]
	}
	head := func(i int) string {
		h, err := redis.Strings(servers[i].Do("ZRANGE", q, 0, 0))
		require.NoError(t, err)
		if len(h) == 0 {
			return ""
		}
		return h[0]
	}
	// left is H's lease on A: what is left of it.
	left := func() time.Duration {
		d, err := redis.Int64(servers[0].Do("ZSCORE", qx, "h/1"))
		require.NoError(t, err)
		return time.Duration(d*1000-clock()) * time.Microsecond
	}
	// attempt is one round of a client: AcquireFair on every node, the
	// grants given back (Release keeps the waiter's place) without a
	// majority.
	attempt := func(token string, w node.Waiter) (granted int, on []node.Acquired) {
		for _, n := range ns {
			a, err := n.AcquireFair(ctx, key, "", token, time.Minute, w)
			require.NoError(t, err)
			on = append(on, a)
			if a.OK {
				granted++
			}
		}
		if granted < len(ns)/2+1 {
			for i, a := range on {
				if a.OK {
					_, err := ns[i].Release(ctx, key, token, false)
					require.NoError(t, err)
				}
			}
		}
		return granted, on
	}
	for _, s := range servers[1:] { // X holds the lock on B and C, not on A
		_, err := s.Do("SET", key, "t-x", "PX", 60000)
		require.NoError(t, err)
	}
	h := node.Waiter{ID: "h/1", Ticket: clock(), Lease: lease}
	polling := 2*lease + 200*time.Millisecond
	if gap > lease/2 {
		polling = lease
	}
	for end := time.Now().Add(polling); time.Now().Before(end); {
		g, _ := attempt("t-h", h)
		require.Equal(t, 1, g, "H: A grants (H keeps its place there while it polls), B and C refuse")
		if gap > lease/2 && left() < lease*55/100 {
			break // about the longest silence the renewals at half the lease allowed
		}
		time.Sleep(40 * time.Millisecond)
	}
	t.Logf("H's lease on A when its silence starts: %v left", left())
	time.Sleep(gap * 7 / 8)
	w := node.Waiter{ID: "w/1", Ticket: clock(), Lease: lease}
	attempt("t-w", w)
	assert.Equal(t, []string{"h/1", "h/1", "h/1"}, []string{head(0), head(1), head(2)},
		"W's first attempt took H's place on a node")
	time.Sleep(gap / 8)
	_, on := attempt("t-h", h)
	assert.Equal(t, node.Queued, on[0].Queue, "H, attempting within its lease, lost its place on A")

	for _, s := range servers[1:] { // X releases
		_, err := s.Do("DEL", key)
		require.NoError(t, err)
	}
	gw, _ := attempt("t-w", w)
	gh, _ := attempt("t-h", h)
	assert.Less(t, gw, 2, "W, queued after H, got the lock first")
	assert.GreaterOrEqual(t, gh, 2, "H, first in line, did not get the lock")
}

// A queued acquisition that fails leaves no lock key behind, whatever stops
// it: a head in its place writes the lock key before it renews its lease
// (when it was renewed over a tenth of a lease ago), and nothing after that
// write may stop the script, which returns the grant, its renewal cut short
// (an adversarial review of 8a00707, where a user without PTTL, ZADD or
// PEXPIRE, or a string at the leases' key, made the script fail with the
// lock key written: the client undid it, but a release of the granted lock
// failed on such a key and left it for a TTL). Before the head's SET NX an
// error stops the script, as it always did.
func TestQueuedAcquisitionErrorLeavesNoKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		minus []string
		setup func(t *testing.T, s *redistest.Server, key string)
	}{
		{"no PTTL", []string{"-pttl"}, nil},
		{"no ZADD", []string{"-zadd"}, nil},
		{"no PEXPIRE, expiries low", []string{"-pexpire"}, func(t *testing.T, s *redistest.Server, key string) {
			q, qx := node.QueueKeys(key)
			for _, k := range []string{q, qx} {
				_, err := s.Do("PEXPIRE", k, 3000)
				require.NoError(t, err)
			}
		}},
		{"a string at the leases' key", nil, func(t *testing.T, s *redistest.Server, key string) {
			_, qx := node.QueueKeys(key)
			_, err := s.Do("SET", qx, "a user's string")
			require.NoError(t, err)
		}},
		{"a string at the queue's key", nil, func(t *testing.T, s *redistest.Server, key string) {
			q, _ := node.QueueKeys(key)
			_, err := s.Do("SET", q, "a user's string")
			require.NoError(t, err)
		}},
		{"out of memory", nil, func(t *testing.T, s *redistest.Server, key string) {
			_, err := s.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
			require.NoError(t, err)
			_, err = s.Do("CONFIG", "SET", "maxmemory", 1)
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = s.Do("CONFIG", "SET", "maxmemory", 0) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := node.Dial(aclUser(t, s, "u", tc.minus...))
			require.NoError(t, err)
			defer n.Close()
			const key = "redlock:{err}"
			q, qx := node.QueueKeys(key)
			tm, err := redis.Int64s(s.Do("TIME"))
			require.NoError(t, err)
			nowus := tm[0]*1000000 + tm[1]
			// W alone at the head, its lease renewed half a lease ago.
			w := node.Waiter{ID: "w/1", Ticket: nowus, Lease: 10 * time.Second}
			for _, cmd := range [][]any{
				{"ZADD", q, nowus, w.ID}, {"ZADD", qx, nowus/1000 + 5000, w.ID},
				{"PEXPIRE", q, 20000}, {"PEXPIRE", qx, 20000}, {"SET", node.QueueMarkKey(key), "1", "PX", 20000},
			} {
				_, err := s.Do(cmd[0].(string), cmd[1:]...)
				require.NoError(t, err)
			}
			if tc.setup != nil {
				tc.setup(t, s, key)
			}
			a, err := n.AcquireFair(ctx, key, key, "tok", time.Minute, w)
			_, _ = s.Do("CONFIG", "SET", "maxmemory", 0)
			v, gerr := redis.String(s.Do("GET", key))
			t.Logf("granted %v, err %v; lock key %q", a.OK, err, v)
			if err != nil {
				assert.ErrorIs(t, gerr, redis.ErrNil, "the attempt failed (%v), its lock key left behind (%q)", err, v)
				return
			}
			assert.True(t, a.OK, "refused, yet no error")
			assert.Equal(t, "tok", v, "granted, yet the lock key is not the caller's")
		})
	}
}
