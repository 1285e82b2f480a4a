package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of Do.
const (
	// DefaultMaxHold bounds how long Do holds a lock, renewals included, so that
	// a stuck fn cannot hold a lock forever.
	DefaultMaxHold = 15 * time.Minute
)

var errMaxHold = errors.New("redlock: maximum hold time reached")

// WithMaxHold bounds how long Do holds the lock, renewals included (default
// DefaultMaxHold). When it is reached, fn's context ends and Do returns an error
// that is not ErrLockLost (the lock was released as planned).
func WithMaxHold(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) error {
		if d <= 0 {
			return invalid("max hold %v must be positive", d)
		}
		c.maxHold = d
		return nil
	})
}

// WithRenewEvery sets how often Do renews the lease (default TTL/3).
func WithRenewEvery(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) error {
		if d <= 0 {
			return invalid("renewal interval %v must be positive", d)
		}
		c.renewEvery = d
		return nil
	})
}

// WithSafetyMargin makes the contexts of Do and Lock.Context end this long before
// the lock's validity does (default TTL/10), leaving fn time to stop before
// another client may get the lock.
func WithSafetyMargin(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) error {
		if d < 0 {
			return invalid("safety margin %v must not be negative", d)
		}
		c.margin = d
		return nil
	})
}

// Do acquires the lock on resource (waiting like Lock), runs fn while renewing
// the lease in the background, and releases the lock when fn returns, on a
// context the caller's cancellation cannot cut short.
//
// fn's context ends before the lock can no longer be trusted: when renewal has
// not reached a majority by the end of validity minus the safety margin, when
// ctx ends, or when the maximum hold time is reached. fn should return promptly
// then. Do returns fn's error; when the lock was lost while fn ran, the error
// also matches ErrLockLost. Renewal never re-takes a lock that lapsed.
func (c *Client) Do(ctx context.Context, resource string, fn func(ctx context.Context) error, opts ...LockOption) error {
	lc, err := c.lockConfig(resource, opts)
	if err != nil {
		return err
	}
	l, err := c.Lock(ctx, resource, opts...)
	if err != nil {
		return err
	}
	return hold(ctx, []*Lock{l}, lc, fn)
}

// Context returns a context that ends when the lock's validity does, minus the
// safety margin given as an option (default none), following Extend; when the
// lock is released; or when parent ends. Its cause (context.Cause) matches
// ErrLockLost when the lease ran out. Call cancel to free its resources.
func (l *Lock) Context(parent context.Context, opts ...LockOption) (context.Context, context.CancelFunc) {
	lc := holdOptions(opts)
	ctx, cancel := context.WithCancelCause(parent)
	go watchLease(ctx, cancel, []*Lock{l}, lc.margin)
	return ctx, func() { cancel(context.Canceled) }
}

// errLeaseEnded is the cause of a context ended by watchLease.
type errLeaseEnded struct{ resource string }

func (e *errLeaseEnded) Error() string {
	return fmt.Sprintf("%v: validity of %q ended before renewal reached a majority", ErrLockLost, e.resource)
}
func (e *errLeaseEnded) Unwrap() error { return ErrLockLost }

// watchLease cancels ctx (with a cause matching ErrLockLost) when the earliest
// validity among locks, minus margin, passes, or when one of them is released.
func watchLease(ctx context.Context, cancel context.CancelCauseFunc, locks []*Lock, margin time.Duration) {
	for {
		var earliest time.Time
		var who string
		changed := make([]<-chan struct{}, len(locks))
		for i, l := range locks {
			until, released, ch := l.lease()
			if released {
				cancel(fmt.Errorf("%w: %q was released", ErrLockLost, l.resource))
				return
			}
			if earliest.IsZero() || until.Before(earliest) {
				earliest, who = until, l.resource
			}
			changed[i] = ch
		}
		left := time.Until(earliest.Add(-margin))
		if left <= 0 {
			err := &errLeaseEnded{resource: who}
			cancel(err)
			locks[0].c.lost(who, err)
			return
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-anyOf(changed):
			t.Stop()
		}
	}
}

// anyOf returns a channel closed when any of chans is closed (at most a few).
func anyOf(chans []<-chan struct{}) <-chan struct{} {
	if len(chans) == 1 {
		return chans[0]
	}
	out := make(chan struct{})
	stop := make(chan struct{})
	for _, ch := range chans {
		go func() {
			select {
			case <-ch:
				select {
				case <-stop:
				default:
					close(stop)
					close(out)
				}
			case <-stop:
			}
		}()
	}
	return out
}

// Keep renews the lock in the background until the returned context ends, and
// ends that context before the lock can no longer be trusted: when renewal has
// not reached a majority by the end of validity minus the safety margin (then
// context.Cause matches ErrLockLost), when parent ends, or at the maximum hold
// time. Calling cancel stops the renewal; it does not release the lock. Options:
// WithRenewEvery (default TTL/3), WithSafetyMargin (default TTL/10), WithMaxHold.
// Do is Lock, then Keep around fn, then Release.
func (l *Lock) Keep(parent context.Context, opts ...LockOption) (context.Context, context.CancelFunc) {
	lc := holdOptions(opts)
	return keep(parent, []*Lock{l}, lc)
}

// holdOptions reads the options of Keep and Context; an invalid value (which
// Lock would have rejected) leaves the default in place.
func holdOptions(opts []LockOption) lockConfig {
	var lc lockConfig
	for _, o := range opts {
		if o != nil {
			_ = o.applyLock(&lc)
		}
	}
	return lc
}

// keep renews locks until the returned context ends; see Lock.Keep.
func keep(parent context.Context, locks []*Lock, lc lockConfig) (context.Context, context.CancelFunc) {
	c := locks[0].c
	ttl := locks[0].ttl
	renewEvery, margin, maxHold := lc.renewEvery, lc.margin, lc.maxHold
	if renewEvery <= 0 {
		renewEvery = ttl / 3
	}
	if margin <= 0 {
		margin = ttl / 10
	}
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	ctx, cancel := context.WithCancelCause(parent)
	ctx, cancelHold := context.WithTimeoutCause(ctx, maxHold, errMaxHold)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // renews; a refusal by a majority ends ctx at once
		defer wg.Done()
		renew(ctx, cancel, locks, renewEvery, margin, c)
	}()
	go func() { // ends ctx before the lease ends, if renewal did not move it
		defer wg.Done()
		watchLease(ctx, cancel, locks, margin)
	}()
	return ctx, func() {
		cancel(context.Canceled)
		cancelHold()
		wg.Wait()
	}
}

// hold runs fn under locks (already acquired), renewing them, and releases them.
func hold(ctx context.Context, locks []*Lock, lc lockConfig, fn func(context.Context) error) error {
	c := locks[0].c
	fnCtx, stop := keep(ctx, locks, lc)
	fnErr := fn(fnCtx)
	cause := context.Cause(fnCtx)
	stop()

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.nodeTimeout*2)
	defer rcancel()
	var relErr error
	for i := len(locks) - 1; i >= 0; i-- {
		relErr = errors.Join(relErr, locks[i].Release(rctx))
	}
	if errors.Is(cause, ErrLockLost) {
		return errors.Join(fnErr, cause)
	}
	if fnErr == nil && errors.Is(cause, errMaxHold) {
		return errMaxHold
	}
	if fnErr != nil {
		return fnErr
	}
	if errors.Is(relErr, ErrLockLost) {
		return relErr // the lease lapsed at the very end: the work may not have been exclusive
	}
	return nil
}

// renew extends locks every interval until ctx ends. A refusal by a majority
// ends ctx with ErrLockLost at once; failures to reach the nodes are retried
// quickly, and watchLease ends ctx if the validity runs out meanwhile.
func renew(ctx context.Context, cancel context.CancelCauseFunc, locks []*Lock, every, margin time.Duration, c *Client) {
	wait := every
	for attempt := 0; ; {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var failed error
		for _, l := range locks {
			// An extension that ends after the validity minus the margin is
			// worthless: bound it there.
			until, _, _ := l.lease()
			ectx, ecancel := context.WithDeadline(ctx, until.Add(-margin))
			err := l.Extend(ectx)
			ecancel()
			if errors.Is(err, ErrLockLost) {
				if h := c.cfg.hooks.OnRenewalFailure; h != nil {
					h(RenewalFailureEvent{Resource: l.resource, Err: err})
				}
				c.log(ctx, slog.LevelWarn, "renewal refused: lock lost", l.key, l.token)
				cancel(err)
				return
			}
			if err != nil {
				if h := c.cfg.hooks.OnRenewalFailure; h != nil {
					h(RenewalFailureEvent{Resource: l.resource, Err: err})
				}
			}
			failed = errors.Join(failed, err)
		}
		if failed == nil {
			wait, attempt = every, 0
			continue
		}
		attempt++
		wait = backoff(c.cfg.retryMin, min(every, c.cfg.retryMax), attempt)
		c.log(ctx, slog.LevelWarn, "renewal failed, retrying", locks[0].key, locks[0].token, "err", failed)
	}
}
