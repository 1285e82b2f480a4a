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
// cannot deadlock each other. Each acquisition waits like Lock. On failure, the
// resources already taken are released and the error is that of the resource
// that could not be taken.
func (c *Client) LockMulti(ctx context.Context, resources []string, opts ...LockOption) (*MultiLock, error) {
	if len(resources) == 0 {
		return nil, invalid("no resources")
	}
	sorted := slices.Clone(resources)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	m := &MultiLock{}
	for _, r := range sorted {
		l, err := c.Lock(ctx, r, opts...)
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.nodeTimeout)
			_ = m.Release(rctx)
			cancel()
			return nil, err
		}
		m.locks = append(m.locks, l)
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
	var errs error
	for _, l := range m.locks {
		errs = errors.Join(errs, l.Extend(ctx))
	}
	return errs
}

// Release releases every lock, in reverse order of acquisition.
func (m *MultiLock) Release(ctx context.Context) error {
	var errs error
	for i := len(m.locks) - 1; i >= 0; i-- {
		errs = errors.Join(errs, m.locks[i].Release(ctx))
	}
	return errs
}

// DoMulti is Do over several resources, taken all or nothing in sorted order
// like LockMulti, renewed together; fn's context ends when any of them can no
// longer be trusted.
func (c *Client) DoMulti(ctx context.Context, resources []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	if len(resources) == 0 {
		return invalid("no resources")
	}
	lc, err := c.lockConfig(resources[0], opts)
	if err != nil {
		return err
	}
	m, err := c.LockMulti(ctx, resources, opts...)
	if err != nil {
		return err
	}
	return hold(ctx, m.locks, lc, fn)
}
