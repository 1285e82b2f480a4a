package redlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// queue lines up this client's goroutines waiting in Lock for one resource, so
// that they take turns (first come, first served) instead of all hammering the
// nodes: only the head of the queue makes attempts.
type queue struct {
	waiters []chan struct{} // waiters[0] is the head; its channel is closed
	poke    chan struct{}   // wakes the head when a lock of this client is released
}

// enterQueue waits until the caller, me, is at the head of resource's queue
// q, ctx ends, or the client is closed (ErrClosed). leaveLocal(resource, q,
// me) must be called in every case. q.poke wakes the head when a lock of this
// client on resource is released.
func (c *Client) enterQueue(ctx context.Context, resource string) (q *queue, me chan struct{}, err error) {
	c.qmu.Lock()
	q = c.queues[resource]
	if q == nil {
		q = c.newQueue()
		c.queues[resource] = q
		me = headChan // at the head at once; the only one in this queue
	} else {
		me = make(chan struct{})
	}
	q.waiters = append(q.waiters, me)
	c.qmu.Unlock()

	select {
	case <-me:
		return q, me, nil
	case <-ctx.Done():
		return q, me, ctx.Err()
	case <-c.stop:
		return q, me, ErrClosed
	}
}

// headChan is the (closed) channel of a waiter that found no queue: it is at
// the head at once. Waiters are told apart by their channels; a queue holds
// headChan at most once, as its first waiter, since it is made by that
// waiter and every later one makes a channel of its own.
var headChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// leaveLocal takes me out of resource's queue q, and wakes the next waiter
// if me was at the head.
func (c *Client) leaveLocal(resource string, q *queue, me chan struct{}) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for i, w := range q.waiters {
		if w != me {
			continue
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		if i == 0 && len(q.waiters) > 0 {
			close(q.waiters[0])
		}
		break
	}
	if len(q.waiters) == 0 {
		delete(c.queues, resource)
		c.freeQueue(q)
	}
}

// maxFreeQueues bounds the queues kept for reuse.
const maxFreeQueues = 64

// newQueue returns an empty queue, a recycled one if any; c.qmu must be held.
func (c *Client) newQueue() *queue {
	if n := len(c.freeQueues); n > 0 {
		q := c.freeQueues[n-1]
		c.freeQueues = c.freeQueues[:n-1]
		return q
	}
	return &queue{poke: make(chan struct{}, 1)}
}

// freeQueue recycles q, out of c.queues and without waiters; c.qmu must be
// held. Nothing can poke it any more (releasedHere finds queues in c.queues,
// under c.qmu), and its last waiter has left: a poke still pending is
// dropped.
func (c *Client) freeQueue(q *queue) {
	if len(c.freeQueues) >= maxFreeQueues {
		return
	}
	drain(q.poke)
	clear(q.waiters[:cap(q.waiters)])
	q.waiters = q.waiters[:0]
	c.freeQueues = append(c.freeQueues, q)
}

// Client.held lists, per resource, the locks taken on it through this
// client and not released, linked through Lock.heldNext (no allocation per
// lock). A lock's held* fields are guarded by c.qmu. A lock counts as held
// until its validity ends (heldUntil, on the client's clock), heldReal
// passes, or its Extend finds it lost; its key may still be on the nodes
// (mayLive) until heldReal, a TTL on the real clock after its grant or its
// last Extend's return, and while its Release is on its way or returned
// unconfirmed: meanwhile this client's calls queue before they attempt.
// (Until 6 December 2026 a lock left to expire counted as held for good:
// its client's later Lock calls on the resource never queued, and the entry
// was never freed, a leak for a job that takes locks as TTLs and never
// releases them. Two reviews found the first fixes, a count per resource,
// wanting, and three more the list's first versions: docs/safety.md, "A
// client's own locks on the waiting path".)

// heldSweepMin is the least size of Client.held that makes a new entry drop
// the locks whose keys can no longer be on the nodes (sweepHeld); after a
// sweep the next is at twice the size left, so the work stays constant per
// lock taken.
const heldSweepMin = 64

// heldAt reports whether l may still be held at now (the client's clock)
// and real (Client.realNow: a Clock that stands still, a Fake nobody
// advances, does not hold waiters for good); c.qmu must be held.
func (l *Lock) heldAt(now, real time.Time) bool {
	return !l.heldLost && now.Before(l.heldUntil) && real.Before(l.heldReal)
}

// mayLive reports whether l's key may still be on the nodes at real
// (Client.realNow), or is being released: then an attempt of this client's,
// landing once that key is gone, could take the lock ahead of the queued
// waiters, and so it queues (shouldQueue). A key outlives its lock's
// validity by the drift allowance: a holder overrunning its validity
// slightly, then releasing, freed it under a poll of its own client that
// its validity's end had let go, unqueued (a review of bb7b3be, also open at
// 434a842: 5 runs in 5). c.qmu must be held.
func (l *Lock) mayLive(real time.Time) bool { return l.heldReleasing || real.Before(l.heldReal) }

// heldState reports whether this client may hold a lock on resource (held,
// being released or not), holds one it is not releasing (holds), and has
// one whose key may still be on the nodes (releasing: mayLive); c.qmu must
// be held.
func (c *Client) heldState(resource string, now time.Time) (held, holds, releasing bool) {
	l := c.held[resource]
	if l == nil {
		return false, false, false
	}
	real := c.realNow()
	for ; l != nil; l = l.heldNext {
		if l.mayLive(real) {
			releasing = true
		}
		if l.heldAt(now, real) {
			held = true
			holds = holds || !l.heldReleasing
		}
	}
	return held, holds, releasing
}

// mayAttempt reports whether a waiting call on resource makes an attempt
// now (first: its first; waiter: it is queued on the nodes), rather than
// waiting for this client's lock on resource to be released or to expire.
// The first attempt waits while this client may hold the lock (its release
// pokes the call). Later ones wait only while it holds the lock and does
// not release it (holdsHere), and only for a call not queued: a waiter's
// attempts renew its lease in the nodes' queues. A call not queued used to
// make an attempt now and then while its client held the lock (in case that
// lock expired unreleased; its validity is known now, Client.held):
// refused, or, delivered after its client's release, taking the freed lock
// unqueued ahead of the queued waiters (a barge, left open by a review of 6
// December 2026; TestPollWhileHoldingDoesNotBarge).
func (c *Client) mayAttempt(resource string, first, waiter bool) bool {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	held, holds, _ := c.heldState(resource, now)
	if first {
		return !held
	}
	return waiter || !holds
}

// tookHere records a lock taken through this client, valid until l.until.
func (c *Client) tookHere(l *Lock) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.countHeld(l, l.until)
}

// countHeld counts l, valid until until, in c.held, unless it was released;
// c.qmu must be held.
func (c *Client) countHeld(l *Lock, until time.Time) {
	if l.heldEnd {
		return
	}
	l.heldUntil = until
	c.listHeld(l)
}

// listHeld puts l in c.held, unless it was released, its key alive for a
// TTL from now at least (mayLive); c.qmu must be held.
func (c *Client) listHeld(l *Lock) {
	if l.heldEnd {
		return
	}
	real := c.realNow()
	if r := real.Add(l.ttl); r.After(l.heldReal) {
		l.heldReal = r
	}
	if l.heldIn {
		return
	}
	head, ok := c.held[l.resource]
	switch {
	case ok:
		// The resource's other locks: those no longer held go (a job
		// that locks one resource again and again, never releasing,
		// would make the list grow for good).
		head = c.pruneHeld(head, real)
	case len(c.held) >= c.heldSweep:
		c.sweepHeld(real)
	}
	l.heldNext, l.heldIn = head, true
	c.held[l.resource] = l
}

// pruneHeld takes the locks whose keys can no longer be on the nodes at
// real (mayLive) out of the list that starts at head, and returns its new
// head; c.qmu must be held.
func (c *Client) pruneHeld(head *Lock, real time.Time) *Lock {
	var keep, last *Lock
	for l := head; l != nil; {
		next := l.heldNext
		if l.mayLive(real) {
			if last == nil {
				keep = l
			} else {
				last.heldNext = l
			}
			last, l.heldNext = l, nil
		} else {
			l.heldNext, l.heldIn = nil, false
		}
		l = next
	}
	return keep
}

// unlinkHeld takes l out of c.held; c.qmu must be held.
func (c *Client) unlinkHeld(l *Lock) {
	if !l.heldIn {
		return
	}
	if head := c.held[l.resource]; head == l {
		if l.heldNext == nil {
			delete(c.held, l.resource)
		} else {
			c.held[l.resource] = l.heldNext
		}
	} else {
		for p := head; p != nil; p = p.heldNext {
			if p.heldNext == l {
				p.heldNext = l.heldNext
				break
			}
		}
	}
	l.heldNext, l.heldIn = nil, false
}

// sweepHeld takes out of c.held the locks whose keys can no longer be on
// the nodes at real (mayLive); c.qmu must be held. A swept lock is listed
// again if an Extend of it is sent or its Release starts.
func (c *Client) sweepHeld(real time.Time) {
	for r, head := range c.held {
		if keep := c.pruneHeld(head, real); keep == nil {
			delete(c.held, r)
		} else {
			c.held[r] = keep
		}
	}
	c.heldSweep = max(heldSweepMin, 2*len(c.held))
}

// extensionSent records that an Extend of l was sent to the nodes and did
// not succeed (a success is extendedHere): its extensions may have landed, and its key then lives a TTL
// from about now (mayLive). Replies that come after the lock's validity
// make Extend report it lost though they extended it: counted from the
// grant only, the key was taken for gone, and a call's plain poll, landing
// after the holder's Release, took the lock ahead of the queued waiters (a
// review of f62a6d0: 5 runs in 5).
func (c *Client) extensionSent(l *Lock) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.listHeld(l)
}

// extendedHere records that l, taken through this client, is valid until
// until (an Extend succeeded), and held again if an earlier Extend found
// it lost.
func (c *Client) extendedHere(l *Lock, until time.Time) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	l.heldLost = false
	c.countHeld(l, until)
}

// lostHere records that Extend found l lost: it no longer counts as held,
// and this client's calls waiting for it (which make no attempt while it is
// held: mayAttempt) try at once. Its Release still counts as a release on
// its way (a review of the first version, which forgot the lock: its
// Release, freeing the key that outlives its validity, let an own
// goroutine's unqueued attempt take the lock ahead of queued waiters).
func (c *Client) lostHere(l *Lock) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	l.heldLost = true
	c.wakeOwnLocked(l.resource)
}

// wakeOwnLocked wakes the first of this client's calls waiting in its own
// queue for resource (mayAttempt); c.qmu must be held.
func (c *Client) wakeOwnLocked(resource string) {
	if q := c.queues[resource]; q != nil {
		poke(q.poke)
	}
}

// releasedHere records that a lock taken through this client was released, and
// wakes the first of this client's waiters for the resource at once.
func (c *Client) releasedHere(l *Lock) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.unlinkHeld(l)
	l.heldReleasing, l.heldEnd = false, true
	c.wakeOwnLocked(l.resource)
}

// releaseStarts records that Release of l, taken through this client, is on
// its way to the nodes; releaseEnds that it returned, as releasedHere does,
// in one step. Meanwhile this client's waiters for the resource count it as
// released (holdsHere): the lock may already be free on a majority, and an
// attempt then, not queued (while this client holds the lock its waiters
// wait for its release, not in the nodes' queues), took it ahead of the
// other clients' queued waiters (a review's test of 2bce16b, 6 December
// 2026: 4 runs in 30). Such an attempt now queues (queueIfContended).
// (Making no attempt at all until the release returned, as first tried, held
// the waiters for as long as a release waits for a paused node, and for good
// after a panic inside it: a second review.) A lock whose validity ended,
// swept or found lost, counts as being released all the same: its release
// may still free its key, which outlives the validity by the drift
// allowance (a review of b2be547: an own goroutine's unqueued attempt took
// the lock so freed ahead of the queued waiters, 10 runs in 10).
func (c *Client) releaseStarts(l *Lock) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if l.heldEnd {
		return
	}
	if !l.heldIn {
		c.countHeld(l, time.Time{})
	}
	l.heldReleasing = true
}

// releaseEnds: see releaseStarts. done says whether a majority confirmed
// the release or every node asked answered. If not (ctx ended, nodes that
// did not answer, a panic), its deletes may still land: the lock stays listed, not held, until its key can no
// longer be on the nodes (mayLive), and this client's calls queue
// meanwhile, as while the release was on its way.
func (c *Client) releaseEnds(l *Lock, done bool) {
	if done {
		c.releasedHere(l)
		return
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	l.heldReleasing, l.heldLost, l.heldEnd = false, true, true
	c.wakeOwnLocked(l.resource)
}

// holdsHere reports whether a lock on resource taken through this client is
// held (not expired) and not being released (releaseStarts): its waiters
// then wait for its release rather than queue on the nodes.
func (c *Client) holdsHere(resource string) bool {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	_, holds, _ := c.heldState(resource, now)
	return holds
}

// shouldQueue reports whether a call on resource that is not a waiter yet
// queues before its next attempt (queueIfContended): this client does not
// hold the lock (holdsHere), and a key of its locks may still be on the
// nodes (mayLive: its release on its way, say) or the resource was
// contended lately (contendedLocked), read under one lock.
func (c *Client) shouldQueue(resource string) bool {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	_, holds, releasing := c.heldState(resource, now)
	if holds {
		return false
	}
	return releasing || c.contendedLocked(resource, now)
}

// maxReleasing bounds the releases remembered as in flight (releaseInFlight).
const maxReleasing = 256

// inFlight is this client's release of a resource that returned once a
// majority released, while other nodes' releases, or the undo of
// acquisitions that landed after it (stragglers), were still on their way.
type inFlight struct {
	call *quorum.Call[struct{}]
	idx  []int // the nodes of the release's round: call's node j is idx[j]
	// lock is the released lock (nil for a read lock's release): nodes
	// outside idx release themselves as their acquisition lands
	// (Lock.undoStraggler).
	lock *Lock
	// prev is the release of the resource recorded before this one, while
	// it is still in flight: a later release, which may have asked every
	// node, must not hide an earlier lock's straggler (trimChain; read and
	// changed under Client.qmu).
	prev *inFlight
}

// maxChain bounds the releases of one resource remembered at once (a node
// paused for its timeout would otherwise let every release meanwhile pile
// up): beyond it, the oldest are forgotten, and an attempt may meet one of
// our own keys there.
const maxChain = 4

// trimChain returns the chain of releases from f without those over, at
// most maxChain of them; c.qmu must be held.
func trimChain(f *inFlight) *inFlight {
	var head, tail *inFlight
	n := 0
	for e := f; e != nil; {
		next := e.prev
		if n < maxChain && !e.over() {
			if tail == nil {
				head = e
			} else {
				tail.prev = e
			}
			tail = e
			n++
		}
		e = next
	}
	if tail != nil {
		tail.prev = nil
	}
	return head
}

// over reports whether every node's release, or undo, has answered.
func (f *inFlight) over() bool {
	return f.call.Unanswered() == 0 && (f.lock == nil || !f.lock.undoPending(f.idx))
}

// releaseInFlight records that this client's release of resource (call, over
// nodes idx) returned before every node answered, or that l, the lock
// released (nil for a read lock's release), had acquisitions still in
// flight on nodes outside idx.
func (c *Client) releaseInFlight(resource string, call *quorum.Call[struct{}], idx []int, l *Lock) {
	f := inFlight{call: call, idx: idx, lock: l}
	if f.over() { // the common case: nothing kept, nothing allocated
		return
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.releasing == nil {
		c.releasing = map[string]*inFlight{}
	}
	if _, ok := c.releasing[resource]; !ok && len(c.releasing) >= maxReleasing {
		for r := range c.releasing {
			c.trimReleasing(r)
		}
		if len(c.releasing) >= maxReleasing {
			return // so many at once: an attempt may meet our own key on a node, and be refused there
		}
	}
	kept := keepFlight(f, l)
	kept.prev = c.releasing[resource]
	c.releasing[resource] = kept
	c.trimReleasing(resource)
}

// trimReleasing trims resource's chain of releases in flight (trimChain),
// forgets it once every one is over, and returns what is left; c.qmu must
// be held.
func (c *Client) trimReleasing(resource string) *inFlight {
	f := trimChain(c.releasing[resource])
	if f == nil {
		delete(c.releasing, resource)
	} else {
		c.releasing[resource] = f
	}
	c.nreleasing.Store(int32(len(c.releasing)))
	return f
}

// keepFlight returns f on the heap: in the released lock's own field (a plain
// lock's Release allocates nothing for it), else a copy.
func keepFlight(f inFlight, l *Lock) *inFlight {
	if l == nil {
		p := new(inFlight)
		*p = f
		return p
	}
	l.flight = f
	return &l.flight
}

// awaitOwnRelease waits, before an acquisition of resource (or a read of its
// holder, Leader) is sent to node i, until this client's releases of
// resource still in flight (the last maxChain) have answered on that node,
// or ctx (the call on node i) ends.
// Release returns once a majority released: an attempt sent to a node before
// our release landed there is refused by our own key, and the resource would
// be taken for contended (an early split, a Lock that queues). A node that
// Release did not ask, since its acquisition was still in flight, releases
// itself as that lands: the wait is then for its undo. Only node i's call
// waits: a paused node holds back nothing but its own call, which it would
// not answer either. self is the lock whose acquisition is about to be sent
// (nil for a read): it waits only for the stragglers of a lock created
// before it (a lock's own straggler, sent after its Release, would wait for
// itself, and two locks' for each other).
func (c *Client) awaitOwnRelease(ctx context.Context, resource string, i int, self *Lock) {
	if c.nreleasing.Load() == 0 {
		return
	}
	var chain [maxChain]*inFlight
	c.qmu.Lock()
	n := 0
	for e := c.trimReleasing(resource); e != nil && n < maxChain; e = e.prev {
		chain[n] = e
		n++
	}
	c.qmu.Unlock()
	for _, f := range chain[:n] {
		f.await(ctx, i, self)
	}
}

// await waits until node i answered release f, or, for a node f did not
// ask, until the straggler of f's lock there was undone (when that lock was
// created before self: see awaitOwnRelease); or until ctx ends.
func (f *inFlight) await(ctx context.Context, i int, self *Lock) {
	for j, n := range f.idx {
		if n == i {
			select {
			case <-f.call.Answered(j):
			case <-ctx.Done():
			}
			return
		}
	}
	if f.lock != nil && (self == nil || f.lock.seq < self.seq) {
		f.lock.awaitUndo(ctx, i)
	}
}

// lockWait makes attempts until one succeeds or ctx ends. It returns the
// call's waiter in the end (lc.waiter, or the one it became), if any.
func (c *Client) lockWait(ctx context.Context, resource string, lc lockConfig) (*Lock, *place, error) {
	// This client's waiters for one resource take turns: only the head of the
	// queue makes attempts, so they are served in order and do not compete.
	q, me, err := c.enterQueue(ctx, resource)
	defer c.leaveLocal(resource, q, me)
	local := q.poke
	if err != nil {
		return nil, lc.waiter, c.failed("acquire", resource, ErrNotAcquired, err)
	}
	w := &waiting{c: c, resource: resource, lc: lc}
	defer w.stop()
	for attempt := 0; ; attempt++ {
		// When this client holds the lock, its release will wake us: no need to
		// ask the nodes, nor to listen to them (mayAttempt).
		if c.mayAttempt(resource, attempt == 0, w.lc.waiter != nil) {
			w.queueIfContended(ctx)
			l, again, err := w.attempt(ctx)
			if l != nil || err != nil {
				return l, w.lc.waiter, err
			}
			if again {
				continue
			}
		}
		// Woken by a release, or after a backoff with full jitter in case a
		// notification was lost (a node down, a lease that simply expired)
		// or the votes split.
		if err := w.wait(ctx, local, attempt); err != nil {
			return nil, w.lc.waiter, err
		}
	}
}

// queueIfContended makes a call that is not a waiter yet one before its
// next attempt if the resource was contended lately: refused by a node, or
// released by this client with waiters queued (releaseOps). It then queues
// from that attempt, and listens before it (the subscription of this
// client's waiters lingers between Lock calls, so this costs nothing when
// the client contends again and again), instead of taking the lock in the gap
// before the woken head's attempt. Checked before every attempt, not only the
// first: a call that waited for this client's own release (no queue on the
// nodes while this client holds the lock) learns only from that release
// that others are queued (issue 26: a second goroutine of the releasing
// client barged), or counts that lock as released once its release is on
// its way (releaseStarts), and then queues whatever it knows: the release's
// word that others are queued comes with the nodes' replies, and an attempt
// not queued, sent meanwhile, could take the lock the release just freed
// ahead of them (a third review, 6 December 2026). The same holds while a
// key of this client's locks may still be on the nodes at all (mayLive).
func (w *waiting) queueIfContended(ctx context.Context) {
	if w.lc.waiter != nil {
		return
	}
	if w.c.shouldQueue(w.resource) {
		w.queue(ctx, w.c.nodeClock.ticket(time.Now()))
	}
}

// waiting is one Lock call's wait for its lock: its place in the nodes'
// queues once refused (lc.waiter), its pace, and its wake-ups.
type waiting struct {
	c        *Client
	resource string
	lc       lockConfig // the call's; its waiter changes as it waits
	p        pace
	rw       *releaseWatch // nil until the call is a waiter
	last     *QuorumError  // the last attempt's refusal
	gaveBack bool          // the last attempt was granted and given back (fenceGivenBack)
}

// queue makes the call a waiter, ticketed with the nodes' clock (0: unknown,
// see place.settle), listening for its wake-ups on every node.
func (w *waiting) queue(ctx context.Context, ticket int64) {
	if w.lc.waiter == nil {
		w.lc.waiter = w.c.newWaiter(w.lc, ticket)
	}
	w.rw = w.c.watchReleases(ctx, w.c.lockKey(w.resource), w.lc.waiter)
}

// attempt makes one attempt. It returns the lock, or the error that ends the
// call (bad input, a closed client, failed fencing, nodes whose ACL refuses
// the scripts: retrying cannot help), or neither, again telling whether to
// try again at once.
func (w *waiting) attempt(ctx context.Context) (l *Lock, again bool, err error) {
	c := w.c
	l, err = c.try(ctx, w.resource, w.lc)
	if err == nil {
		return l, false, nil
	}
	var qe *QuorumError // here, not at &w.last: that would put w on the heap
	if errors.As(err, &qe) {
		w.last = qe
	}
	if c.lastAttempt(ctx, qe) {
		return nil, false, c.callError(w.resource, err)
	}
	w.gaveBack = fenceGivenBack(qe)
	w.p.failed(c, w.resource, w.last, w.lc.waiter)
	if w.lc.waiter != nil && (cannotReach(w.last) > len(c.nodes)-quorum.Majority(len(c.nodes)) || errors.Is(qe, errCounterUnheard)) {
		// Also a grant given back because nodes this client did not hear
		// may have the counters: at the head of the nodes it reaches, it
		// would be granted and give back again and again, and a waiter
		// behind it that reaches every node never be granted.
		w.yieldPlace()
	}
	if w.rw == nil && w.last.Refused > 0 && !c.holdsHere(w.resource) {
		// Held by another client: queued from now on (a release wakes the
		// first waiter only), listening for it; try again at once (it may
		// have been released while we subscribed).
		w.queue(ctx, w.last.ticket)
		if !w.p.farBehind(w.lc.waiter) {
			return nil, true, nil
		}
	}
	// Not queued for its ticket: at once with one from the nodes' clocks.
	return nil, w.lc.waiter != nil && w.lc.waiter.takeRequeue(), nil
}

// lastAttempt reports whether a waiting call's attempt that failed (qe:
// its error if a *QuorumError, else nil) ends the call: retrying cannot
// help. Its error is not a refusal (bad input, failed fencing, the client
// closed), ctx ended, or so many nodes refuse the scripts' commands (an
// ACL) that no attempt can win.
func (c *Client) lastAttempt(ctx context.Context, qe *QuorumError) bool {
	return qe == nil || qe.Kind != ErrNotAcquired || ctx.Err() != nil ||
		failedWith(qe, "permission denied") > len(c.nodes)-quorum.Majority(len(c.nodes))
}

// callError is the error of a waiting call (Lock, RLock, WLock) that its
// last attempt's err ends: the bare ErrClosed of an attempt that found the
// client closed (Close landed between two attempts, or before the first)
// becomes a failed attempt's, wrapping ErrNotAcquired and ErrClosed, as
// Close's doc promises; one-shot calls (TryLock) keep the bare ErrClosed.
func (c *Client) callError(resource string, err error) error {
	if err == ErrClosed {
		return c.failed("acquire", resource, ErrNotAcquired, ErrClosed)
	}
	return err
}

// failedWith counts the nodes of qe whose failure is of kind (failureKind):
// "permission denied" (an ACL without the commands of the scripts:
// docs/operations.md), "node down" (a breaker open: failing calls in a row,
// not one slow answer).
func failedWith(qe *QuorumError, kind string) int {
	n := 0
	for _, e := range qe.Errs {
		if e != nil && failureKind(e.Err) == kind {
			n++
		}
	}
	return n
}

// yieldPlace gives up the call's place in the nodes' queues after an attempt
// that could not have won because so many nodes are down for this client
// (their breakers open: failing calls in a row, not one slow answer, which
// would make every waiter of an overloaded node give up its place): a
// waiter that reaches fewer than a majority would otherwise keep the head of
// the nodes it reaches, where no waiter behind it can be granted
// (head-only), for as long as it waits. Its next attempt takes a new place, from the nodes'
// clocks, behind the waiters queued meanwhile (docs/safety.md).
func (w *waiting) yieldPlace() {
	w.c.leaveQueue(w.c.lockKey(w.resource), w.lc.waiter, false)
	w.lc.waiter = w.c.newWaiter(w.lc, 0)
}

// wait waits for a release notification, this client's release, or the
// backoff after attempt; it returns the error that ends the call (ctx ended,
// or the client closed).
func (w *waiting) wait(ctx context.Context, local <-chan struct{}, attempt int) error {
	woken, err := w.c.awaitRetry(ctx, w.rw, local, w.gaveBack, w.p.backoff(w.lc, attempt))
	if err != nil {
		if w.last == nil {
			return w.c.failed("acquire", w.resource, ErrNotAcquired, err)
		}
		w.last.Cause = err
		return w.last
	}
	if woken != wokeTimer {
		w.c.log(ctx, slog.LevelDebug, "waiter woken by a release", w.c.lockKey(w.resource), "")
	}
	return nil
}

// awaitRetry waits, between two attempts of a waiting call (Lock, RLock,
// WLock), for a release notification from the nodes (rw, if not nil) or from
// this client (local, if not nil), the backoff, ctx or Close; after a
// notification from the nodes it gathers the others (gather). After a grant
// given back (gaveBack) it waits for the backoff only, and forgets the
// notifications: the give-back's own releases notify (this call, as the
// head, or anyone listening on the lock key) and poke this client's queue;
// woken by them, the call would try again at once, and be granted and give
// back again and again while the grants miss the nodes with the counter.
func (c *Client) awaitRetry(ctx context.Context, rw *releaseWatch, local <-chan struct{}, gaveBack bool, backoff time.Duration) (wake, error) {
	watch := rw
	if gaveBack {
		watch, local = nil, nil
	}
	woken, err := waitRetry(ctx, watch, local, c.stop, backoff)
	if gaveBack && rw != nil {
		rw.forget()
	}
	if err == nil && woken == wokeRemote {
		rw.gather(ctx, gatherMax)
	}
	return woken, err
}

// stop ends the watch.
func (w *waiting) stop() {
	if w.rw != nil {
		w.rw.stop()
	}
}

// releaseWatch listens for a waiter's release notifications on every node.
type releaseWatch struct {
	notify chan struct{}

	// noted: per node, whether it notified a release since the last gather.
	noted []atomic.Bool
	need  int // notifying nodes that make a majority

	mu    sync.Mutex
	stops []func()
	wg    sync.WaitGroup
	done  chan struct{}
}

// watchReleases subscribes waiter w to its release notifications of key, on
// every node, on w's own channel (node.WaiterChannel): a release wakes the
// first waiter of each node's queue only, every node orders the queue alike,
// and so a node that is down, paused or slow cannot make a waiter miss its
// turn. It returns as soon as one node confirmed its subscription (or all
// failed, or the node timeout passed): from then on a release is not missed.
func (c *Client) watchReleases(ctx context.Context, key string, w *place) *releaseWatch {
	return c.watchChannel(ctx, node.WaiterChannel(key, w.ID))
}

// watchChannel listens for release notifications on channel on every node;
// it returns once one node confirmed its subscription (or all failed, or the
// node timeout passed).
func (c *Client) watchChannel(ctx context.Context, channel string) *releaseWatch {
	rw := &releaseWatch{notify: make(chan struct{}, 1), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
	defer cancel() // unconfirmed subscriptions stay registered and may still deliver
	rw.noted = make([]atomic.Bool, len(c.nodes))
	rw.need = quorum.Majority(len(c.nodes))
	confirmed := make(chan bool, len(c.nodes))
	for i, n := range c.nodes {
		rw.wg.Add(1)
		go func() {
			defer rw.wg.Done()
			ch, stop, err := n.Watch(ctx, channel)
			rw.addStop(stop)
			confirmed <- err == nil && stop != nil
			if ch == nil {
				return
			}
			rw.forward(i, ch)
		}()
	}
	for range c.nodes {
		select {
		case ok := <-confirmed:
			if ok {
				return rw
			}
		case <-ctx.Done():
			return rw
		}
	}
	return rw
}

func (rw *releaseWatch) addStop(stop func()) {
	if stop == nil {
		return
	}
	rw.mu.Lock()
	rw.stops = append(rw.stops, stop)
	rw.mu.Unlock()
}

// forward passes one node's release notifications on to the waiter until the
// watch stops.
func (rw *releaseWatch) forward(i int, released <-chan struct{}) {
	for {
		select {
		case <-released:
			rw.noted[i].Store(true)
			poke(rw.notify)
		case <-rw.done:
			return
		}
	}
}

// drain drops a pending notification.
func (rw *releaseWatch) drain() { drain(rw.notify) }

// forget drops the notifications heard so far (gather without the wait).
func (rw *releaseWatch) forget() {
	for i := range rw.noted {
		rw.noted[i].Store(false)
	}
	rw.drain()
}

// gather waits, at most d, until a majority of the nodes notified a release
// since the last gather: a waiter woken on every node
// by the first release to land would otherwise try while the others are still
// on their way, be refused there, and try again. It then forgets the nodes
// heard, and the pending notification.
func (rw *releaseWatch) gather(ctx context.Context, d time.Duration) {
	if rw.heard() < rw.need {
		t := time.NewTimer(d)
	wait:
		for rw.heard() < rw.need {
			select {
			case <-rw.notify:
			case <-t.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		t.Stop()
	}
	for i := range rw.noted {
		rw.noted[i].Store(false)
	}
	rw.drain()
}

// heard returns how many watched nodes notified a release since the last
// gather.
func (rw *releaseWatch) heard() int {
	n := 0
	for i := range rw.noted {
		if rw.noted[i].Load() {
			n++
		}
	}
	return n
}

// poke makes a value pending on ch (capacity 1), unless one is already.
func poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain drops the value pending on ch, if any.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// stop ends the watch.
func (rw *releaseWatch) stop() {
	close(rw.done)
	rw.wg.Wait()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, s := range rw.stops {
		s()
	}
}

// wake says what ended a wait for a retry.
type wake int

const (
	wokeTimer  wake = iota // the backoff ran out
	wokeRemote             // a node notified a release (another client's, most likely)
	wokeLocal              // a lock of this client was released
)

// waitRetry waits for a release notification from the nodes or from this
// client, the backoff timer, ctx, or the client's Close (closed): then it
// returns ErrClosed.
func waitRetry(ctx context.Context, rw *releaseWatch, local, closed <-chan struct{}, backoff time.Duration) (wake, error) {
	t := time.NewTimer(backoff)
	defer t.Stop()
	var notify <-chan struct{}
	if rw != nil {
		notify = rw.notify
	}
	select {
	case <-ctx.Done():
		return wokeTimer, ctx.Err()
	case <-closed:
		return wokeTimer, ErrClosed
	case <-t.C:
		return wokeTimer, nil
	case <-notify:
		return wokeRemote, nil
	case <-local:
		return wokeLocal, nil
	}
}

// cannotReach counts the nodes of qe that failed in a way the next attempt
// will meet again: a breaker open, a restart quarantine, a connection
// refused (breakers off), credentials or an ACL the node rejects, a node
// that is not an independent primary, any error reply. Not a timeout or a
// lost connection: one slow answer of an overloaded node, or a blip (its
// breaker opens if they go on).
func cannotReach(qe *QuorumError) int {
	n := 0
	for _, e := range qe.Errs {
		if e == nil {
			continue
		}
		switch failureKind(e.Err) {
		case "timeout", "connection lost", "network error":
		default:
			n++
		}
	}
	return n
}
