package redlock

import (
	"context"
	"errors"
	"slices"
	"time"
)

// MultiLock holds several resources at once.
type MultiLock struct {
	locks []*Lock // in acquisition order (sorted by resource)
}

// LockMulti acquires every resource, all or nothing, in one global order (sorted
// by name, duplicates removed) so that two callers asking for overlapping sets
// cannot deadlock each other. Each acquisition waits like Lock, but no longer
// than the locks already taken stay valid: when one of them would lapse first,
// they are all released and LockMulti starts over (after a backoff). So the
// locks it returns are all valid (Until in the future). On failure, the
// resources already taken are released and the error is that of the resource
// that could not be taken.
func (c *Client) LockMulti(ctx context.Context, resources []string, opts ...LockOption) (*MultiLock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		return nil, invalid("no resources")
	}
	sorted := slices.Clone(resources)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for _, r := range sorted {
		if _, err := c.lockConfig(r, opts); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		m, err := c.lockAll(ctx, sorted, opts)
		if !errors.Is(err, errHeldLapsed) {
			return m, err
		}
		t := time.NewTimer(backoff(c.cfg.retryMin, c.cfg.retryMax, attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.failed("acquire", sorted[0], ErrNotAcquired, ctx.Err())
		case <-t.C:
		}
	}
}

// errHeldLapsed says that a lock LockMulti had taken would have lapsed before
// the next one was acquired.
var errHeldLapsed = errors.New("a lock taken earlier would lapse before the next one was acquired")

// lockAll takes resources in order, each wait bounded by the validity of the
// locks already held; it fails with errHeldLapsed when that bound was reached.
func (c *Client) lockAll(ctx context.Context, resources []string, opts []LockOption) (*MultiLock, error) {
	m := &MultiLock{}
	for _, r := range resources {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if len(m.locks) > 0 {
			wctx, cancel = context.WithTimeout(ctx, m.Until().Sub(c.cfg.clock.Now()))
		}
		l, err := c.Lock(wctx, r, opts...)
		cancel()
		if err == nil {
			m.locks = append(m.locks, l)
			continue
		}
		if len(m.locks) > 0 {
			_ = releaseAll(ctx, m.locks)
		}
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, errHeldLapsed
		}
		return nil, err
	}
	if !c.cfg.clock.Now().Before(m.Until()) {
		_ = releaseAll(ctx, m.locks)
		return nil, errHeldLapsed
	}
	return m, nil
}

// Locks returns the individual locks, sorted by resource.
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.locks) }

// Until returns the earliest end of validity among the locks.
func (m *MultiLock) Until() time.Time {
	var u time.Time
	for _, l := range m.locks {
		if t := l.Until(); u.IsZero() || t.Before(u) {
			u = t
		}
	}
	return u
}

// Extend extends every lock; it returns the errors of those that failed.
func (m *MultiLock) Extend(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	var errs error
	for _, l := range m.locks {
		errs = joinErrors(errs, l.Extend(ctx))
	}
	return errs
}

// Release releases every lock, in reverse order of acquisition.
func (m *MultiLock) Release(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	var errs error
	for i := len(m.locks) - 1; i >= 0; i-- {
		errs = joinErrors(errs, m.locks[i].Release(ctx))
	}
	return errs
}

// DoMulti is Do over several resources, taken all or nothing in sorted order
// like LockMulti, renewed together; fn's context ends when any of them can no
// longer be trusted. fn is not called when that has already happened.
func (c *Client) DoMulti(ctx context.Context, resources []string, fn func(ctx context.Context) error, opts ...DoOption) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if len(resources) == 0 {
		return invalid("no resources")
	}
	lockOpts, h, err := c.doOptions(resources[0], fn, opts)
	if err != nil {
		return err
	}
	m, err := c.LockMulti(ctx, resources, lockOpts...)
	if err != nil {
		return err
	}
	return hold(ctx, m.locks, h, fn)
}
