package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// round is one operation sent to several nodes in parallel: an acquisition, an
// extension, a release, a fence write-back. It owns what all of them share:
//   - the node calls run on a context the caller cannot cancel, bounded by
//     the node timeout from the round's start, so that a command already on the wire lands (or is
//     undone) whatever the caller does, and a hung node costs one timeout;
//   - the calls and their stragglers are background work that Close waits for;
//   - every reply reaches the OnNodeReply hook;
//   - a failed outcome becomes a *QuorumError naming the nodes that failed.
type round[T any] struct {
	op string // "acquire", "extend", "release", "fence": in hooks and errors
	// idx are the positions in c.nodes of the nodes asked; nil means all.
	idx []int
	// need is the number of yes votes that decides success; 0 means a majority
	// of all the client's nodes.
	need int
	// timeout bounds each node call; 0 or more than the node timeout means the
	// node timeout.
	timeout time.Duration
	// call runs the operation on node i (a position in c.nodes).
	call func(ctx context.Context, i int, n node.Node) (T, bool, error)
	// undo, if set, is called for every node i whose reply is unsettled once
	// the round was abandoned (quorum.Call.Abandon).
	undo func(i int, r quorum.Reply[T])
	// onReply, if set, sees every reply (j is a position in idx), after the
	// OnNodeReply hook.
	onReply func(j int, r quorum.Reply[T])
	// ops, if set, replaces call, undo and onReply: one value for the three
	// (a closure each costs an allocation per round).
	ops roundOps[T]
	// inline lets a round on one node run its call on the caller's
	// goroutine (quorum.Options.Inline): the acquisition's and the
	// release's, whose callers only wait for it, and hold no lock its
	// callbacks take. The call then stops waiting when the caller's
	// context ends (node.DeadlineBound's Waiter).
	inline bool
}

// runsInline reports whether r, started by c, runs its one call on the
// caller's goroutine (quorum.Options.Inline), which has returned when start
// does. Not with an OnNodeReply hook: it is promised the node's goroutine.
func (r round[T]) runsInline(c *Client) bool {
	n := len(r.idx)
	if r.idx == nil {
		n = len(c.all)
	}
	return r.inline && n == 1 && c.cfg.hooks.OnNodeReply == nil
}

// roundOps is a round's call, undo and onReply as the methods of one value.
type roundOps[T any] interface {
	call(ctx context.Context, i int, n node.Node) (T, bool, error)
	undo(i int, r quorum.Reply[T])
	onReply(j int, r quorum.Reply[T])
}

// flight is a round in flight.
type flight[T any] struct {
	*quorum.Call[T]
	r round[T]
	c *Client
}

// start sends r. It must be called while an operation of c is in progress
// (between c.begin and its end), since it starts background work.
func (r round[T]) start(ctx context.Context, c *Client) flight[T] {
	if r.idx == nil {
		r.idx = c.all
	}
	if r.need == 0 {
		r.need = quorum.Majority(len(c.nodes))
	}
	if r.timeout <= 0 || r.timeout > c.cfg.nodeTimeout {
		r.timeout = c.cfg.nodeTimeout
	}
	// One deadline for the round's calls, each bounded by the timeout from
	// the round's start (a context per call cost four allocations a node):
	// the runner is the context, ended once every call returned.
	rr := &roundRunner[T]{r: r, c: c, hook: c.cfg.hooks.OnNodeReply,
		values: withoutCancel(ctx), deadline: time.Now().Add(r.timeout)}
	inline := r.runsInline(c)
	if inline && ctx.Done() != nil {
		rr.waiter = ctx
	}
	opts := quorum.Options[T]{Need: r.need, Group: &c.bg, Now: c.now, Inline: inline, Pool: c.pool}
	call := quorum.StartRunner(context.Context(rr), len(r.idx), rr, opts)
	return flight[T]{Call: call, r: r, c: c}
}

// roundRunner runs a round's calls and callbacks (quorum.Runner), and is
// their context: one allocation for all of them.
type roundRunner[T any] struct {
	r    round[T]
	c    *Client
	hook func(NodeReplyEvent)

	// The context of the calls: the values of the caller's, none of its
	// cancellation (context.WithoutCancel), the round's deadline
	// (context.WithTimeout), two allocations fewer than those two.
	values   context.Context
	deadline time.Time
	// waiter is the caller's context when the round's one call runs on
	// the caller's goroutine (inline), nil otherwise (Waiter).
	waiter context.Context
	mu     sync.Mutex
	// done is closed at the deadline (by timer), or once every call
	// returned. Both are made by the first call of Done only: a lone
	// command (node.DeadlineBound) never asks for them, and they were three
	// of an uncontended Lock+Release's allocations per round (issue 26).
	done  chan struct{}
	timer *time.Timer
	err   error
}

var _ node.DeadlineBound = (*roundRunner[int])(nil)

// withoutCancel is context.WithoutCancel, without its allocation when ctx
// can never be cancelled (context.Background, and contexts that only add
// values to it): Done returns nil.
func withoutCancel(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// Deadline implements context.Context.
func (rr *roundRunner[T]) Deadline() (time.Time, bool) { return rr.deadline, true }

// Done implements context.Context. The channel and its timer are made on
// the first call (a call already ended gets it closed).
func (rr *roundRunner[T]) Done() <-chan struct{} {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.done == nil {
		rr.expired(time.Now()) // before done exists: it closes nothing
		rr.done = make(chan struct{})
		if rr.err != nil {
			close(rr.done)
		} else {
			rr.timer = time.AfterFunc(time.Until(rr.deadline), rr.expire)
		}
	}
	return rr.done
}

// Err implements context.Context: past the deadline it is
// context.DeadlineExceeded whether or not Done was asked for.
func (rr *roundRunner[T]) Err() error {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.err == nil {
		rr.expired(time.Now())
	}
	return rr.err
}

// expired ends the context if now is past its deadline; rr.mu is held.
func (rr *roundRunner[T]) expired(now time.Time) {
	if rr.err == nil && !now.Before(rr.deadline) {
		rr.endLocked(context.DeadlineExceeded)
	}
}

// Value implements context.Context: the caller's values.
func (rr *roundRunner[T]) Value(key any) any { return rr.values.Value(key) }

func (rr *roundRunner[T]) String() string { return "redlock round context" }

// Waiter implements node.DeadlineBound: Done closes at the deadline, or
// once every call returned, never while one runs, so that a lone command on
// an idle connection is written and read on the call's goroutine; when that
// is the caller's goroutine (an inline round), the caller's context ends
// the wait.
func (rr *roundRunner[T]) Waiter() context.Context { return rr.waiter }

// errGaveUp is a node call's error when the caller of an inline round
// stopped waiting for it: nothing learnt about the node (it wraps
// context.Canceled, which the node's health record ignores), and its
// effect unknown (the command was sent: an acquisition is undone).
var errGaveUp = fmt.Errorf("the caller stopped waiting for the node's reply: %w", context.Canceled)

// end ends the context with err, once.
func (rr *roundRunner[T]) end(err error) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.endLocked(err)
}

// endLocked is end with rr.mu held.
func (rr *roundRunner[T]) endLocked(err error) {
	if rr.err != nil {
		return
	}
	rr.err = err
	if rr.done != nil {
		close(rr.done)
	}
	if rr.timer != nil {
		rr.timer.Stop()
	}
}

// expire ends the context at its deadline.
func (rr *roundRunner[T]) expire() { rr.end(context.DeadlineExceeded) }

// Settled ends the context once every call returned (quorum.Runner).
func (rr *roundRunner[T]) Settled() { rr.end(context.Canceled) }

// Run calls node r.idx[j] through its health record.
func (rr *roundRunner[T]) Run(ctx context.Context, j int) (T, bool, error) {
	i, c := rr.r.idx[j], rr.c
	if !c.health[i].allow() { // the breaker; the outcome recorded below
		var zero T
		return zero, false, ErrNodeDown
	}
	var (
		v   T
		ok  bool
		err error
	)
	if ops := rr.r.ops; ops != nil {
		v, ok, err = ops.call(ctx, i, c.nodes[i])
	} else {
		v, ok, err = rr.r.call(ctx, i, c.nodes[i])
	}
	err = rr.gaveUp(err)
	c.recordCall(i, err)
	return v, ok, err
}

// gaveUp returns errGaveUp for a call that failed once the caller of an
// inline round stopped waiting, err otherwise.
func (rr *roundRunner[T]) gaveUp(err error) error {
	if err != nil && rr.waiter != nil && rr.waiter.Err() != nil {
		return errGaveUp
	}
	return err
}

// OnReply reports the reply to the OnNodeReply hook, then to r.onReply.
func (rr *roundRunner[T]) OnReply(j int, rep quorum.Reply[T]) {
	if rr.hook != nil {
		rr.hook(NodeReplyEvent{Node: rr.c.nodes[rr.r.idx[j]].Name(), Op: rr.r.op, OK: rep.Yes(), Err: rep.Err, Latency: rep.Latency})
	}
	switch {
	case rr.r.ops != nil:
		rr.r.ops.onReply(j, rep)
	case rr.r.onReply != nil:
		rr.r.onReply(j, rep)
	}
}

// Undo undoes node r.idx[j]'s unsettled reply, if the round has an undo.
func (rr *roundRunner[T]) Undo(j int, rep quorum.Reply[T]) {
	switch {
	case rr.r.ops != nil:
		rr.r.ops.undo(rr.r.idx[j], rep)
	case rr.r.undo != nil:
		rr.r.undo(rr.r.idx[j], rep)
	}
}

// settle waits, when the round failed, until every node asked has answered
// (each is bounded by the node timeout) or ctx ends, and returns o with the
// counts of all their answers. A failure is decided as soon as the nodes asked
// can no longer make a majority, which may be after one refusal when fewer
// than all nodes were asked (Release asks only those whose acquisition
// landed): the error must still say whether a majority refused (the lock was
// lost) or too few answered.
func (f flight[T]) settle(ctx context.Context, o quorum.Outcome[T]) quorum.Outcome[T] {
	if o.Success {
		return o
	}
	select {
	case <-f.Settled():
	case <-ctx.Done():
		return o
	}
	o.Replies = f.Replies()
	o.Yes, o.No, o.Failed = 0, 0, 0
	for _, r := range o.Replies {
		switch {
		case !r.Done:
		case r.Yes():
			o.Yes++
		case r.Err != nil:
			o.Failed++
		default:
			o.No++
		}
	}
	return o
}

// refusedMajority reports whether so many nodes said no that a majority can no
// longer agree: the lock is not held by a majority.
func refusedMajority[T any](o quorum.Outcome[T], n int) bool { return o.No > n-o.Need }

// fail explains a failed outcome o of the round: kind is the sentinel; when
// the outcome was not decided, the cause is why waiting stopped (ctx's error, or
// undecided when ctx had not ended).
func (f flight[T]) fail(ctx context.Context, resource string, kind error, o quorum.Outcome[T], undecided error) *QuorumError {
	qe := &QuorumError{
		Op: f.r.op, Resource: resource, Kind: kind,
		Need: o.Need, Agreed: o.Yes, Refused: o.No, Failed: o.Failed, Nodes: len(f.c.nodes),
	}
	for j, rep := range o.Replies {
		switch {
		case !rep.Done || rep.Err == nil:
		case rep.Err == errGaveUp:
			// Not the node's failure: the caller stopped waiting (an
			// inline round), as if the node had not answered yet.
			qe.Failed--
			o.Decided = false
		default:
			qe.Errs = append(qe.Errs, &NodeError{Node: f.c.nodes[f.r.idx[j]].Name(), Err: rep.Err})
		}
	}
	if !o.Decided {
		qe.undecided = true
		qe.Cause = ctx.Err()
		if qe.Cause == nil {
			qe.Cause = undecided
		}
	}
	return qe
}

// failed is the error of an operation that failed before any node was asked.
func (c *Client) failed(op, resource string, kind, cause error) *QuorumError {
	return &QuorumError{Op: op, Resource: resource, Kind: kind,
		Need: quorum.Majority(len(c.nodes)), Nodes: len(c.nodes), Cause: cause, notSent: true}
}
