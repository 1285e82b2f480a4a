package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors, matched with errors.Is. Per-node detail is reachable with
// errors.As on *QuorumError and *NodeError.
var (
	// ErrNotAcquired means the lock was not acquired: a majority refused, did not
	// answer in time, or answered too late for the lease to be worth anything.
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrLockLost means the lock is no longer held on a majority of nodes (it
	// expired or was taken over), so the holder must stop relying on it.
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrUnavailable means too few nodes answered to know the outcome of an
	// extension or release; the lock stays valid at most until its Until.
	ErrUnavailable = errors.New("redlock: nodes unavailable")
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("redlock: client closed")
	// ErrInvalid wraps every error about bad input: options, node lists,
	// resource names.
	ErrInvalid = errors.New("redlock: invalid argument")
	// ErrNodeDown is the error of a call that was not sent because the node's
	// circuit breaker is open: the node failed several calls in a row by timing out
	// or refusing connections, and a background probe has not yet seen it answer.
	// Such a node counts as failed in the quorum, at once instead of after the node
	// timeout.
	ErrNodeDown = errors.New("redlock: node down (failing fast until a probe succeeds)")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// NodeError is the failure of one node in a quorum operation.
type NodeError struct {
	// Node is the node's name (host:port/db for dialed nodes).
	Node string
	// Err is what went wrong (a timeout, a refused connection, a Redis error).
	Err error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %s: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError explains why a quorum operation (acquire, extend, release) failed.
// It wraps one of the sentinels (ErrNotAcquired, ErrLockLost, ErrUnavailable), the
// context's error if the context ended, and every NodeError.
type QuorumError struct {
	// Op is "acquire", "extend" or "release".
	Op string
	// Resource is the resource the lock protects.
	Resource string
	// Need is the number of agreeing nodes needed; Agreed, Refused and Failed
	// count the answers when the outcome was decided (or the context ended).
	Need, Agreed, Refused, Failed int
	// Nodes is the number of nodes asked.
	Nodes int
	// Validity is what was left of the lease when the majority agreed; it is
	// set (≤ 0) only when a majority agreed too late.
	Validity time.Duration
	// Errs holds one NodeError per failed node.
	Errs []*NodeError
	// Cause is the context's error when the context ended first, else nil.
	Cause error
	// Kind is the sentinel this error is: ErrNotAcquired, ErrLockLost or
	// ErrUnavailable.
	Kind error
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s: %d of %d nodes agreed (need %d), %d refused, %d failed",
		e.Kind, e.Op, e.Agreed, e.Nodes, e.Need, e.Refused, e.Failed)
	if e.Agreed >= e.Need {
		fmt.Fprintf(&b, ", but the lease had no validity left (%v)", e.Validity)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	for _, ne := range e.Errs {
		fmt.Fprintf(&b, "; %v", ne)
	}
	return b.String()
}

// Unwrap returns the sentinel, the context's error and the node errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, 2+len(e.Errs))
	errs = append(errs, e.Kind)
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	for _, ne := range e.Errs {
		errs = append(errs, ne)
	}
	return errs
}

var (
	errReleased      = errors.New("lock was released")
	errValidityEnded = errors.New("the lock's validity ended")
	errLeaseOutlived = errors.New("no majority answered before the lease would have run out")
)
