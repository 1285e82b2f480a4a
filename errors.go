package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/node"
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
	// ErrClosed means the Client was closed: no operation starts on it any
	// more.
	ErrClosed = errors.New("redlock: client closed")
	// ErrInvalid wraps every error about bad input: options, node lists,
	// resource names, a nil context.
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

// errNilContext is the error of an entry point called with a nil context.
var errNilContext = invalid("nil context (use context.Background() or context.TODO())")

// checkContext returns an error matching ErrInvalid when ctx is nil: entry
// points call it first, so that a nil context is an error, not a panic.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	return nil
}

// endedContext returns a context that has already ended with cause err, for
// the entry points that return a context (Lock.Context, Lock.Keep).
func endedContext(err error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return ctx, func() {}
}

// joinErrors is errors.Join on one line: the messages are separated by "; "
// instead of newlines, so that the error fits a log line. Nil errors are
// dropped; it returns nil when all are.
func joinErrors(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if j, ok := err.(*lineJoin); ok {
			kept = append(kept, j.errs...)
			continue
		}
		kept = append(kept, err)
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &lineJoin{errs: kept}
}

// lineJoin is the error of joinErrors.
type lineJoin struct{ errs []error }

func (e *lineJoin) Error() string {
	parts := make([]string, len(e.errs))
	for i, err := range e.errs {
		parts[i] = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return strings.Join(parts, "; ")
}

func (e *lineJoin) Unwrap() []error { return e.errs }

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

// QuorumError explains why a quorum operation (acquire, extend, release, fence)
// failed. It wraps one of the sentinels (ErrNotAcquired, ErrLockLost,
// ErrUnavailable), the context's error if the context ended, and every
// NodeError. Its message says what each node answered, for example
//
//	redlock: lock not acquired: acquire on 3 nodes (2 needed): 1 agreed, 1 refused (held), 1 failed (timeout); node 10.0.0.3:6379/0: ...
type QuorumError struct {
	// Op is the operation that failed: "acquire" (Lock, TryLock, Do, LockMulti,
	// DoMulti), "extend" (Extend, and the renewals of Do and Keep), "release"
	// (Release), "fence" (Fence, and WithFence's write-back of the token),
	// "metadata" (WithMetadata, Campaign's record, Proclaim) or "leader"
	// (Leader, Observe's reads).
	Op string
	// Resource is the resource the lock protects.
	Resource string
	// Need is the number of agreeing nodes needed; Agreed, Refused and Failed
	// count the answers when the outcome was decided (or the context ended).
	// A refusal is a node's "no": for an acquisition the lock is held there
	// (by another owner, or for another waiter); for the other operations the
	// lock is no longer held there. A failure is an error: a timeout, a
	// connection refused, an authentication error, a quarantine, a node down.
	// Nodes that had not answered then are in none of the three.
	Need, Agreed, Refused, Failed int
	// Nodes is the number of nodes of the client.
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

	notSent   bool // the operation failed before any node was asked (Cause says why)
	undecided bool // waiting stopped before the outcome was known
	// ticket: for a refused acquisition, the nodes' clocks (µs) when its
	// outcome was known, as the client knows them (nodeClock.ticketOr; 0:
	// none): the ticket of the waiter the refused Lock call becomes
	// (waiting.attempt).
	ticket int64
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s", e.Kind, e.Op)
	if e.notSent {
		fmt.Fprintf(&b, ": not sent to the %d nodes", e.Nodes)
	} else {
		fmt.Fprintf(&b, " on %d nodes (%d needed): %d agreed", e.Nodes, e.Need, e.Agreed)
		if e.Refused > 0 {
			fmt.Fprintf(&b, ", %d refused (%s)", e.Refused, e.refusal())
		}
		if e.Failed > 0 {
			fmt.Fprintf(&b, ", %d failed", e.Failed)
			if kinds := e.failureKinds(); kinds != "" {
				fmt.Fprintf(&b, " (%s)", kinds)
			}
		}
		if rest := e.Nodes - e.Agreed - e.Refused - e.Failed; rest > 0 {
			if e.undecided {
				fmt.Fprintf(&b, ", %d did not answer in time", rest)
			} else {
				fmt.Fprintf(&b, ", %d not waited for (the outcome was known without them)", rest)
			}
		}
	}
	if e.Agreed >= e.Need && e.Need > 0 {
		fmt.Fprintf(&b, ", but the lease had no validity left (%v)", e.Validity)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	for _, ne := range e.Errs {
		fmt.Fprintf(&b, "; %v", ne)
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

// refusal says what a refusal means for the operation.
func (e *QuorumError) refusal() string {
	if e.Op == "acquire" {
		return "held"
	}
	return "not held"
}

// failureKinds names the kinds of the node failures, in order of first
// appearance: "timeout", "timeout, connection refused".
func (e *QuorumError) failureKinds() string {
	var kinds []string
	for _, ne := range e.Errs {
		k := failureKind(ne.Err)
		if !containsString(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return strings.Join(kinds, ", ")
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// failureKind names, in a word or two, why a node call failed, for
// QuorumError's message: "node down" (ErrNodeDown), "quarantined"
// (node.ErrQuarantined), "same instance" (node.ErrSameInstance), "replica"
// (node.ErrReplica), "timeout", "connection refused", "authentication"
// (NOAUTH, WRONGPASS), "permission denied" (NOPERM), "connection lost",
// "network error", or "error" for anything else (a Redis error reply, say).
func failureKind(err error) string {
	var ne net.Error
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case errors.Is(err, ErrNodeDown):
		return "node down"
	case errors.Is(err, node.ErrQuarantined):
		return "quarantined"
	case errors.Is(err, node.ErrSameInstance):
		return "same instance"
	case errors.Is(err, node.ErrReplica):
		return "replica"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid password"):
		return "authentication"
	case isPermission(msg):
		return "permission denied"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "connection lost"
	case errors.As(err, &ne):
		return "network error"
	}
	return "error"
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

// isPermission reports whether a node's error text is an ACL's refusal: of
// a command (NOPERM), or of a command a script called (Redis 7 words it
// "ERR The user executing the script can't run this command").
func isPermission(text string) bool {
	return strings.Contains(text, "NOPERM") || strings.Contains(text, "user executing the script can't run")
}
