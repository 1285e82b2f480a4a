package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redlock-go/redlock/clock"
)

// DefaultMaxHold bounds how long Do and Keep hold a lock, renewals included, so
// that a stuck fn cannot hold a lock forever.
const DefaultMaxHold = 15 * time.Minute

// ErrMaxHold is the cause (context.Cause) of a Do or Keep context ended by the
// maximum hold time (WithMaxHold). Do returns an error matching it when fn
// returned an error after the maximum hold time ended its context; the lock was
// released as planned, so it does not match ErrLockLost.
var ErrMaxHold = errors.New("redlock: maximum hold time reached")

type holdConfig struct {
	maxHold    time.Duration // 0: DefaultMaxHold (Keep, Do)
	renewEvery time.Duration // 0: TTL/3 (Keep, Do)
	margin     time.Duration
	marginSet  bool // margin was given (0 is a valid margin)
}

// WithMaxHold bounds how long Do or Keep hold the lock, renewals included
// (default DefaultMaxHold). When it is reached, the context ends with cause
// ErrMaxHold. It does not apply to Lock.Context, which does not renew.
func WithMaxHold(d time.Duration) HoldOption {
	return holdOptionFunc(func(h *holdConfig) error {
		if d <= 0 {
			return invalid("max hold %v must be positive", d)
		}
		h.maxHold = d
		return nil
	})
}

// WithRenewEvery sets how often Do and Keep renew the lease (default TTL/3). It
// must be shorter than the time the lease can be trusted: TTL minus the drift
// allowance minus the safety margin. It does not apply to Lock.Context.
func WithRenewEvery(d time.Duration) HoldOption {
	return holdOptionFunc(func(h *holdConfig) error {
		if d <= 0 {
			return invalid("renewal interval %v must be positive", d)
		}
		h.renewEvery = d
		return nil
	})
}

// WithSafetyMargin makes the contexts of Do, Keep and Lock.Context end this
// long before the lock's validity does, leaving fn time to stop before another
// client may get the lock. The default is TTL/10 for Do and Keep, and none for
// Lock.Context (it ends with the validity). It must be less than TTL minus the
// drift allowance.
func WithSafetyMargin(d time.Duration) HoldOption {
	return holdOptionFunc(func(h *holdConfig) error {
		if d < 0 {
			return invalid("safety margin %v must not be negative", d)
		}
		h.margin, h.marginSet = d, true
		return nil
	})
}

// forKeep fills in the defaults of Keep and Do for a lock with lease ttl, and
// checks the values against it.
func (h holdConfig) forKeep(ttl, drift time.Duration) (holdConfig, error) {
	if !h.marginSet {
		h.margin = ttl / 10
	}
	if h.renewEvery == 0 {
		h.renewEvery = ttl / 3
	}
	if h.maxHold == 0 {
		h.maxHold = DefaultMaxHold
	}
	if err := h.checkMargin(ttl, drift); err != nil {
		return h, err
	}
	if trusted := ttl - drift - h.margin; h.renewEvery >= trusted {
		return h, invalid("renewal interval %v must be shorter than the %v the lease can be trusted (TTL %v − drift %v − margin %v)",
			h.renewEvery, trusted, ttl, drift, h.margin)
	}
	return h, nil
}

// forContext checks the options of Lock.Context, which only takes a margin.
func (h holdConfig) forContext(ttl, drift time.Duration) (holdConfig, error) {
	if h.maxHold != 0 || h.renewEvery != 0 {
		return h, invalid("Lock.Context does not renew: WithMaxHold and WithRenewEvery do not apply (use Lock.Keep)")
	}
	return h, h.checkMargin(ttl, drift)
}

func (h holdConfig) checkMargin(ttl, drift time.Duration) error {
	if h.margin >= ttl-drift {
		return invalid("safety margin %v leaves nothing of the lease (TTL %v − drift %v)", h.margin, ttl, drift)
	}
	return nil
}

// holdOptions applies opts.
func holdOptions(opts []HoldOption) (holdConfig, error) {
	var h holdConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyHold(&h); err != nil {
			return h, err
		}
	}
	return h, nil
}

// doOptions splits the options of Do and DoMulti and checks them; resource is
// checked like Lock's.
func (c *Client) doOptions(resource string, fn func(context.Context) error, opts []DoOption) ([]LockOption, holdConfig, error) {
	var h holdConfig
	if fn == nil {
		return nil, h, invalid("nil fn")
	}
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
	lc, err := c.lockConfig(resource, lockOpts)
	if err != nil {
		return nil, h, err
	}
	h, err = h.forKeep(lc.ttl, clock.Drift(lc.ttl, c.cfg.driftFactor))
	return lockOpts, h, err
}

// Do acquires the lock on resource (waiting like Lock), runs fn while renewing
// the lease in the background, and releases the lock when fn returns or panics,
// on a context the caller's cancellation cannot cut short (a panic goes on once
// the lock is released).
//
// fn's context ends before the lock can no longer be trusted: when renewal has
// not reached a majority by the end of validity minus the safety margin, when
// ctx ends, or when the maximum hold time is reached. fn should return promptly
// then. fn is not called at all when its context has already ended (the lease
// ran out while Lock returned); Do then returns the cause. Do returns fn's
// error; when the lock was lost while fn ran, the error also matches
// ErrLockLost, and when the maximum hold time ended fn's context, ErrMaxHold.
// Renewal never re-takes a lock that lapsed. A nil ctx, a nil fn or an
// invalid option is an error matching ErrInvalid, before anything is sent. Its
// errors are one line each: fn's error and the loss are joined by "; ".
func (c *Client) Do(ctx context.Context, resource string, fn func(ctx context.Context) error, opts ...DoOption) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	lockOpts, h, err := c.doOptions(resource, fn, opts)
	if err != nil {
		return err
	}
	l, err := c.Lock(ctx, resource, lockOpts...)
	if err != nil {
		return err
	}
	return hold(ctx, []*Lock{l}, h, fn)
}

// Context returns a context that ends when the lock's validity does, minus the
// safety margin given with WithSafetyMargin (default none), following Extend;
// when the lock is released; or when parent ends. Its cause (context.Cause)
// matches ErrLockLost when the lease ran out or the lock was released. A lease
// that has already ended gives a context that has already ended. An invalid or
// inapplicable option, or a nil parent, ends it at once with a cause matching
// ErrInvalid. Call cancel to free its resources.
func (l *Lock) Context(parent context.Context, opts ...HoldOption) (context.Context, context.CancelFunc) {
	if err := checkContext(parent); err != nil {
		return endedContext(err)
	}
	ctx, cancel := context.WithCancelCause(parent)
	h, err := holdOptions(opts)
	if err == nil {
		h, err = h.forContext(l.ttl, clock.Drift(l.ttl, l.c.cfg.driftFactor))
	}
	if err != nil {
		cancel(err)
		return ctx, func() { cancel(context.Canceled) }
	}
	w := newLeaseWatch([]*Lock{l}, h.margin)
	if w.check(cancel) {
		go w.run(ctx, cancel)
	} else {
		w.close()
	}
	return ctx, func() { cancel(context.Canceled) }
}

// Keep renews the lock in the background until the returned context ends, and
// ends that context before the lock can no longer be trusted: when renewal has
// not reached a majority by the end of validity minus the safety margin (then
// context.Cause matches ErrLockLost), when parent ends, or at the maximum hold
// time (cause ErrMaxHold). A lease that has already ended gives a context that
// has already ended. Calling cancel stops the renewal; it does not release the
// lock. Options: WithRenewEvery (default TTL/3), WithSafetyMargin (default
// TTL/10), WithMaxHold (default DefaultMaxHold); an invalid one, or a nil
// parent, ends the context at once with a cause matching ErrInvalid. Do is
// Lock, then Keep around fn, then Release.
func (l *Lock) Keep(parent context.Context, opts ...HoldOption) (context.Context, context.CancelFunc) {
	if err := checkContext(parent); err != nil {
		return endedContext(err)
	}
	h, err := holdOptions(opts)
	if err == nil {
		h, err = h.forKeep(l.ttl, clock.Drift(l.ttl, l.c.cfg.driftFactor))
	}
	if err != nil {
		ctx, cancel := context.WithCancelCause(parent)
		cancel(err)
		return ctx, func() {}
	}
	return keep(parent, []*Lock{l}, h)
}

// errLeaseEnded is the cause of a context ended by a leaseWatch.
type errLeaseEnded struct{ resource string }

func (e *errLeaseEnded) Error() string {
	return fmt.Sprintf("%v: validity of %q ended before renewal reached a majority", ErrLockLost, e.resource)
}
func (e *errLeaseEnded) Unwrap() error { return ErrLockLost }

// leaseWatch ends a context (with a cause matching ErrLockLost) when the
// earliest validity among its locks, minus margin, passes, or when one of them
// is released. It is woken by every change of a lease (Extend, Release).
type leaseWatch struct {
	locks   []*Lock
	margin  time.Duration
	changed chan struct{}
	stops   []func()
}

func newLeaseWatch(locks []*Lock, margin time.Duration) *leaseWatch {
	w := &leaseWatch{locks: locks, margin: margin, changed: make(chan struct{}, 1)}
	for _, l := range locks {
		w.stops = append(w.stops, l.subscribe(w.changed))
	}
	return w
}

func (w *leaseWatch) close() {
	for _, stop := range w.stops {
		stop()
	}
}

// check cancels ctx if the lease is over, and otherwise returns how long it
// has left (ok true).
func (w *leaseWatch) left(cancel context.CancelCauseFunc) (left time.Duration, ok bool) {
	var earliest time.Time
	var who *Lock
	for _, l := range w.locks {
		until, released := l.lease()
		if released {
			cancel(fmt.Errorf("%w: %q was released", ErrLockLost, l.resource))
			return 0, false
		}
		if earliest.IsZero() || until.Before(earliest) {
			earliest, who = until, l
		}
	}
	c := w.locks[0].c
	left = earliest.Add(-w.margin).Sub(c.cfg.clock.Now())
	if left <= 0 {
		err := &errLeaseEnded{resource: who.resource}
		cancel(err)
		who.reportLost(err)
		return 0, false
	}
	return left, true
}

// check is left for a caller that needs only whether the lease goes on.
func (w *leaseWatch) check(cancel context.CancelCauseFunc) bool {
	_, ok := w.left(cancel)
	return ok
}

// run watches until the lease is over or ctx ends.
func (w *leaseWatch) run(ctx context.Context, cancel context.CancelCauseFunc) {
	defer w.close()
	for {
		left, ok := w.left(cancel)
		if !ok {
			return
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-w.changed:
			t.Stop()
		}
	}
}

// keep renews locks until the returned context ends; see Lock.Keep. The
// context has already ended when the lease has.
func keep(parent context.Context, locks []*Lock, h holdConfig) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ctx, cancelHold := context.WithTimeoutCause(ctx, h.maxHold, ErrMaxHold)
	w := newLeaseWatch(locks, h.margin)
	if !w.check(cancel) {
		w.close()
		return ctx, func() { cancel(context.Canceled); cancelHold() }
	}
	done := make(chan struct{}, 2)
	go func() { // renews; a refusal by a majority ends ctx at once
		defer func() { done <- struct{}{} }()
		renew(ctx, cancel, locks, h.renewEvery, h.margin)
	}()
	go func() { // ends ctx before the lease ends, if renewal did not move it
		defer func() { done <- struct{}{} }()
		w.run(ctx, cancel)
	}()
	return ctx, func() {
		cancel(context.Canceled)
		cancelHold()
		<-done
		<-done
	}
}

// hold runs fn under locks (already acquired), renewing them, and releases
// them, also when fn panics (the panic goes on afterwards).
func hold(ctx context.Context, locks []*Lock, h holdConfig, fn func(context.Context) error) error {
	fnCtx, stop := keep(ctx, locks, h)
	finished := false
	defer func() {
		if !finished { // fn panicked
			stop()
			_ = releaseAll(ctx, locks)
		}
	}()
	var fnErr error
	if fnCtx.Err() == nil {
		fnErr = fn(fnCtx)
	}
	cause := context.Cause(fnCtx)
	stop()
	relErr := releaseAll(ctx, locks)
	finished = true

	switch {
	case errors.Is(cause, ErrLockLost):
		return joinErrors(fnErr, cause)
	case fnErr != nil && errors.Is(cause, ErrMaxHold):
		return joinErrors(fnErr, ErrMaxHold)
	case fnErr != nil:
		return fnErr
	case errors.Is(relErr, ErrLockLost):
		return relErr // the lease lapsed at the very end: the work may not have been exclusive
	}
	return nil
}

// releaseAll releases locks in reverse order, on a context the caller's
// cancellation cannot cut short.
func releaseAll(ctx context.Context, locks []*Lock) error {
	c := locks[0].c
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.nodeTimeout)
	defer cancel()
	var errs error
	for i := len(locks) - 1; i >= 0; i-- {
		errs = joinErrors(errs, locks[i].Release(rctx))
	}
	return errs
}

// renew extends locks every interval until ctx ends. A refusal by a majority
// ends ctx with ErrLockLost at once; failures to reach the nodes are retried
// quickly, and the lease watch ends ctx if the validity runs out meanwhile.
func renew(ctx context.Context, cancel context.CancelCauseFunc, locks []*Lock, every, margin time.Duration) {
	c := locks[0].c
	wait := every
	for attempt := 0; ; {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		failed, lost := extendAll(ctx, locks, margin)
		if lost != nil {
			cancel(lost)
			return
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

// extendAll extends every lock once, each bounded by its validity minus margin
// (an extension that ends later is worthless). It returns the failures, and the
// first error that says a lock is lost (then it stops).
func extendAll(ctx context.Context, locks []*Lock, margin time.Duration) (failed, lost error) {
	c := locks[0].c
	for _, l := range locks {
		ectx, ecancel := context.WithTimeout(ctx, l.Until().Add(-margin).Sub(c.cfg.clock.Now()))
		err := l.Extend(ectx)
		ecancel()
		if err == nil {
			continue
		}
		if h := c.cfg.hooks.OnRenewalFailure; h != nil {
			h(RenewalFailureEvent{Resource: l.resource, Err: err})
		}
		if errors.Is(err, ErrLockLost) {
			c.log(ctx, slog.LevelWarn, "renewal refused: lock lost", l.key, l.token)
			return failed, err
		}
		failed = joinErrors(failed, err)
	}
	return failed, nil
}
