package redlock

import (
	"sync"
	"time"
)

// Hooks observe what a Client does, for metrics and tracing. Every field is
// optional and a nil field costs nothing. Hooks run synchronously in the
// goroutine doing the work (node replies in the node's goroutine): keep them
// fast and safe for concurrent use. Events carry the resource name as given by
// the application; an exporter should map it to a bounded label set.
type Hooks struct {
	// OnAttempt follows every acquisition attempt (one per TryLock, one per
	// try inside Lock).
	OnAttempt func(AttemptEvent)
	// OnAcquire follows every Lock or TryLock call, with its outcome.
	OnAcquire func(AcquireEvent)
	// OnNodeReply follows every node's answer to every operation, stragglers
	// included.
	OnNodeReply func(NodeReplyEvent)
	// OnExtend follows every Extend (including Do's renewals).
	OnExtend func(ExtendEvent)
	// OnRenewalFailure follows a failed renewal in Do (retried until the
	// validity runs out, unless the lock is known to be lost).
	OnRenewalFailure func(RenewalFailureEvent)
	// OnLost reports that a lock can no longer be trusted: Extend found it gone,
	// or the validity watched by Do or Lock.Context ran out. Read locks too:
	// ReadLock.Extend found the reader gone, or the validity watched by
	// ReadLock.Keep ran out. Once per lock, whichever finds it first.
	OnLost func(LostEvent)
	// OnRelease follows every Release, with how long the lock was held.
	OnRelease func(ReleaseEvent)
	// OnNodeHealth follows every change of a node's health state (see
	// Client.Health), once per change: a node failing, quarantined, its
	// breaker opening, and each back to ok. A node whose calls alternate
	// between failing and answering changes state each time.
	OnNodeHealth func(NodeHealthEvent)
}

// WithHooks sets the client's hooks.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) error { c.hooks = h; return nil })
}

// AttemptEvent describes one acquisition attempt.
type AttemptEvent struct {
	Resource string
	// Acquired is true when the attempt took the lock and kept it: false for
	// a grant given back because its fencing token or holder metadata could
	// not be written (Agreed then counts a majority; docs/fencing.md §2.6).
	// OnAttempt follows such a grant once it is given back.
	Acquired bool
	// Agreed, Refused and Failed count the node answers when it was decided.
	Agreed, Refused, Failed int
	// Elapsed is how long the attempt took; Validity what was left of the
	// lease (meaningful when a majority agreed).
	Elapsed, Validity time.Duration
}

// AcquireEvent describes a Lock or TryLock call.
type AcquireEvent struct {
	Resource string
	Acquired bool
	// Wait is the time from the call to its return; Attempts the number of
	// attempts made.
	Wait     time.Duration
	Attempts int
	Err      error
}

// NodeReplyEvent describes one node's answer.
type NodeReplyEvent struct {
	// Node is the node's name; Op one of "acquire", "extend", "release", "fence",
	// "metadata", "leader" (QuorumError.Op).
	Node, Op string
	// OK is true when the node agreed.
	OK      bool
	Err     error
	Latency time.Duration
}

// ExtendEvent describes an Extend call.
type ExtendEvent struct {
	Resource string
	OK       bool
	Err      error
}

// RenewalFailureEvent describes a failed renewal in Do.
type RenewalFailureEvent struct {
	Resource string
	Err      error
}

// LostEvent describes a lock that can no longer be trusted.
type LostEvent struct {
	Resource string
	Err      error
}

// ReleaseEvent describes a Release call.
type ReleaseEvent struct {
	Resource string
	// Held is the time from acquisition to release.
	Held time.Duration
	Err  error
}

// lostOnce fires OnLost for resource unless *told says it fired already,
// and sets *told; mu guards told (the lock's own mutex).
func (c *Client) lostOnce(mu *sync.Mutex, told *bool, resource string, err error) {
	mu.Lock()
	already := *told
	*told = true
	mu.Unlock()
	if !already {
		c.lost(resource, err)
	}
}

func (c *Client) lost(resource string, err error) {
	if h := c.cfg.hooks.OnLost; h != nil {
		h(LostEvent{Resource: resource, Err: err})
	}
}
