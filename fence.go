package redlock

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

var (
	errCounterMissing   = errors.New("fence counter missing on nodes that granted the lock while other nodes have one (nodes without it, wiped or never written, are not trusted until repaired; if fewer than a majority of the nodes have one, an operator must restore the counters: docs/fencing.md §6)")
	errCounterNotHeld   = errors.New("fence counter missing on nodes that granted the lock, while a majority of the nodes have one: too few of the nodes that granted are trusted (another grant can fence; a grant that holds the nodes without it repairs them)")
	errCounterUnheard   = errors.New("fence counter missing on nodes that granted the lock, and too few nodes answered to tell whether a majority of them have one (an attempt that hears from them can fence)")
	errCounterExhausted = errors.New("fence counter at its maximum")
	errLeaseOver        = errors.New("the lease ran out before the token was written back: nothing sent")
	errCounterFound     = errors.New("fence counter found at write-back on a node after the acquisition saw none anywhere (the resource was fenced meanwhile, or a node lost its counter): the first token is not taken")
)

// WithFence makes Lock and TryLock obtain the fencing token before returning, so
// that the acquisition fails (and is released) when the token cannot be had. By
// default the token is obtained lazily, on the first call to Lock.Fence.
func WithFence() LockOption {
	return lockOptionFunc(func(c *lockConfig) error { c.fence = true; return nil })
}

// Fence returns the lock's fencing token: a number that is larger for every later
// holder of the same resource, for a resource to refuse writes from a holder whose
// lease has run out (see the fence package). The first call writes the token back
// to a majority of the nodes, inside the lock (one round trip); later calls return
// it at once.
//
// Any two fenced grants of one resource get different tokens, and the later
// holder on a node they share gets the larger one, whatever the clocks, pauses or
// network delays, provided no node loses its counter (docs/fencing.md). A node
// that granted the lock without a counter while other nodes have one is not
// trusted for the write-back, and is repaired inside the lock. When no node
// reported a counter, the first token is created, inside the lock, only where
// no counter exists, and only if none does on any node that answers. A
// counter is never created outside the caller's own lock window.
//
// Fence fails with ErrLockLost when Until has passed when it starts (it then
// sends nothing; Until is checked once, before anything is sent, so a Fence
// that started in time may still be sending after Until), when the write-back
// cannot reach a majority of nodes that still hold the lock, or finds a
// counter where the acquisition saw none, or too few nodes that granted the
// lock have a counter while every node answered and fewer than a majority
// of them have one (see docs/fencing.md §6 for a resource left in that
// state); and with ErrUnavailable when ctx ends first, or when nodes that
// did not answer may have the counters a majority needs (a later Fence
// reads them again).
func (l *Lock) Fence(ctx context.Context) (uint64, error) {
	if err := checkContext(ctx); err != nil {
		return 0, err
	}
	if err := l.c.begin(); err != nil {
		return 0, err
	}
	defer l.c.end()
	return l.fenceEntered(ctx)
}

// fenceEntered is Fence for a caller that has begun an operation of the client.
func (l *Lock) fenceEntered(ctx context.Context) (uint64, error) {
	l.fenceMu.Lock()
	defer l.fenceMu.Unlock()
	if l.fence != 0 {
		return l.fence, nil
	}
	if l.isReleased() {
		return 0, l.c.failed("fence", l.resource, ErrLockLost, errReleased)
	}
	// Past Until the write-back may still find the keys (Until keeps a drift
	// margin), but the lease no longer protects anything (P3), and the plan
	// may be older than tokens taken since. Nothing is sent. Checked once,
	// here: a Fence that starts in time may still be sending after Until. (No
	// longer needed for the guarantee: every write that can create a counter
	// is checked against our lock key on the node, and raises never create
	// one; docs/fencing.md §2.4.)
	if !l.c.cfg.clock.Now().Before(l.Until()) {
		return 0, l.c.failed("fence", l.resource, ErrLockLost, errLeaseOver)
	}
	token, eligible, suspect, fresh, err := l.planFence(ctx)
	if err != nil {
		return 0, err
	}
	write := l.writeFence
	if fresh {
		write = l.createFence
	}
	if err := write(ctx, token, eligible, suspect); err != nil {
		return 0, err
	}
	l.fence = token
	l.c.log(ctx, slog.LevelDebug, "lock fenced", l.key, l.token, "fence", token)
	return token, nil
}

// planFence decides the token and the trusted nodes from the replies that
// carry the nodes' counters (counters: the acquisition's, or a read of them)
// so far; when they are not enough to trust a token (no counter seen: a fresh
// resource or wiped nodes; or too few trusted grants), it hears from every
// node first. fresh is true when no reply had a counter: the token (1) is then
// written back by createFence.
func (l *Lock) planFence(ctx context.Context) (token uint64, eligible, suspect []int, fresh bool, err error) {
	c := l.c
	src := l.counters(ctx)
	token, eligible, suspect, fresh, ok := l.fencePlan(src.Replies())
	if !ok {
		select {
		case <-src.Settled():
		case <-ctx.Done():
			return 0, nil, nil, false, c.failed("fence", l.resource, ErrUnavailable, ctx.Err())
		}
		token, eligible, suspect, fresh, _ = l.fencePlan(src.Replies())
	}
	if token == 0 {
		return 0, nil, nil, false, c.failed("fence", l.resource, ErrLockLost, errCounterExhausted)
	}
	for _, i := range suspect {
		c.log(ctx, slog.LevelWarn, "fence counter missing on a node that has the lock: node not trusted", l.key, l.token, "node", c.nodes[i].Name())
	}
	if m := quorum.Majority(len(c.nodes)); len(eligible) < m {
		kind, cause := ErrLockLost, errCounterMissing
		switch seen, unheard := counterVotes(src.Replies()); {
		case seen >= m:
			cause = errCounterNotHeld // this grant cannot fence, another can
		case seen+unheard >= m:
			// The nodes that failed may hold the counters a majority
			// needs: not a case for an operator (a node call timed out
			// under load, and Campaign gave up for good: issue 24). The
			// next Fence of this lock reads the counters again, rather
			// than plan from the same replies (Lock.reread).
			kind, cause = ErrUnavailable, errCounterUnheard
			l.reread = true
		}
		return 0, nil, nil, false, c.failed("fence", l.resource, kind, cause)
	}
	return token, eligible, suspect, fresh, nil
}

// counters returns the call whose replies carry the nodes' fence counters:
// the acquisition's, when it read them (Lock.counted), or else a read of the
// counters inside the lock (readfence.lua), one round trip, waited for until
// a majority of the nodes answered that they still hold the lock (or every
// node answered, or ctx ended). A counter read inside our window is as good
// as one read with the SET: every token an earlier holder wrote back on that
// node was written inside its own window, which ended before ours began
// (docs/fencing.md §4.2, L4). A reply's OK is then "holds the lock" rather than
// "granted it": only those nodes are trusted for the write-back.
func (l *Lock) counters(ctx context.Context) *quorum.Call[node.Acquired] {
	if l.counted && !l.reread {
		return l.acquire
	}
	read := round[node.Acquired]{op: "fence", call: func(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
		// Not before the lock's own acquisition on that node has answered:
		// Lock returns on a majority, and an acquisition still in flight
		// (not even sent, on a loaded machine) would land after the read,
		// which would then find the lock not held there and trust one node
		// too few (a Fence failing with ErrLockLost while the lock is held).
		select {
		case <-l.acquire.Answered(i): // made only when the call waits
		case <-ctx.Done():
			return node.Acquired{}, false, ctx.Err()
		}
		a, err := n.ReadFence(ctx, l.key, l.fenceKey, l.token)
		return a, a.OK, err
	}}.start(ctx, l.c)
	start := l.c.cfg.clock.Now()
	read.Wait(ctx)
	// The other nodes get as long again as the majority took: a node that
	// holds the lock without a counter is a suspect, repaired by the
	// write-back only if its reply is in the plan.
	l.c.grace(ctx, read.Settled(), start)
	return read.Call
}

// grace waits, after a round's majority came in since start, as long again
// for the round's other replies (settled), or until ctx ends; a slow or
// paused node is not waited for.
func (c *Client) grace(ctx context.Context, settled <-chan struct{}, start time.Time) {
	t := time.NewTimer(max(c.cfg.clock.Now().Sub(start), time.Millisecond))
	select {
	case <-settled:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
}

// writeFence is one round trip to every node but the suspects: the trusted
// nodes write token back inside the lock (only they count), and every other
// node's counter, if it has one, is raised to the token; a raise never
// creates a counter (it could land after that node lost its data and accepted
// larger tokens). Once the trusted write-back reached a majority, and only
// then, a second round repairs the suspects the same way, inside the lock,
// without counting: the token is above every token they accepted before they
// lost their counters (docs/fencing.md §6, the repair lemma, which needs our
// lock still held on a majority after the read that made them suspects), and
// a repair that lands late finds our window closed (any loss closes it) and
// writes nothing. A repair sent beside the trusted writes could land although
// they failed: with the counters read lazily (a read inside the window, not at
// the SET), a suspect's read can come after our keys on the trusted nodes
// expired and other holders fenced higher tokens there and on the suspect
// (TestFenceLazyRepairWaitsForTrustedMajority).
func (l *Lock) writeFence(ctx context.Context, token uint64, eligible, suspect []int) error {
	c := l.c
	trusted := make([]bool, len(c.nodes))
	for _, i := range eligible {
		trusted[i] = true
	}
	idx := c.all
	if len(suspect) > 0 {
		isSuspect := make([]bool, len(c.nodes))
		for _, i := range suspect {
			isSuspect[i] = true
		}
		idx = make([]int, 0, len(c.nodes)-len(suspect))
		for i := range c.nodes {
			if !isSuspect[i] {
				idx = append(idx, i)
			}
		}
	}
	start := c.cfg.clock.Now()
	call := round[struct{}]{op: "fence", idx: idx, call: func(ctx context.Context, i int, n node.Node) (struct{}, bool, error) {
		if trusted[i] {
			ok, err := n.WriteFence(ctx, l.key, l.fenceKey, l.token, token)
			return struct{}{}, ok, err
		}
		return struct{}{}, false, n.RaiseFence(ctx, l.fenceKey, token)
	}}.start(ctx, c)
	o := call.Wait(ctx)
	if !o.Success {
		kind := ErrLockLost
		if !o.Decided {
			kind = ErrUnavailable
		}
		return call.fail(ctx, l.resource, kind, o, nil)
	}
	if len(suspect) == 0 {
		// Give the other nodes as long again as the majority took, so that
		// the next grant finds their counters; a slow or paused node is not
		// waited for.
		c.grace(ctx, call.Settled(), start)
		return nil
	}
	// The value is true when the suspect was repaired.
	repair := round[bool]{op: "fence", idx: suspect, need: len(suspect), call: func(ctx context.Context, _ int, n node.Node) (bool, bool, error) {
		ok, err := n.WriteFence(ctx, l.key, l.fenceKey, l.token, token)
		return ok, ok, err
	}}.start(ctx, c)
	c.grace(ctx, call.Settled(), start)
	c.grace(ctx, repair.Settled(), start)
	for j, i := range suspect {
		if r := repair.Replies()[j]; r.Done && r.Err == nil && r.Value {
			c.log(ctx, slog.LevelWarn, "fence counter repaired", l.key, l.token, "node", c.nodes[i].Name())
		}
	}
	return nil
}

// createFence is writeFence for the first token of a resource, when no reply
// of the plan had a counter. That is a fresh resource only if no node had one at
// once, and the replies were read at different times (the acquisition's,
// stragglers included: possibly long before): another grant may have fenced the
// resource since, on nodes that then answered here without a counter, and one of
// which may since have lost it. Two rounds:
//
//  1. Every node is asked whether a counter exists (nothing is written), and
//     every node must answer or fail. A counter anywhere fails the Fence with
//     nothing written: the resource is not fresh, and the next grant reads it.
//  2. The trusted nodes create the counter, only where none exists and only
//     inside our lock window (a creation that lands late, after a loss of that
//     node, finds our window closed and writes nothing). The token is taken
//     once a majority created it, as in writeFence.
//
// In one round, the creations on the nodes without a counter went ahead while
// another node reported one: a failed first Fence then left counters at 1 on
// nodes that had accepted larger tokens before they lost their data. Of two
// grants that both planned a fresh resource, the second to reach a node that
// both trust finds the other's counter there unless the node lost it in between
// (docs/fencing.md §6).
func (l *Lock) createFence(ctx context.Context, token uint64, eligible, _ []int) error {
	c := l.c
	// The value is true when the node has a counter.
	check := round[bool]{op: "fence", call: func(ctx context.Context, i int, n node.Node) (bool, bool, error) {
		_, existed, err := n.CreateFence(ctx, l.key, l.fenceKey, "", token)
		return existed, err == nil && !existed, err
	}}.start(ctx, c)
	select {
	case <-check.Settled():
	case <-ctx.Done():
		return check.fail(ctx, l.resource, ErrUnavailable, check.Wait(ctx), nil)
	}
	o := check.Wait(ctx)
	o.Replies = check.Replies()
	o.Yes, o.No, o.Failed = 0, 0, 0
	for i, r := range o.Replies {
		switch {
		case r.Yes():
			o.Yes++
		case r.Err != nil:
			o.Failed++
		case r.Done:
			o.No++
			c.log(ctx, slog.LevelWarn, "fence counter found where the acquisition saw none: first token not taken", l.key, l.token, "node", c.nodes[i].Name())
		}
	}
	if o.No > 0 {
		qe := check.fail(ctx, l.resource, ErrLockLost, o, nil)
		qe.Cause = errCounterFound
		return qe
	}
	create := round[bool]{op: "fence", idx: eligible, call: func(ctx context.Context, i int, n node.Node) (bool, bool, error) {
		held, existed, err := n.CreateFence(ctx, l.key, l.fenceKey, l.token, token)
		return existed, held, err
	}}.start(ctx, c)
	o = create.Wait(ctx)
	if !o.Success {
		kind := ErrLockLost
		if !o.Decided {
			kind = ErrUnavailable
		}
		return create.fail(ctx, l.resource, kind, create.settle(ctx, o), nil)
	}
	return nil
}

// fencePlan computes, from the acquisition's replies, the token (1 + the largest
// counter any node reported; 0 if that would overflow), the nodes trusted for
// the write-back (they granted the lock, and have a counter unless no node has
// one), the suspects (they granted the lock without a counter while another
// node has one) and whether no node reported a counter (fresh). ok is false
// when the plan should wait for every node: no counter was seen, or too few
// nodes are trusted.
func (l *Lock) fencePlan(replies []quorum.Reply[node.Acquired]) (token uint64, eligible, suspect []int, fresh, ok bool) {
	present := anyCounter(replies)
	var maxF uint64
	for _, r := range replies {
		if r.Done && r.Err == nil {
			maxF = max(maxF, r.Value.Fence)
		}
	}
	if maxF < math.MaxUint64 {
		token = maxF + 1
	}
	for i, r := range replies {
		switch {
		case !r.Yes():
		case present && !r.Value.HasFence:
			suspect = append(suspect, i)
		default:
			eligible = append(eligible, i)
		}
	}
	return token, eligible, suspect, !present, present && len(eligible) >= quorum.Majority(len(replies))
}

// fenceOrGiveBack obtains the token of a lock just granted with WithFence,
// or gives the lock back. A grant that cannot fence while another could
// (errCounterNotHeld), or while nodes it did not hear may have the counters
// (errCounterUnheard), is like a refusal: the error matches ErrNotAcquired
// and Lock tries again; its waiter keeps its place after the first, and
// yields it after the second (waiting.attempt). Any other failure is
// returned as it is.
func (l *Lock) fenceOrGiveBack(ctx context.Context) error {
	_, err := l.fenceEntered(ctx)
	var qe *QuorumError
	switch {
	case err == nil:
		return nil
	case fenceGivenBack(err) && errors.As(err, &qe):
		l.abandonAndWait()
		return l.c.failed("acquire", l.resource, ErrNotAcquired, qe.Cause) // the plan's cause
	}
	l.abandon()
	return err
}

// fenceGivenBack reports whether err is the failure of an attempt granted
// and given back because it could not fence while another may
// (fenceOrGiveBack).
func fenceGivenBack(err error) bool {
	return errors.Is(err, errCounterNotHeld) || errors.Is(err, errCounterUnheard)
}

// counterVotes counts the nodes that answered the acquisition (granted or
// refused) or the read with a counter (seen), and those that did not
// answer (unheard: failed, or not yet), which may have one. With every node
// heard and fewer than a majority seen, no grant can be trusted until an
// operator restores the counters (at even N too: half is not a majority).
func counterVotes(replies []quorum.Reply[node.Acquired]) (seen, unheard int) {
	for _, r := range replies {
		switch {
		case !r.Done || r.Err != nil:
			unheard++
		case r.Value.HasFence:
			seen++
		}
	}
	return seen, unheard
}

func anyCounter(replies []quorum.Reply[node.Acquired]) bool {
	for _, r := range replies {
		if r.Done && r.Err == nil && r.Value.HasFence {
			return true
		}
	}
	return false
}
