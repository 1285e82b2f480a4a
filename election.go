package redlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
)

// Leader election (issue 27): an election is the lock on resource name.
// Campaign takes it with its fencing token, the leader's term, and writes
// the leader's record (term, value, since) beside it; the lease is renewed
// as Keep renews it, and the leadership's context ends before the lease can
// lapse. docs/election.md has the safety argument.

// observeResync bounds how long a change can go unseen by Observe when its
// notification was lost (a node down or resubscribing, a lease that lapsed
// without a release, which publishes nothing): 3 s (tests change it).
var observeResync atomic.Int64

func init() { observeResync.Store(int64(3 * time.Second)) }

// Leadership is the handle of a leader elected by Campaign. It is safe for
// concurrent use.
type Leadership struct {
	c     *Client
	l     *Lock
	name  string
	term  uint64
	since time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc // ends ctx: a Proclaim refused by a majority
	stop   context.CancelFunc      // stops the renewal (keep)

	mu       sync.Mutex // serialises Proclaim and Resign
	value    string
	rev      uint64
	resigned bool
}

// Campaign blocks until this caller leads the election name, or ctx ends,
// and returns the leadership: the lock on resource name, taken with its
// fencing token as the leader's term (WithFence), with the leader's record
// (term, value, since) written to a majority of the nodes (WithMetadata).
// The lock is renewed in the background until Resign, or until it is lost;
// Context ends before the lease can lapse. ctx bounds the campaign only:
// the leadership outlives it.
//
// opts are those of Do: lock options (WithLockTTL, …) and hold options
// (WithRenewEvery, WithSafetyMargin; WithMaxHold bounds the leadership,
// unbounded by default). WithMetadata is refused: value is the record.
//
// A grant whose term or record cannot be written to a majority is released
// and tried again, as is one that cannot tell its term because nodes that
// may have the counter did not answer; but Campaign returns the error,
// matching ErrLockLost, when every node answered and fewer than a majority
// have a fence counter (nodes restarted without persistence: docs/safety.md
// P5, docs/election.md): a
// term could then fall below an earlier leader's, and nobody is elected
// until an operator restores the counters. An empty name, a value longer
// than MaxMetadataLen or an invalid option is an error matching ErrInvalid.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...DoOption) (*Leadership, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if err := checkMetadata(value); err != nil {
		return nil, err
	}
	lockOpts, h, err := c.campaignOptions(name, opts)
	if err != nil {
		return nil, err
	}
	lockOpts = append(lockOpts, WithFence(), watchedKey, lockOptionFunc(func(lc *lockConfig) error { lc.meta = &value; return nil }))
	for attempt := 0; ; attempt++ {
		l, err := c.Lock(ctx, name, lockOpts...)
		if err != nil {
			if !campaignRetries(err) || ctx.Err() != nil {
				return nil, err
			}
			c.log(ctx, slog.LevelDebug, "campaign: elected, but the term or record was not written; trying again", c.lockKey(name), "", "err", err)
			t := time.NewTimer(backoff(c.cfg.retryMin, c.cfg.retryMax, attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, c.failed("acquire", name, ErrNotAcquired, ctx.Err())
			case <-t.C:
			}
			continue
		}
		kctx, stop := keep(context.WithoutCancel(ctx), []*Lock{l}, h)
		lctx, cancel := context.WithCancelCause(kctx)
		if lctx.Err() != nil { // the lease ran out while the record was written
			cancel(nil)
			stop()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.nodeTimeout)
			_ = l.Release(rctx)
			rcancel()
			continue
		}
		return &Leadership{c: c, l: l, name: name, term: l.fence, since: l.since(), value: value,
			ctx: lctx, cancel: cancel, stop: stop}, nil
	}
}

// campaignOptions splits Campaign's options, checks them and name, and
// returns the lock options and the hold configuration (no maximum hold
// unless given).
func (c *Client) campaignOptions(name string, opts []DoOption) ([]LockOption, holdConfig, error) {
	var h holdConfig
	var lockOpts []LockOption
	for _, o := range opts {
		switch o := o.(type) {
		case nil:
		case LockOption:
			lockOpts = append(lockOpts, o)
		default:
			if err := o.applyDo(nil, &h); err != nil {
				return nil, h, err
			}
		}
	}
	lc, err := c.lockConfig(name, lockOpts)
	if err != nil {
		return nil, h, err
	}
	if lc.meta != nil {
		return nil, h, invalid("WithMetadata given to Campaign: the leader's value is the record (use Proclaim to change it)")
	}
	if h.maxHold == 0 {
		h.maxHold = 100 * 365 * 24 * time.Hour // a leader leads until it resigns or loses the lease
	}
	h, err = h.forKeep(lc.ttl, clock.Drift(lc.ttl, c.cfg.driftFactor))
	return lockOpts, h, err
}

// campaignRetries reports whether Campaign tries again after err: a grant
// whose term or record did not reach a majority, unless the fence counters
// need an operator (too few, or at their maximum).
func campaignRetries(err error) bool {
	var qe *QuorumError
	if !errors.As(err, &qe) || (qe.Op != "fence" && qe.Op != "metadata") {
		return false
	}
	return !errors.Is(qe.Cause, errCounterMissing) && !errors.Is(qe.Cause, errCounterExhausted)
}

// Name returns the election's name.
func (ld *Leadership) Name() string { return ld.name }

// Term returns the leader's term: its lock's fencing token, larger for every
// later leader of the election (hand it to the resources the leader writes
// to: see the fence package).
func (ld *Leadership) Term() uint64 { return ld.term }

// Value returns the value last proclaimed (Campaign's, then Proclaim's).
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Since returns when this leader took the lock.
func (ld *Leadership) Since() time.Time { return ld.since }

// Until returns the end of the lease's validity, as Lock.Until.
func (ld *Leadership) Until() time.Time { return ld.l.Until() }

// Context returns a context that ends when the leadership does: before the
// lease can lapse, when renewal has not reached a majority by the end of
// validity minus the safety margin, or a majority refused a renewal or a
// Proclaim (the cause matches ErrLockLost); on Resign (context.Canceled); or
// at WithMaxHold (ErrMaxHold). A leader must stop acting as one when it ends.
func (ld *Leadership) Context() context.Context { return ld.ctx }

// Done is Context().Done().
func (ld *Leadership) Done() <-chan struct{} { return ld.ctx.Done() }

// Info returns the leader's record as this leader knows it.
func (ld *Leadership) Info() LeaderInfo {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return LeaderInfo{Name: ld.name, Value: ld.value, Term: ld.term, Rev: ld.rev, Since: ld.since}
}

// Proclaim changes the leader's value, on every node where this leader still
// holds the lock (compare-and-set on its token), and returns once a majority
// stored it: Leader and Observe see it. It fails with ErrLockLost when the
// leadership is over (resigned, its context ended: nothing is sent) or a
// majority no longer holds the lock (a deposed leader; the leadership's
// context then ends too), and with ErrUnavailable when too few nodes
// answered (the value may be stored on some: a later Proclaim supersedes
// it).
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := checkMetadata(value); err != nil {
		return err
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	c := ld.c
	if ld.resigned {
		return c.failed("metadata", ld.name, ErrLockLost, errReleased)
	}
	if ld.ctx.Err() != nil {
		return c.failed("metadata", ld.name, ErrLockLost, context.Cause(ld.ctx))
	}
	if err := c.begin(); err != nil {
		return err
	}
	defer c.end()
	ld.rev++ // also when it fails: a record it left on some nodes is superseded by the next
	err := ld.l.writeMeta(ctx, node.Meta{Term: ld.term, Rev: ld.rev, Since: ld.since, Value: value})
	switch {
	case err == nil:
		ld.value = value
	case errors.Is(err, ErrLockLost):
		ld.cancel(err)
		ld.l.reportLost(err)
	}
	return err
}

// Resign steps down: the renewal stops and the lock is released, which wakes
// the next candidate at once (it does not wait for the lease to lapse), and
// the leadership's context ends. It returns Release's error (ErrLockLost
// when the lock had lapsed already). Resigning twice returns nil.
func (ld *Leadership) Resign(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.resigned {
		return nil
	}
	ld.resigned = true
	ld.cancel(context.Canceled)
	ld.stop()
	return ld.l.Release(ctx)
}

// Observe streams the record of election name's leader: the current one
// first, then each change (a new leader, a new value; a LeaderInfo that is
// Vacant when nobody leads), in order: terms never go back. It does not
// poll: it listens to every node's notifications (a release, a record
// written), and reads the record again (Leader) when one comes; a lost
// notification is made up for by a read every few seconds. A reader that
// falls behind misses intermediate records, not the latest. The channel is
// closed when ctx ends or the client is closed. An empty name is an error
// matching ErrInvalid.
func (c *Client) Observe(ctx context.Context, name string) (<-chan LeaderInfo, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if _, err := c.lockConfig(name, nil); err != nil {
		return nil, err
	}
	if err := c.begin(); err != nil {
		return nil, err
	}
	defer c.end()
	out := make(chan LeaderInfo)
	o := &observer{c: c, name: name, out: out, poke: make(chan struct{}, 1), done: make(chan struct{})}
	c.spawn(func() { o.run(ctx) })
	return out, nil
}

// observer is one Observe call.
type observer struct {
	c    *Client
	name string
	out  chan LeaderInfo
	poke chan struct{} // a notification from some node (coalesced)
	done chan struct{} // closed when run ends: the watches stop
}

func (o *observer) run(ctx context.Context) {
	defer close(o.out)
	defer close(o.done)
	c := o.c
	key := c.lockKey(o.name)
	// Listen first, then read: a change after the subscriptions is
	// notified. A node that cannot confirm within the node timeout is read
	// on the resync.
	var subscribed sync.WaitGroup
	for _, n := range c.nodes {
		for _, k := range [...]string{key, node.MetaKey(key)} {
			subscribed.Add(1)
			c.spawn(func() { o.watch(ctx, n, k, &subscribed) })
		}
	}
	subscribed.Wait()
	var top LeaderInfo // the newest record sent
	sent, vacant := false, false
	resync := time.NewTimer(time.Duration(observeResync.Load()))
	defer resync.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*c.cfg.nodeTimeout)
		li, err := c.Leader(rctx, o.name)
		cancel()
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNoLeader) {
			li, err = LeaderInfo{Name: o.name}, nil
		}
		if err == nil && o.changed(li, top, sent, vacant) {
			select {
			case o.out <- li:
			case <-ctx.Done():
				return
			case <-c.stop:
				return
			}
			sent, vacant = true, li.Vacant()
			if !vacant {
				top = li
			}
		}
		if !resync.Stop() {
			select {
			case <-resync.C:
			default:
			}
		}
		resync.Reset(time.Duration(observeResync.Load()))
		select {
		case <-ctx.Done():
			return
		case <-c.stop:
			return
		case <-o.poke:
		case <-resync.C:
		}
	}
}

// changed reports whether li is to be sent, after top (the newest record
// sent, if sent) and a vacancy (vacant: the last sent). A record older than
// top is a leftover (a lapsed leader's key on a node, not expired yet), and
// is never sent: terms never go back.
func (o *observer) changed(li, top LeaderInfo, sent, vacant bool) bool {
	switch {
	case !sent:
		return true
	case li.Vacant():
		return !vacant
	case vacant:
		return !top.newer(li) // the same leader again, or a later one
	}
	return li.newer(top)
}

// watch forwards n's notifications on channel k to o.poke until o ends.
func (o *observer) watch(ctx context.Context, n node.Node, k string, subscribed *sync.WaitGroup) {
	wctx, cancel := context.WithTimeout(ctx, o.c.cfg.nodeTimeout)
	ch, stop, _ := n.Watch(wctx, k) // on failure it keeps trying: the resync covers the gap
	cancel()
	subscribed.Done()
	if stop == nil {
		return
	}
	defer stop()
	for {
		select {
		case <-ch:
			poke(o.poke)
		case <-o.done:
			return
		case <-o.c.stop:
			return
		}
	}
}
