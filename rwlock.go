package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Read-write locks (docs/rwlock.md). On every node the writer is the plain
// lock key of the resource, so a write lock is a *Lock (Extend, Release,
// Fence, Keep, Context work as for Lock), and the readers are a sorted set
// beside it (node.ReaderKeys) of reader tokens, each with its own lease on
// the node's clock. A node admits a reader only while no writer holds the
// lock key and no writer waits (a short-lived mark a writer refused because
// of readers leaves), and a writer only while no reader and no writer holds.
// Readers and writers both need a majority within their validity, measured
// as for Lock; any two majorities share a node, and that node refused one of
// them (docs/safety.md, "Read-write locks").

// RWWaitMark is how long the mark of a writer that waits for readers to
// leave lives on a node without the writer's next attempt renewing it: while
// it lives, the node admits no new reader, so that a stream of readers cannot
// starve the writer. A writer that gives up removes it (LeaveWrite); where
// that does not land, it expires.
const RWWaitMark = 500 * time.Millisecond

// rwRetryMax bounds a waiting writer's wait between attempts, so that its
// mark is renewed well before it expires (an attempt takes at most a node
// timeout more).
const rwRetryMax = RWWaitMark / 4

// RLock acquires a read lock on resource, retrying until it succeeds or ctx
// ends: readers share the lock, and are excluded by a writer (WLock) that
// holds it or waits for it. Woken by releases, with a bounded jittered retry
// in case a notification is lost. On failure the error wraps ErrNotAcquired
// and, when ctx ended, ctx.Err(). Options: WithLockTTL; WithFence is refused
// (readers have no fencing token). Fair mode (WithFair) does not apply to
// read-write locks. A resource used with RLock must be write-locked with
// WLock, never with Lock: Lock does not wait for readers.
func (c *Client) RLock(ctx context.Context, resource string, opts ...LockOption) (*ReadLock, error) {
	lc, err := c.rwConfig(ctx, resource, opts, true)
	if err != nil {
		return nil, err
	}
	return rwLoop(ctx, c, resource, lc, "", c.tryRead)
}

// TryRLock makes one attempt to acquire a read lock on resource (see RLock).
// On failure the error wraps ErrNotAcquired.
func (c *Client) TryRLock(ctx context.Context, resource string, opts ...LockOption) (*ReadLock, error) {
	lc, err := c.rwConfig(ctx, resource, opts, true)
	if err != nil {
		return nil, err
	}
	return rwHooked(ctx, c, resource, func(ctx context.Context) (*ReadLock, error) {
		return c.tryRead(ctx, resource, lc, "")
	})
}

// WLock acquires the write lock on resource, retrying until it succeeds or
// ctx ends: it excludes readers (RLock) and other writers. A writer refused
// because readers hold the lock marks the nodes so that they admit no new
// reader while it waits (RWWaitMark): the readers already in finish, and a
// stream of new ones cannot starve it. The lock is a *Lock: Extend, Release,
// Fence (the fencing token, larger for every later writer), Keep and Context
// work as for Lock. On failure the error wraps ErrNotAcquired and, when ctx
// ended, ctx.Err(). Options: WithLockTTL, WithFence.
func (c *Client) WLock(ctx context.Context, resource string, opts ...LockOption) (*Lock, error) {
	lc, err := c.rwConfig(ctx, resource, opts, false)
	if err != nil {
		return nil, err
	}
	writer, err := newToken()
	if err != nil {
		return nil, err
	}
	return rwLoop(ctx, c, resource, lc, writer, c.tryWrite)
}

// TryWLock makes one attempt to acquire the write lock on resource (see
// WLock); it leaves no mark for readers. On failure the error wraps
// ErrNotAcquired.
func (c *Client) TryWLock(ctx context.Context, resource string, opts ...LockOption) (*Lock, error) {
	lc, err := c.rwConfig(ctx, resource, opts, false)
	if err != nil {
		return nil, err
	}
	lc.once = true
	return rwHooked(ctx, c, resource, func(ctx context.Context) (*Lock, error) {
		return c.tryWrite(ctx, resource, lc, "")
	})
}

// rwConfig checks the arguments of RLock, WLock and their Try forms.
func (c *Client) rwConfig(ctx context.Context, resource string, opts []LockOption, read bool) (lockConfig, error) {
	if err := checkContext(ctx); err != nil {
		return lockConfig{}, err
	}
	lc, err := c.lockConfig(resource, opts)
	if err != nil {
		return lc, err
	}
	if read && lc.fence {
		return lc, invalid("WithFence given to a read lock: readers have no fencing token (a writer's, WLock, has)")
	}
	return lc, nil
}

// rwHooked runs one attempt under the OnAcquire hook.
func rwHooked[T any](ctx context.Context, c *Client, resource string, try func(context.Context) (T, error)) (T, error) {
	h := c.cfg.hooks.OnAcquire
	if h == nil {
		return try(ctx)
	}
	start := c.cfg.clock.Now()
	v, err := try(ctx)
	h(AcquireEvent{Resource: resource, Acquired: err == nil, Wait: c.cfg.clock.Now().Sub(start), Attempts: 1, Err: err})
	return v, err
}

// rwLoop makes attempts (try, with writer: the waiting writer's id, or "")
// until one succeeds or ctx ends. Once refused, it listens for releases on
// every node (the lock key's channel: a writer's release, and a read release
// that leaves no reader) and waits for one, or for a bounded jittered
// backoff in case a notification is lost.
func rwLoop[T any](ctx context.Context, c *Client, resource string, lc lockConfig, writer string,
	try func(ctx context.Context, resource string, lc lockConfig, writer string) (T, error)) (T, error) {
	var zero T
	h := c.cfg.hooks.OnAcquire
	start, attempts := c.cfg.clock.Now(), 0
	done := func(v T, err error) (T, error) {
		if h != nil {
			h(AcquireEvent{Resource: resource, Acquired: err == nil, Wait: c.cfg.clock.Now().Sub(start), Attempts: attempts, Err: err})
		}
		return v, err
	}
	if err := c.enterCall(); err != nil {
		return done(zero, err)
	}
	defer c.leaveCall()
	marked := false // a refused writer may have left its mark on some nodes
	fail := func(err error) (T, error) {
		if marked {
			c.leaveWrite(resource, writer) // new readers need not wait for it to expire
		}
		return done(zero, err)
	}
	var rw *releaseWatch
	defer func() {
		if rw != nil {
			rw.stop()
		}
	}()
	retryMax := lc.retryMax
	if writer != "" {
		retryMax = min(retryMax, rwRetryMax)
	}
	for attempt := 0; ; attempt++ {
		attempts++
		v, err := try(ctx, resource, lc, writer)
		if err == nil {
			return done(v, nil)
		}
		var qe *QuorumError
		if errors.As(err, &qe) && qe.Refused > 0 && writer != "" {
			marked = true
		}
		if c.lastAttempt(ctx, qe) {
			return fail(c.callError(resource, err))
		}
		if rw == nil && qe.Refused > 0 {
			// Held: listen for its release, and try again at once (it may
			// have been released while we subscribed).
			rw = c.watchKey(ctx, c.lockKey(resource))
			continue
		}
		if _, err := c.awaitRetry(ctx, rw, nil, fenceGivenBack(err), backoff(lc.retryMin, retryMax, attempt)); err != nil {
			qe.Cause = err
			return fail(qe)
		}
	}
}

// leaveWrite removes the mark that the waiting writer (its id) may have
// left on the nodes, in the background, on the client's cleanup context:
// the WLock call gave up. A node whose breaker is open is skipped (the mark
// expires by itself within RWWaitMark).
func (c *Client) leaveWrite(resource, writer string) {
	key := c.lockKey(resource)
	for i, n := range c.nodes {
		if !c.health[i].allow() {
			continue
		}
		c.spawn(func() {
			ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.nodeTimeout)
			defer cancel()
			_, err := n.LeaveWrite(ctx, key, writer)
			c.recordCall(i, err)
		})
	}
}

// watchKey listens for the release notifications of key (its own channel)
// on every node, as watchReleases does for a waiter's channel: it returns
// once one node confirmed its subscription (or all failed, or the node
// timeout passed).
func (c *Client) watchKey(ctx context.Context, key string) *releaseWatch {
	return c.watchChannel(ctx, key)
}

// writeOps is a write acquisition's round (roundOps): the write-acquire
// script, then as a plain acquisition (undoStraggler, split.observe).
type writeOps struct {
	l      *Lock
	writer string
}

func (w writeOps) call(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
	w.l.c.awaitOwnRelease(ctx, w.l.resource, i, w.l)
	a, err := n.AcquireWrite(ctx, w.l.key, w.l.fenceKey, w.l.token, w.l.ttl, w.writer, RWWaitMark)
	return a, a.OK, err
}

func (w writeOps) undo(i int, r quorum.Reply[node.Acquired]) { w.l.undoStraggler(i, r) }

func (w writeOps) onReply(j int, r quorum.Reply[node.Acquired]) {
	w.l.split.observe(j, r)
	w.l.heard(j, r)
}

// tryWrite is one write acquisition attempt: try, with the write-acquire
// script instead of the plain one.
func (c *Client) tryWrite(ctx context.Context, resource string, lc lockConfig, writer string) (*Lock, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	defer c.end()
	if err := ctx.Err(); err != nil { // nothing is sent once the caller gave up
		return nil, c.failed("acquire", resource, ErrNotAcquired, err)
	}
	l, err := c.newLock(resource, lc.ttl, true, true) // rwwrite.lua reads the counters; readers and writers watch the key
	if err != nil {
		return nil, err
	}
	drift := clock.Drift(l.ttl, c.cfg.driftFactor)
	start := c.cfg.clock.Now()
	split := &l.split
	halt := split.watch(l.ttl - drift)
	defer split.stop()
	call := round[node.Acquired]{op: "acquire", timeout: l.ttl, ops: writeOps{l, writer}}.start(ctx, c)
	o := call.WaitOr(ctx, halt)
	splitVote := !o.Decided && split.split(ctx)
	split.stop()
	now := c.cfg.clock.Now()
	elapsed := now.Sub(start)
	validity := clock.Validity(l.ttl, elapsed, c.cfg.driftFactor)
	if !o.Success || validity <= 0 {
		decided := time.Now() // the waiter's ticket: before the hook (notAcquired)
		c.attempted(resource, lc, o, elapsed, validity, false)
		return nil, c.notAcquired(ctx, l, lc, call, o, validity, splitVote, decided)
	}
	l.granted(call.Call, now, start.Add(l.ttl-drift))
	c.log(ctx, slog.LevelDebug, "write lock acquired", l.key, l.token, "agreed", o.Yes, "validity", validity)
	if lc.fence {
		if err := l.fenceOrGiveBack(ctx); err != nil {
			c.attempted(resource, lc, o, elapsed, validity, false)
			return nil, err
		}
	}
	c.attempted(resource, lc, o, elapsed, validity, true)
	return l, nil
}

// ReadLock is a held read lock (RLock). It is safe for concurrent use.
type ReadLock struct {
	c        *Client
	resource string
	key      string // the resource's lock key: the readers are beside it
	token    string
	ttl      time.Duration

	acquire    *quorum.Call[node.Acquired] // set once granted
	acquiredAt time.Time

	op       sync.Mutex // serialises Extend and Release
	mu       sync.Mutex
	until    time.Time
	released bool
	lostTold bool          // OnLost fired for the read lock (reportLost)
	changed  chan struct{} // closed and replaced whenever until or released changes (Keep)

	split splitWatch // the acquisition's
}

// readOps is a read acquisition's round (roundOps).
type readOps struct{ r *ReadLock }

func (o readOps) call(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
	o.r.c.awaitOwnRelease(ctx, o.r.resource, i, nil) // this client's write release still landing would refuse it
	a, err := n.AcquireRead(ctx, o.r.key, o.r.token, o.r.ttl)
	return a, a.OK, err
}

func (o readOps) undo(i int, _ quorum.Reply[node.Acquired]) { o.r.releaseOn(i) }

func (o readOps) onReply(j int, r quorum.Reply[node.Acquired]) { o.r.split.observe(j, r) }

// tryRead is one read acquisition attempt.
func (c *Client) tryRead(ctx context.Context, resource string, lc lockConfig, _ string) (*ReadLock, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	defer c.end()
	if err := ctx.Err(); err != nil {
		return nil, c.failed("acquire", resource, ErrNotAcquired, err)
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	r := &ReadLock{c: c, resource: resource, key: c.lockKey(resource), token: token, ttl: lc.ttl, changed: make(chan struct{})}
	drift := clock.Drift(r.ttl, c.cfg.driftFactor)
	start := c.cfg.clock.Now()
	halt := r.split.watch(r.ttl - drift)
	defer r.split.stop()
	call := round[node.Acquired]{op: "acquire", timeout: r.ttl, ops: readOps{r}}.start(ctx, c)
	o := call.WaitOr(ctx, halt)
	splitVote := !o.Decided && r.split.split(ctx)
	r.split.stop()
	now := c.cfg.clock.Now()
	validity := clock.Validity(r.ttl, now.Sub(start), c.cfg.driftFactor)
	c.attempted(resource, lc, o, now.Sub(start), validity, o.Success && validity > 0)
	if !o.Success || validity <= 0 {
		// Given up: what was granted is released now, stragglers as they land.
		for i, rep := range call.Abandon() {
			if rep.Unsettled() {
				c.spawn(func() { r.releaseOn(i) })
			}
		}
		undecided := errLeaseOutlived
		if splitVote {
			undecided = errSplitVote
		}
		qe := call.fail(ctx, resource, ErrNotAcquired, o, undecided)
		if o.Success {
			qe.Validity = validity
		}
		c.log(ctx, slog.LevelDebug, "read lock not acquired", r.key, r.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
		return nil, qe
	}
	r.acquire, r.acquiredAt, r.until = call.Call, now, start.Add(r.ttl-drift)
	c.log(ctx, slog.LevelDebug, "read lock acquired", r.key, r.token, "agreed", o.Yes, "validity", validity)
	return r, nil
}

// releaseOn removes the reader from node i on a context of its own (the
// caller's cancellation cannot cut it short), bounded by the node timeout,
// through the node's breaker: a node whose breaker is open is skipped (the
// reader's lease there runs out by itself). Waiting writers are told when
// the node is left without readers.
func (r *ReadLock) releaseOn(i int) {
	c := r.c
	if !c.health[i].allow() {
		return
	}
	ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.nodeTimeout)
	defer cancel()
	_, err := c.nodes[i].ReleaseRead(ctx, r.key, r.token, true)
	c.recordCall(i, err)
	if err != nil {
		c.log(ctx, slog.LevelWarn, "cleanup read release failed", r.key, r.token, "node", c.nodes[i].Name(), "err", err)
	}
}

// Resource returns the name of the locked resource.
func (r *ReadLock) Resource() string { return r.resource }

// Token returns the reader's random token, as stored among the readers on
// every node. Treat it as a secret; log a digest (Digest).
func (r *ReadLock) Token() string { return r.token }

// TTL returns the lease requested from each node.
func (r *ReadLock) TTL() time.Duration { return r.ttl }

// Until returns the end of the read lock's validity, net of the drift
// allowance, as Lock.Until does: past it, a writer may hold the lock.
func (r *ReadLock) Until() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

func (r *ReadLock) isReleased() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}

// Extend renews the reader's lease on every node that still counts it among
// the readers (a node on which it lapsed never re-admits it), as
// Lock.Extend does: on success Until moves to the start of the call plus TTL
// minus drift; ErrLockLost when a majority no longer holds it or Until has
// passed (then nothing is sent); ErrUnavailable when too few nodes answered
// (Until is unchanged). A waiting writer does not stop a reader's extension:
// a reader that extends for ever keeps writers out, as a Lock held for ever
// keeps other lockers out.
func (r *ReadLock) Extend(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	c := r.c
	r.op.Lock()
	defer r.op.Unlock()
	if err := c.begin(); err != nil {
		return err
	}
	defer c.end()
	if r.isReleased() {
		return c.failed("extend", r.resource, ErrLockLost, errReleased)
	}
	err := r.extend(ctx)
	if h := c.cfg.hooks.OnExtend; h != nil {
		h(ExtendEvent{Resource: r.resource, OK: err == nil, Err: err})
	}
	if errors.Is(err, ErrLockLost) {
		r.reportLost(err)
	}
	return err
}

// reportLost fires the OnLost hook for r, once, as Lock.reportLost does
// for a lock: Keep's renewal and its lease watch may both find it lost,
// and a caller may call Extend again on a lost read lock.
func (r *ReadLock) reportLost(err error) { r.c.lostOnce(&r.mu, &r.lostTold, r.resource, err) }

func (r *ReadLock) extend(ctx context.Context) error {
	c := r.c
	until := r.Until()
	start := c.cfg.clock.Now()
	if !start.Before(until) {
		return c.failed("extend", r.resource, ErrLockLost, errValidityEnded)
	}
	call := round[struct{}]{op: "extend", timeout: r.ttl, call: func(ctx context.Context, _ int, n node.Node) (struct{}, bool, error) {
		ok, err := n.ExtendRead(ctx, r.key, r.token, r.ttl)
		return struct{}{}, ok, err
	}}.start(ctx, c)
	wctx, cancel := context.WithTimeout(ctx, until.Sub(start))
	o := call.Wait(wctx)
	cancel()
	drift := clock.Drift(r.ttl, c.cfg.driftFactor)
	validity := clock.Validity(r.ttl, c.cfg.clock.Now().Sub(start), c.cfg.driftFactor)
	if o.Success && validity > 0 {
		r.setLease(start.Add(r.ttl-drift), false)
		return nil
	}
	kind := ErrUnavailable
	if refusedMajority(o, len(c.nodes)) || !c.cfg.clock.Now().Before(until) {
		kind = ErrLockLost
	}
	qe := call.fail(ctx, r.resource, kind, o, errValidityEnded)
	if o.Success {
		qe.Validity = validity
	}
	c.log(ctx, slog.LevelWarn, "read lock not extended", r.key, r.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	return qe
}

// Release removes the reader on every node, including nodes that refused or
// had not answered the acquisition (a late acquisition is released as it
// lands), on a context the caller's cancellation cannot cut short; ctx bounds
// only how long Release waits. A node left without readers tells the waiting
// writers. It returns nil once a majority confirmed the removal, an error
// wrapping ErrLockLost when a majority no longer counted the reader (its
// lease had run out), and ErrUnavailable when too few nodes answered.
// Releasing twice returns nil.
func (r *ReadLock) Release(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	c := r.c
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	r.setLease(r.Until(), true)
	if err := c.begin(); err != nil {
		return err
	}
	defer c.end()
	done := r.acquire.AbandonDone(c.all) // the others release themselves as they land
	if done == nil {
		done = []int{}
	}
	call := round[struct{}]{op: "release", idx: done, call: func(ctx context.Context, _ int, n node.Node) (struct{}, bool, error) {
		ok, err := n.ReleaseRead(ctx, r.key, r.token, true)
		return struct{}{}, ok, err
	}}.start(ctx, c)
	o := call.settle(ctx, call.Wait(ctx))
	r.setLease(time.Time{}, true)
	if o.Success { // this client's next attempt waits for the last nodes (awaitOwnRelease)
		c.releaseInFlight(r.resource, call.Call, done, nil)
	}
	var err error
	if !o.Success {
		kind := ErrUnavailable
		if refusedMajority(o, len(c.nodes)) {
			kind = ErrLockLost
		}
		err = call.fail(ctx, r.resource, kind, o, nil)
		c.log(ctx, slog.LevelWarn, "read lock release incomplete", r.key, r.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	}
	if h := c.cfg.hooks.OnRelease; h != nil {
		h(ReleaseEvent{Resource: r.resource, Held: c.cfg.clock.Now().Sub(r.acquiredAt), Err: err})
	}
	return err
}

// setLease sets the end of validity and the released flag, and wakes Keep.
func (r *ReadLock) setLease(until time.Time, released bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.until, r.released = until, released
	close(r.changed)
	r.changed = make(chan struct{})
}

// lease returns the end of validity, whether the lock was released, and a
// channel closed at the next change of either.
func (r *ReadLock) lease() (until time.Time, released bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until, r.released, r.changed
}

// Keep renews the read lock in the background until the returned context
// ends, as Lock.Keep does for a lock: the context ends before the read lock
// can no longer be trusted (renewal has not reached a majority by the end of
// validity minus the safety margin, or the lock was released: its cause
// matches ErrLockLost), when parent ends, or at the maximum hold time (cause
// ErrMaxHold). A lease that has already ended gives a context that has
// already ended. Calling cancel stops the renewal; it does not release the
// read lock. Options: WithRenewEvery (default TTL/3), WithSafetyMargin
// (default TTL/10), WithMaxHold (default DefaultMaxHold); an invalid one, or
// a nil parent, ends the context at once with a cause matching ErrInvalid.
func (r *ReadLock) Keep(parent context.Context, opts ...HoldOption) (context.Context, context.CancelFunc) {
	if err := checkContext(parent); err != nil {
		return endedContext(err)
	}
	h, err := holdOptions(opts)
	if err == nil {
		h, err = h.forKeep(r.ttl, clock.Drift(r.ttl, r.c.cfg.driftFactor))
	}
	ctx, cancel := context.WithCancelCause(parent)
	if err != nil {
		cancel(err)
		return ctx, func() {}
	}
	ctx, cancelHold := context.WithTimeoutCause(ctx, h.maxHold, ErrMaxHold)
	if _, ok := r.leaseLeft(cancel, h.margin); !ok {
		return ctx, func() { cancel(context.Canceled); cancelHold() }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.keep(ctx, cancel, h)
	}()
	return ctx, func() {
		cancel(context.Canceled)
		cancelHold()
		<-done
	}
}

// leaseLeft cancels ctx if the lease is over (released, or its validity
// minus margin passed), and otherwise returns how long it has left.
func (r *ReadLock) leaseLeft(cancel context.CancelCauseFunc, margin time.Duration) (time.Duration, bool) {
	until, released, _ := r.lease()
	if released {
		cancel(fmt.Errorf("%w: read lock of %q was released", ErrLockLost, r.resource))
		return 0, false
	}
	left := until.Add(-margin).Sub(r.c.cfg.clock.Now())
	if left <= 0 {
		err := &errLeaseEnded{resource: r.resource}
		cancel(err)
		r.reportLost(err)
		return 0, false
	}
	return left, true
}

// keep renews r every h.renewEvery (sooner after a failure) until ctx ends,
// and ends ctx when the lease does (Keep).
func (r *ReadLock) keep(ctx context.Context, cancel context.CancelCauseFunc, h holdConfig) {
	c := r.c
	next := c.cfg.clock.Now().Add(h.renewEvery)
	for attempt := 0; ; {
		left, ok := r.leaseLeft(cancel, h.margin)
		if !ok {
			return
		}
		_, _, changed := r.lease()
		t := time.NewTimer(min(left, next.Sub(c.cfg.clock.Now())))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
			t.Stop()
			continue
		case <-t.C:
		}
		if c.cfg.clock.Now().Before(next) {
			continue // the lease's end, checked at the top
		}
		until, _, _ := r.lease()
		ectx, ecancel := context.WithDeadline(ctx, until.Add(-h.margin))
		err := r.Extend(ectx)
		ecancel()
		if hk := c.cfg.hooks.OnRenewalFailure; hk != nil && err != nil {
			hk(RenewalFailureEvent{Resource: r.resource, Err: err})
		}
		switch {
		case err == nil:
			attempt = 0
			next = c.cfg.clock.Now().Add(h.renewEvery)
		case errors.Is(err, ErrLockLost):
			cancel(err)
			return
		default:
			attempt++
			next = c.cfg.clock.Now().Add(backoff(c.cfg.retryMin, min(h.renewEvery, c.cfg.retryMax), attempt))
			c.log(ctx, slog.LevelWarn, "read lock renewal failed, retrying", r.key, r.token, "err", err)
		}
	}
}
