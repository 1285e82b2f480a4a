package redlock

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
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
	acquire  *quorum.Call[node.Acquired]

	acquiredAt time.Time
	// undoNotifies makes stragglers of the acquisition, released as they land,
	// notify waiters: set by Release.
	undoNotifies *atomic.Bool

	op sync.Mutex // serialises Extend and Release

	mu       sync.Mutex
	until    time.Time
	released bool
	changed  chan struct{} // closed (and replaced) whenever until or released changes

	fenceMu sync.Mutex // serialises Fence
	fence   uint64     // 0 until Fence succeeded
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
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// lease returns the current end of validity, whether the lock was released, and
// a channel closed when either changes.
func (l *Lock) lease() (until time.Time, released bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.until, l.released, l.changed
}

// Extend renews the lease on every node that still holds it (compare-and-pexpire:
// a node on which the key expired is never re-taken). On success Until moves to
// the start of the call plus TTL minus drift. It fails with ErrLockLost when a
// majority no longer holds the lock, and with ErrUnavailable when too few nodes
// answered to tell; in that case Until is unchanged.
func (l *Lock) Extend(ctx context.Context) error {
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if l.isReleased() {
		return c.failed("extend", l.resource, ErrLockLost, errReleased)
	}

	start := c.cfg.clock.Now()
	// The extensions run on a context the caller cannot cancel (bounded by the
	// node timeout): those still in flight when a majority answered must land,
	// or the lease would end early on those nodes. ctx bounds only the wait.
	call := quorum.Start(context.WithoutCancel(ctx), len(c.nodes), func(ctx context.Context, i int) (struct{}, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, min(c.cfg.nodeTimeout, l.ttl))
		defer cancel()
		ok, err := c.nodes[i].Extend(ctx, l.key, l.token, l.ttl)
		return struct{}{}, ok, err
	}, quorum.Options[struct{}]{Go: c.spawn, Now: c.cfg.clock.Now, OnReply: onReply[struct{}](c, "extend")})
	o := call.Wait(ctx)
	validity := clock.Validity(l.ttl, c.cfg.clock.Now().Sub(start), c.cfg.driftFactor)
	if o.Success && validity > 0 {
		l.setUntil(start.Add(l.ttl - clock.Drift(l.ttl, c.cfg.driftFactor)))
		c.log(ctx, slog.LevelDebug, "lock extended", l.key, l.token, "agreed", o.Yes)
		if h := c.cfg.hooks.OnExtend; h != nil {
			h(ExtendEvent{Resource: l.resource, OK: true})
		}
		return nil
	}
	kind := ErrUnavailable
	if o.No > len(c.nodes)-o.Need || !c.cfg.clock.Now().Before(l.Until()) {
		kind = ErrLockLost
	}
	qe := quorumError("extend", l.resource, kind, c.nodes, o)
	if o.Success {
		qe.Validity = validity
	}
	if !o.Decided {
		qe.Cause = ctx.Err()
	}
	c.log(ctx, slog.LevelWarn, "lock not extended", l.key, l.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	if h := c.cfg.hooks.OnExtend; h != nil {
		h(ExtendEvent{Resource: l.resource, Err: qe})
	}
	if kind == ErrLockLost {
		c.lost(l.resource, qe)
	}
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
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.notifyLocked()
	l.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	defer c.mu.RUnlock()

	// Nodes whose acquisition is still in flight release themselves as it lands
	// (on the same pipelined connection, after it); the others are released now.
	l.undoNotifies.Store(true)
	var done []int
	for i, r := range l.acquire.Abandon() {
		if r.Done {
			done = append(done, i)
		}
	}
	call := quorum.Start(context.WithoutCancel(ctx), len(done), func(ctx context.Context, j int) (struct{}, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
		defer cancel()
		ok, err := c.nodes[done[j]].Release(ctx, l.key, l.token, true)
		return struct{}{}, ok, err
	}, quorum.Options[struct{}]{Need: quorum.Majority(len(c.nodes)), Go: c.spawn, Now: c.cfg.clock.Now,
		OnReply: onReplyOf[struct{}](c, "release", done)})
	o := call.Wait(ctx)
	l.setUntil(time.Time{})
	c.releasedHere(l.resource)
	err := l.releaseResult(ctx, o, done)
	if h := c.cfg.hooks.OnRelease; h != nil {
		h(ReleaseEvent{Resource: l.resource, Held: c.cfg.clock.Now().Sub(l.acquiredAt), Err: err})
	}
	return err
}

func (l *Lock) releaseResult(ctx context.Context, o quorum.Outcome[struct{}], done []int) error {
	c := l.c
	if o.Success {
		c.log(ctx, slog.LevelDebug, "lock released", l.key, l.token, "agreed", o.Yes)
		return nil
	}
	kind := ErrUnavailable
	if o.No > len(c.nodes)-o.Need {
		kind = ErrLockLost
	}
	qe := quorumError("release", l.resource, kind, pick(c.nodes, done), o)
	qe.Nodes = len(c.nodes)
	if !o.Decided {
		qe.Cause = ctx.Err()
	}
	c.log(ctx, slog.LevelWarn, "lock release incomplete", l.key, l.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	return qe
}

// abandon releases a lock that is being handed back before the caller saw it.
func (l *Lock) abandon() {
	l.mu.Lock()
	l.released = true
	l.notifyLocked()
	l.mu.Unlock()
	abandon(l.c, l.acquire, l.key, l.token)
	l.c.releasedHere(l.resource)
}
