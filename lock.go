package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Lock is a held lock. It is safe for concurrent use.
type Lock struct {
	c        *Client
	resource string
	key      string
	fenceKey string
	token    string
	ttl      time.Duration

	// Set once granted, before the caller sees the lock.
	acquire    *quorum.Call[node.Acquired]
	acquiredAt time.Time
	waiter     string // fair mode: the waiter id of the Lock call, which Release takes out of the queues

	op sync.Mutex // serialises Extend and Release

	mu       sync.Mutex
	until    time.Time
	released bool
	lostTold bool                       // OnLost fired for the lock (reportLost)
	watchers map[chan struct{}]struct{} // poked whenever until or released changes
	// undone: the nodes whose acquisition, given up, was undone as it
	// landed (undoStraggler), once that undo returned; undoWake, if set,
	// is closed at the next (awaitUndo).
	undone   uint128
	undoWake chan struct{}
	// flight is the release in flight that Release records
	// (releaseInFlight), kept here to spare an allocation.
	flight inFlight
	// seq orders the client's locks by creation (awaitOwnRelease).
	seq uint64

	fenceMu sync.Mutex // serialises Fence
	fence   uint64     // 0 until Fence succeeded
	// counted: the acquisition's replies carry the nodes' fence counters
	// (WithFence, through the queue or not, and the write lock's script);
	// without them Fence reads the counters first (counters).
	counted bool
	// reread: a plan from the acquisition's counters was undecided (nodes
	// that failed may have a counter: errCounterUnheard); Fence reads them
	// again. Guarded by fenceMu.
	reread bool

	split splitWatch // the acquisition's (try)

	// keepPlace: given back by its own Lock call, which tries again (set
	// before the undo of its grants starts: abandonAndWait).
	keepPlace bool

	// tell is whom the lock's release tells: tellQueue, or tellAll for a
	// lock whose key has watchers (newLock).
	tell tell

	// Its place in c.held, guarded by c.qmu (Client.countHeld): the next
	// lock of the resource there, whether it is there, its validity's end
	// on the client's clock (heldUntil), the time on the real clock after
	// which its key can no longer be on the nodes (heldReal: mayLive),
	// whether Extend found it lost, whether its Release is on its way, and
	// whether it ended (released, or handed back).
	heldNext                         *Lock
	heldIn                           bool
	heldUntil, heldReal              time.Time
	heldLost, heldReleasing, heldEnd bool

	// args are the acquisition's and the release's script arguments, laid
	// out once for every node (set up with the lock, its waiter before the
	// acquisition starts; read-only after).
	args node.LockArgs
}

// releaseOps is Release's round (roundOps): the release of l on a node,
// which notifies its waiters.
type releaseOps struct{ l *Lock }

func (r releaseOps) call(ctx context.Context, _ int, n node.Node) (struct{}, bool, error) {
	ok, queued, err := r.l.c.releaseOn(ctx, n, r.l.key, r.l.token, r.l.waiter, r.l.tell, &r.l.args)
	if queued {
		// Other waiters are queued: this client's next Lock call on the
		// resource queues behind them from its first attempt, as after a
		// refusal, instead of taking the lock in the gap before the woken
		// head's attempt (a client whose first attempts kept winning was
		// never refused, and barged again and again: issue 23, 1,000
		// waiters).
		r.l.c.sawContention(r.l.resource)
	}
	return struct{}{}, ok, err
}

func (releaseOps) undo(int, quorum.Reply[struct{}])    {}
func (releaseOps) onReply(int, quorum.Reply[struct{}]) {}

// acquireOps is a plain acquisition's round: l.acquireOn, l.undoStraggler
// and l.split.observe (roundOps), without a closure each.
type acquireOps struct{ l *Lock }

func (a acquireOps) call(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
	return a.l.acquireOn(ctx, i, n)
}

func (a acquireOps) undo(i int, r quorum.Reply[node.Acquired]) { a.l.undoStraggler(i, r) }

func (a acquireOps) onReply(j int, r quorum.Reply[node.Acquired]) {
	a.l.split.observe(j, r)
	a.l.heard(j, r)
}

// heard records the node's clock that the reply r of node j (an acquisition
// round asks every node: j is its position in Client.nodes) carried.
func (l *Lock) heard(j int, r quorum.Reply[node.Acquired]) {
	l.c.nodeClock.hear(j, len(l.c.nodes), r)
}

// newLock returns the lock an acquisition attempt on resource will try to take,
// with a fresh owner token. counted says whether the acquisition reads the
// fence counters (a plain acquisition reads them only for a lock fenced at
// once: an uncontended Lock is then one SET on each node). watched says
// whether others watch the lock key's own channel for its release (a write
// lock's waiting readers and writers, a semaphore's waiters, the observers of
// an election or of a lock with a holder's record): a plain lock's waiters
// queue, and its release then tells only the queue's head (tellQueue).
func (c *Client) newLock(resource string, ttl time.Duration, counted, watched bool) (*Lock, error) {
	token, key, fenceKey, err := newLockStrings(c.cfg.prefix, resource)
	if err != nil {
		return nil, err
	}
	l := &Lock{c: c, resource: resource, key: key, fenceKey: fenceKey, token: token, ttl: ttl, counted: counted, tell: tellQueue,
		seq: c.lockSeq.Add(1)}
	if watched {
		l.tell = tellAll
	}
	l.args.Init(key, l.countersKey(), token, ttl, watched)
	return l, nil
}

// countersKey is the fence key a plain acquisition reads, or "" when it
// reads none (node.Node.Acquire).
func (l *Lock) countersKey() string {
	if l.counted {
		return l.fenceKey
	}
	return ""
}

// newLockStrings returns a fresh owner token (as newToken) with
// LockKey(prefix, resource) and FenceKey(prefix, resource), all three in one
// allocation: the token, then the fence key, whose prefix is the lock key.
func newLockStrings(prefix, resource string) (token, key, fenceKey string, err error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", "", err
	}
	var tok [2 * len(raw)]byte
	hex.Encode(tok[:], raw[:])
	tag := HashTag(resource)
	var b strings.Builder
	b.Grow(len(tok) + len(prefix) + len(tag) + len(resource) + 2 + len(FenceSuffix))
	b.Write(tok[:])
	b.WriteString(prefix)
	b.WriteByte('{')
	b.WriteString(tag)
	b.WriteByte('}')
	if tag != resource {
		b.WriteString(resource)
	}
	b.WriteString(FenceSuffix)
	s := b.String()
	token, fenceKey = s[:len(tok)], s[len(tok):]
	return token, fenceKey[:len(fenceKey)-len(FenceSuffix)], fenceKey, nil
}

// acquireOn is the acquisition's call on one node.
func (l *Lock) acquireOn(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
	l.c.awaitOwnRelease(ctx, l.resource, i, l)
	var (
		a   node.Acquired
		err error
	)
	if r, ok := n.(*node.Redis); ok { // the same call, its arguments laid out once
		a, err = r.AcquireArgs(ctx, &l.args)
	} else {
		a, err = n.Acquire(ctx, l.key, l.countersKey(), l.token, l.ttl)
	}
	return l.observe(i, a, err)
}

// acquireQueuedOn is the acquisition's call on one node for waiter w:
// through the node's waiters' queue.
func (l *Lock) acquireQueuedOn(w *place) func(context.Context, int, node.Node) (node.Acquired, bool, error) {
	wv := w.Waiter // the same ticket on every node; settle changes w after the round
	return func(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
		l.c.awaitOwnRelease(ctx, l.resource, i, l)
		a, err := w.acquire(ctx, n, l, wv)
		return l.observe(i, a, err)
	}
}

// observe returns node i's answer to an acquisition as a round's call does
// (roundRunner.Run records it in the node's health).
func (l *Lock) observe(_ int, a node.Acquired, err error) (node.Acquired, bool, error) {
	return a, a.OK, err
}

// undoStraggler releases the lock on node i, where the acquisition landed (or
// may have) after it was given up. Once the holder released the lock, the
// release notifies waiters, who may be listening only on that node. Before (an
// attempt that failed), the lock is held elsewhere and nobody is told. In fair
// mode the released holder's waiter leaves that node's queue too, while a
// failed attempt leaves its waiter in place.
func (l *Lock) undoStraggler(i int, _ quorum.Reply[node.Acquired]) {
	defer l.markUndone(i)
	if l.keepPlace {
		// Given back by its own Lock call, which goes on waiting: the lock is
		// free, its waiter keeps its place (a release with the waiter marks it
		// gone, and the node would refuse its next attempts).
		l.c.releaseDetached(i, l.key, l.token, "", l.tell, nil)
		return
	}
	if l.isReleased() {
		l.c.releaseDetached(i, l.key, l.token, l.waiter, l.tell, &l.args)
		return
	}
	l.c.releaseDetached(i, l.key, l.token, "", tellNone, nil)
}

// markUndone records that node i's acquisition was undone, and wakes
// whoever waits for it (awaitUndo).
func (l *Lock) markUndone(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.undone.add(i)
	if l.undoWake != nil {
		close(l.undoWake)
		l.undoWake = nil
	}
}

// isUndone reports whether node i's acquisition was undone (markUndone).
func (l *Lock) isUndone(i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.undone.has(i)
}

// awaitUndo waits, for a node i whose acquisition was still in flight when
// the lock was released, until that acquisition answered and, if it may have
// taken the lock there, until its undo returned; or until ctx ends.
func (l *Lock) awaitUndo(ctx context.Context, i int) {
	select {
	case <-l.acquire.Answered(i): // made only when the call waits: not on the uncontended path
	case <-ctx.Done():
		return
	}
	for {
		l.mu.Lock()
		if !l.acquire.Reply(i).Unsettled() || l.undone.has(i) { // refused there, or undone
			l.mu.Unlock()
			return
		}
		if l.undoWake == nil {
			l.undoWake = make(chan struct{})
		}
		wake := l.undoWake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// undoPending reports whether an undo of l's stragglers may still be on its
// way: a node of the acquisition that Release did not ask (not in asked)
// has not answered yet, or took the lock and its undo has not returned.
func (l *Lock) undoPending(asked []int) bool {
	if len(asked) == len(l.c.nodes) {
		return false
	}
	for i := range l.c.nodes {
		if slices.Contains(asked, i) {
			continue
		}
		r := l.acquire.Reply(i)
		if !r.Done || r.Unsettled() && !l.isUndone(i) {
			return true
		}
	}
	return false
}

// granted records a successful acquisition.
func (l *Lock) granted(call *quorum.Call[node.Acquired], at, until time.Time) {
	l.acquire, l.acquiredAt, l.until = call, at, until
	l.c.tookHere(l)
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// Resource returns the name of the locked resource.
func (l *Lock) Resource() string { return l.resource }

// Token returns the lock's random owner value, as stored in the lock key on
// every node. Treat it as a secret: whoever knows it can release the lock. Log a
// digest (Digest) rather than the value.
func (l *Lock) Token() string { return l.token }

// TTL returns the lease requested from each node.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Until returns the end of the lock's validity, already net of the drift
// allowance. Past it, the holder must assume another client may hold the lock.
// The value carries a monotonic clock reading: compare it with time.Now().
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

func (l *Lock) setUntil(t time.Time) {
	l.mu.Lock()
	l.until = t
	l.notifyLocked()
	l.mu.Unlock()
}

// notifyLocked wakes whoever watches the lease; l.mu must be held.
func (l *Lock) notifyLocked() {
	for ch := range l.watchers {
		poke(ch)
	}
}

// subscribe makes every change of the lease poke ch (buffered, coalesced) until
// the returned stop is called.
func (l *Lock) subscribe(ch chan struct{}) (stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watchers == nil {
		l.watchers = map[chan struct{}]struct{}{}
	}
	l.watchers[ch] = struct{}{}
	return func() {
		l.mu.Lock()
		delete(l.watchers, ch)
		l.mu.Unlock()
	}
}

// lease returns the current end of validity and whether the lock was released.
func (l *Lock) lease() (until time.Time, released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until, l.released
}

// Extend renews the lease on every node that still holds it (compare-and-pexpire:
// a node on which the key expired is never re-taken). On success Until moves to
// the start of the call plus TTL minus drift. It fails with ErrLockLost when a
// majority no longer holds the lock, or when Until has passed (then nothing is
// sent: a lock whose validity ended is never revived, even where a late SET
// left its key behind), and with ErrUnavailable when too few nodes answered to
// tell; in that case Until is unchanged. ctx bounds the wait, as does Until.
func (l *Lock) Extend(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	if err := c.begin(); err != nil {
		return err
	}
	defer c.end()
	if l.isReleased() {
		return c.failed("extend", l.resource, ErrLockLost, errReleased)
	}
	err := l.extend(ctx)
	if h := c.cfg.hooks.OnExtend; h != nil {
		h(ExtendEvent{Resource: l.resource, OK: err == nil, Err: err})
	}
	if errors.Is(err, ErrLockLost) {
		l.reportLost(err)
		c.lostHere(l)
	}
	return err
}

// reportLost fires the OnLost hook for l, once: its renewal's Extend and
// the lease watch of Do or Lock.Context may both find it lost, and a
// caller may call Extend again on a lost lock; a metric counting OnLost
// counts locks lost, not the calls that found it.
func (l *Lock) reportLost(err error) { l.c.lostOnce(&l.mu, &l.lostTold, l.resource, err) }

func (l *Lock) extend(ctx context.Context) error {
	c := l.c
	until := l.Until()
	start := c.cfg.clock.Now()
	if !start.Before(until) {
		return c.failed("extend", l.resource, ErrLockLost, errValidityEnded)
	}
	call := round[struct{}]{op: "extend", timeout: l.ttl, call: func(ctx context.Context, _ int, n node.Node) (struct{}, bool, error) {
		ok, err := n.Extend(ctx, l.key, l.token, l.ttl)
		return struct{}{}, ok, err
	}}.start(ctx, c)
	// A majority that answers after Until is worthless: wait no longer.
	wctx, cancel := context.WithTimeout(ctx, until.Sub(start))
	o := call.Wait(wctx)
	cancel()
	validity := clock.Validity(l.ttl, c.cfg.clock.Now().Sub(start), c.cfg.driftFactor)
	if o.Success && validity > 0 {
		next := start.Add(l.ttl - clock.Drift(l.ttl, c.cfg.driftFactor))
		l.setUntil(next)
		c.extendedHere(l, next) // lists it, as extensionSent does
		c.log(ctx, slog.LevelDebug, "lock extended", l.key, l.token, "agreed", o.Yes)
		return nil
	}
	c.extensionSent(l)
	kind := ErrUnavailable
	if refusedMajority(o, len(c.nodes)) || !c.cfg.clock.Now().Before(until) {
		kind = ErrLockLost
	}
	qe := call.fail(ctx, l.resource, kind, o, errValidityEnded)
	if o.Success {
		qe.Validity = validity
	}
	c.log(ctx, slog.LevelWarn, "lock not extended", l.key, l.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	return qe
}

// Release deletes the lock on every node (compare-and-delete, so a key that
// another client took since is left alone), including nodes that refused or had
// not answered the acquisition: a late acquisition is released as it lands. The
// deletes run on a context the caller's cancellation cannot cut short; ctx bounds
// only how long Release waits. It returns nil once a majority confirmed the
// delete, an error wrapping ErrLockLost when a majority no longer held the lock
// (it had expired: the protected work may not have been exclusive), and
// ErrUnavailable when too few nodes answered. Releasing twice returns nil.
func (l *Lock) Release(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	if !l.markReleased() {
		return nil
	}
	if err := c.begin(); err != nil {
		return err
	}
	defer c.end()

	// Nodes whose acquisition is still in flight release themselves as it lands
	// (undoStraggler, on the same pipelined connection, after it); the others
	// are released now.
	done := l.acquire.AbandonDone(c.all)
	if done == nil {
		done = []int{} // abandoned before (never: Release abandons first)
	}
	c.releaseStarts(l)
	ended := false
	defer func() {
		if !ended { // a panic in a node's release (run inline at N=1)
			c.releaseEnds(l, false)
		}
	}()
	call := round[struct{}]{op: "release", idx: done, ops: releaseOps{l}, inline: true}.start(ctx, c)
	o := call.settle(ctx, call.Wait(ctx))
	l.setUntil(time.Time{})
	if o.Success {
		c.releaseInFlight(l.resource, call.Call, done, l)
	}
	// Confirmed on a majority, or answered by every node asked: no delete
	// is left on its way that could free the lock later (releaseEnds).
	c.releaseEnds(l, o.Success || call.Unanswered() == 0)
	ended = true
	var err error
	if !o.Success {
		kind := ErrUnavailable
		if refusedMajority(o, len(c.nodes)) {
			kind = ErrLockLost
		}
		err = call.fail(ctx, l.resource, kind, o, nil)
		c.log(ctx, slog.LevelWarn, "lock release incomplete", l.key, l.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	} else {
		c.log(ctx, slog.LevelDebug, "lock released", l.key, l.token, "agreed", o.Yes)
	}
	if h := c.cfg.hooks.OnRelease; h != nil {
		h(ReleaseEvent{Resource: l.resource, Held: c.cfg.clock.Now().Sub(l.acquiredAt), Err: err})
	}
	return err
}

// markReleased marks the lock released, and reports whether it was not yet.
func (l *Lock) markReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return false
	}
	l.released = true
	l.notifyLocked()
	return true
}

// abandonAndWait is abandon for a grant that its Lock call gives back to try
// again: its release keeps the waiter queued (the call may still yield its
// place: waiting.attempt).
func (l *Lock) abandonAndWait() {
	l.keepPlace = true
	l.abandon()
}

// abandon releases a lock that is being handed back before the caller saw it.
func (l *Lock) abandon() {
	l.markReleased()
	l.c.abandonAcquire(l.acquire, l)
	l.c.releasedHere(l)
}
