// Package quorum fans one operation out to N nodes in parallel and decides, as soon
// as it can, whether a majority said yes.
//
// The outcome is known the moment a majority has answered yes, or the moment so
// many have answered no or failed that a majority can no longer be reached. Nodes
// that have not answered by then (stragglers) keep running in the background,
// bounded by the context their operation was given. A Call can be abandoned (the
// attempt failed, or the lock it took was released): from then on every straggler
// that answers yes, or fails in a way that leaves its effect unknown, is undone.
package quorum

import (
	"context"
	"runtime/pprof"
	"sync"
	"time"
)

// Majority returns the smallest count that is more than half of n.
func Majority(n int) int { return n/2 + 1 }

// Reply is one node's answer.
type Reply[T any] struct {
	// Value is what the node returned.
	Value T
	// OK is true when the node voted yes.
	OK bool
	// Err is the failure, if the call failed; its effect on the node is unknown.
	Err error
	// Done is true once the node has answered or failed.
	Done bool
	// Latency is how long the call took.
	Latency time.Duration
}

// Yes reports whether the reply counts towards the majority.
func (r Reply[T]) Yes() bool { return r.Done && r.OK && r.Err == nil }

// Unsettled reports whether the node may hold an effect of the operation: it said
// yes, or it failed and nobody knows whether the command ran.
func (r Reply[T]) Unsettled() bool { return r.Done && (r.OK || r.Err != nil) }

// Op performs the operation on node i. It must return by ctx's deadline.
type Op[T any] func(ctx context.Context, i int) (value T, ok bool, err error)

// Runner is an operation and its callbacks in one value, for StartRunner:
// Run is the Op; Undo, OnReply and Settled are called where Options.Undo,
// Options.OnReply and Options.Settled would be (Undo for every Unsettled
// reply once the Call was abandoned, OnReply for every reply, Settled once
// every Run returned). One value instead of a closure each.
type Runner[T any] interface {
	Run(ctx context.Context, i int) (value T, ok bool, err error)
	Undo(i int, r Reply[T])
	OnReply(i int, r Reply[T])
	Settled()
}

// Options tune a Call. The zero value is usable.
type Options[T any] struct {
	// Need is how many yes votes decide success; 0 means Majority(n).
	Need int
	// Undo is called, in the node's own goroutine, for every node whose reply is
	// Unsettled once the Call has been abandoned. Nil means nothing to undo.
	Undo func(i int, r Reply[T])
	// OnReply, if set, is called in the node's own goroutine with every reply,
	// stragglers included, after the reply has been counted.
	OnReply func(i int, r Reply[T])
	// Go runs f in the background; nil means a plain goroutine. The root package
	// passes a tracked spawner so that Close can wait for stragglers.
	Go func(f func())
	// Group, if set and Go is nil, counts the nodes' goroutines: Add(1)
	// before each starts, Done when it ends (what a tracked Go would do, one
	// allocation per node cheaper).
	Group *sync.WaitGroup
	// Pool, if set and Go is nil, runs the nodes' operations on its
	// goroutines (counted in Group, if set, as plain ones would be).
	Pool *Pool
	// Settled, if set, is called once every node's operation has returned,
	// in the goroutine of the last (before its OnReply and Undo): to free
	// what the operations shared, such as their context.
	Settled func()
	// Now reads the clock for latencies; nil means time.Now.
	Now func() time.Time
	// Inline runs the operation of a lone node (n == 1) on the caller's
	// goroutine: Start returns once it answered or failed. For a caller
	// that would only wait for it, and whose wait could not end sooner (its
	// context cannot be cancelled, and the operation's deadline is as near
	// as its own): a goroutine and its hand-overs cost more than the round
	// trip on loopback (issue 26: single node).
	Inline bool
}

// Outcome is the state of a Call when it was decided (or when waiting stopped).
type Outcome[T any] struct {
	// Replies holds one entry per node; entries with Done false had not answered.
	Replies []Reply[T]
	// Yes, No and Failed count the answers: yes votes, no votes, failures.
	Yes, No, Failed int
	// Need is the number of yes votes that decides success.
	Need int
	// Decided is false when waiting stopped (context ended) before the outcome
	// was known.
	Decided bool
	// Success is true when at least Need nodes said yes.
	Success bool
}

// Call is an operation in flight on N nodes.
type Call[T any] struct {
	need    int
	runner  Runner[T] // StartRunner; nil for Start
	undo    func(int, Reply[T])
	onReply func(int, Reply[T])
	onDone  func()
	now     func() time.Time
	mu      sync.Mutex
	replies []Reply[T]
	spare   []Reply[T] // len(replies) more: the snapshot of the outcome
	yes     int
	no      int
	failed  int
	pending int
	outcome Outcome[T] // snapshot taken when decided
	decided chan struct{}
	settled chan struct{} // made by Settled, nil until asked for
	// answered holds, per node, the channel Answered made for it (nil until
	// one is asked for): closed with that node's reply.
	answered map[int]chan struct{}
	dropped  bool

	// For a Pool's goroutines (runNode): the Call's context, operation and
	// group.
	ctx   context.Context
	op    Op[T]
	group *sync.WaitGroup
}

// closed is a closed channel: Settled's once every node answered before it
// was asked for.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Start runs op on nodes 0..n-1 in parallel, each in its own goroutine, with ctx.
// n must be positive.
func Start[T any](ctx context.Context, n int, op Op[T], o Options[T]) *Call[T] {
	return newCall(ctx, n, op, nil, o)
}

// StartRunner is Start with the operation and its callbacks in r;
// o.Undo, o.OnReply and o.Settled are ignored.
func StartRunner[T any](ctx context.Context, n int, r Runner[T], o Options[T]) *Call[T] {
	o.Undo, o.OnReply, o.Settled = nil, nil, nil
	return newCall(ctx, n, nil, r, o)
}

func newCall[T any](ctx context.Context, n int, op Op[T], r Runner[T], o Options[T]) *Call[T] {
	c, buf := alloc[T](n)
	*c = Call[T]{
		need:    o.Need,
		runner:  r,
		undo:    o.Undo,
		onReply: o.OnReply,
		onDone:  o.Settled,
		now:     o.Now,
		replies: buf[:n:n],
		spare:   buf[n:],
		pending: n,
		decided: make(chan struct{}),
	}
	if c.need <= 0 {
		c.need = Majority(n)
	}
	if c.now == nil {
		c.now = time.Now
	}
	switch {
	case n == 1 && o.Inline:
		if o.Group != nil {
			o.Group.Add(1)
			c.runIn(o.Group, ctx, op, 0)
		} else {
			c.run(ctx, op, 0)
		}
	case o.Go != nil:
		for i := 0; i < n; i++ {
			o.Go(func() { c.run(ctx, op, i) })
		}
	case o.Pool != nil:
		c.ctx, c.op, c.group = ctx, op, o.Group
		if o.Group != nil {
			o.Group.Add(n)
		}
		for i := 0; i < n; i++ {
			o.Pool.run(task{c, i})
		}
	case o.Group != nil:
		for i := 0; i < n; i++ {
			o.Group.Add(1)
			go c.runIn(o.Group, ctx, op, i)
		}
	default:
		for i := 0; i < n; i++ {
			go c.run(ctx, op, i)
		}
	}
	return c
}

// alloc returns a Call and the 2n replies it needs (its replies and the
// outcome's snapshot), in one allocation up to 5 nodes.
func alloc[T any](n int) (*Call[T], []Reply[T]) {
	switch {
	case n <= 1:
		b := new(struct {
			c Call[T]
			r [2]Reply[T]
		})
		return &b.c, b.r[:2*n]
	case n <= 3:
		b := new(struct {
			c Call[T]
			r [6]Reply[T]
		})
		return &b.c, b.r[:2*n]
	case n <= 5:
		b := new(struct {
			c Call[T]
			r [10]Reply[T]
		})
		return &b.c, b.r[:2*n]
	}
	return new(Call[T]), make([]Reply[T], 2*n)
}

// runNode runs node i's operation on a Pool's goroutine, labelled for
// pprof as the Call's context says (pprof.Do puts a caller's labels there):
// a goroutine started for the operation would have inherited its caller's
// labels, and a Pool's goroutine carries those of whoever started it.
func (c *Call[T]) runNode(i int) {
	pprof.SetGoroutineLabels(c.ctx)
	if c.group != nil {
		c.runIn(c.group, c.ctx, c.op, i)
		return
	}
	c.run(c.ctx, c.op, i)
}

// runIn is run, counted in g.
func (c *Call[T]) runIn(g *sync.WaitGroup, ctx context.Context, op Op[T], i int) {
	defer g.Done()
	c.run(ctx, op, i)
}

func (c *Call[T]) run(ctx context.Context, op Op[T], i int) {
	start := c.now()
	var (
		v   T
		ok  bool
		err error
	)
	if c.runner != nil {
		v, ok, err = c.runner.Run(ctx, i)
	} else {
		v, ok, err = op(ctx, i)
	}
	r := Reply[T]{Value: v, OK: ok, Err: err, Done: true, Latency: c.now().Sub(start)}
	undo, last := c.record(i, r)
	switch {
	case !last:
	case c.runner != nil:
		c.runner.Settled()
	case c.onDone != nil:
		c.onDone()
	}

	switch {
	case c.runner != nil:
		c.runner.OnReply(i, r)
		if undo {
			c.runner.Undo(i, r)
		}
	default:
		if c.onReply != nil {
			c.onReply(i, r)
		}
		if undo {
			c.undo(i, r)
		}
	}
}

// record counts node i's reply r, decides the call once the outcome is
// known, and reports whether r must be undone (the call was abandoned and
// r is unsettled) and whether it was the last reply.
func (c *Call[T]) record(i int, r Reply[T]) (undo, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replies[i] = r
	if ch := c.answered[i]; ch != nil {
		close(ch)
	}
	switch {
	case r.Yes():
		c.yes++
	case r.Err != nil:
		c.failed++
	default:
		c.no++
	}
	c.pending--
	if !c.outcome.Decided {
		if c.yes >= c.need {
			c.decide(true)
		} else if c.yes+c.pending < c.need {
			c.decide(false)
		}
	}
	undo = c.dropped && (c.undo != nil || c.runner != nil) && r.Unsettled()
	last = c.pending == 0
	if last && c.settled != nil {
		close(c.settled)
	}
	return undo, last
}

// decide records the outcome; c.mu must be held.
func (c *Call[T]) decide(success bool) {
	c.outcome = Outcome[T]{
		Replies: append(c.spare[:0:len(c.spare)], c.replies...),
		Yes:     c.yes, No: c.no, Failed: c.failed,
		Need: c.need, Decided: true, Success: success,
	}
	c.spare = nil
	close(c.decided)
}

// snapshot copies the current state; c.mu must be held.
func (c *Call[T]) snapshot() Outcome[T] {
	return Outcome[T]{
		Replies: append([]Reply[T](nil), c.replies...),
		Yes:     c.yes, No: c.no, Failed: c.failed,
		Need: c.need,
	}
}

// Wait returns the outcome as soon as it is decided, or the state so far (Decided
// false) when ctx ends first.
func (c *Call[T]) Wait(ctx context.Context) Outcome[T] { return c.WaitOr(ctx, nil) }

// WaitOr is Wait that also stops waiting once stop is closed (nil: never).
func (c *Call[T]) WaitOr(ctx context.Context, stop <-chan struct{}) Outcome[T] {
	select {
	case <-c.decided:
		return c.outcome
	case <-ctx.Done():
	case <-stop:
	}
	select {
	case <-c.decided: // decided at the same moment: prefer the outcome
		return c.outcome
	default:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.snapshot()
	}
}

// Answered is closed once node i has answered or failed.
func (c *Call[T]) Answered(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replies[i].Done {
		return closed
	}
	if c.answered == nil {
		c.answered = map[int]chan struct{}{}
	}
	ch := c.answered[i]
	if ch == nil {
		ch = make(chan struct{})
		c.answered[i] = ch
	}
	return ch
}

// Unanswered returns the number of nodes that have not answered yet.
func (c *Call[T]) Unanswered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

// Settled is closed once every node has answered or failed.
func (c *Call[T]) Settled() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled == nil {
		if c.pending == 0 {
			return closed
		}
		c.settled = make(chan struct{})
	}
	return c.settled
}

// Replies returns the replies so far, including stragglers that answered after the
// outcome was decided.
func (c *Call[T]) Replies() []Reply[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Reply[T](nil), c.replies...)
}

// Reply returns node i's reply so far (Done false if it has not answered).
func (c *Call[T]) Reply(i int) Reply[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replies[i]
}

// AbandonDone is Abandon for a caller that needs only which nodes had
// answered: it returns their positions, all itself (which must hold 0..n-1)
// when every node had, and nil when the call was abandoned already.
func (c *Call[T]) AbandonDone(all []int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return nil
	}
	c.dropped = true
	if c.pending == 0 {
		return all
	}
	done := make([]int, 0, len(c.replies)-c.pending)
	for i, r := range c.replies {
		if r.Done {
			done = append(done, i)
		}
	}
	return done
}

// Abandon marks the call as abandoned: every node that answers from now on with an
// Unsettled reply is undone by Options.Undo. It returns the replies as they stood
// at that moment: nodes that had answered (Done) are the caller's to undo, the
// others undo themselves. Only the first call returns them; later calls return
// nil.
func (c *Call[T]) Abandon() []Reply[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return nil
	}
	c.dropped = true
	return append([]Reply[T](nil), c.replies...)
}
