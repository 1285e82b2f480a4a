package redlock

import (
	"context"
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
	// the round's start (a context per call cost four allocations a node);
	// freed once every call returned.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	opts := quorum.Options[T]{Need: r.need, Group: &c.bg, Now: c.cfg.clock.Now, Settled: cancel}
	if h := c.cfg.hooks.OnNodeReply; h != nil || r.onReply != nil {
		opts.OnReply = func(j int, rep quorum.Reply[T]) {
			if h != nil {
				h(NodeReplyEvent{Node: c.nodes[r.idx[j]].Name(), Op: r.op, OK: rep.Yes(), Err: rep.Err, Latency: rep.Latency})
			}
			if r.onReply != nil {
				r.onReply(j, rep)
			}
		}
	}
	if r.undo != nil {
		opts.Undo = func(j int, rep quorum.Reply[T]) { r.undo(r.idx[j], rep) }
	}
	call := quorum.Start(rctx, len(r.idx), func(ctx context.Context, j int) (T, bool, error) {
		return callNode(c, ctx, r.idx[j], r.call)
	}, opts)
	return flight[T]{Call: call, r: r, c: c}
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
		if rep.Done && rep.Err != nil {
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
