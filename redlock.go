package redlock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Client takes locks on a fixed set of independent Redis nodes. It is safe for
// concurrent use.
type Client struct {
	nodes []node.Node
	all   []int // 0..len(nodes)-1: every node, for rounds sent to all
	cfg   config
	owned bool // Close closes the nodes (Dial created them)

	mu     sync.RWMutex // guards closed; held (read) while background work is started
	closed bool
	calls  sync.WaitGroup // Lock calls (and fair TryLocks) in progress: Close waits for them to leave the queues
	bg     sync.WaitGroup
	stop   chan struct{} // closed by Close: background probes end
	// cleanup bounds background node calls (cleanup releases): it ends a node
	// timeout after Close began, so that Close returns within the node timeout.
	cleanup       context.Context
	cancelCleanup context.CancelFunc

	qmu        sync.Mutex
	queues     map[string]*queue    // Lock's waiters per resource
	freeQueues []*queue             // empty queues, for reuse
	held       map[string]*Lock     // per resource, the locks taken through this client and not released, linked through Lock.heldNext (countHeld)
	heldSweep  int                  // len(held) at which a new entry sweeps it first (heldSweepMin)
	releasing  map[string]*inFlight // per resource: its last release by this client that returned before every node answered (awaitOwnRelease)
	nreleasing atomic.Int32         // len(releasing): the attempts' fast path

	health    []*nodeHealth        // per node: its breaker, and what Health reports (health.go)
	contended map[string]time.Time // resources refused lately: when (guarded by qmu)

	waiterGroup string           // fair mode: the waiters' ids' group, random (newWaiter)
	ticketNow   func() time.Time // a waiter's ticket when no node tells its clock (place.settle); time.Now
	realNow     func() time.Time // the real clock, whatever cfg.clock is (Lock.heldReal); time.Now
	nodeClock   nodeClock        // the nodes' clock, as last heard: new waiters' tickets
	waiterSeq   atomic.Int64     // fair mode: numbers this client's waiters
	lockSeq     atomic.Uint64    // numbers this client's locks (Lock.seq)

	now func() time.Time // cfg.clock.Now, made once: the rounds' latencies

	// pool runs the rounds' node calls on goroutines that outlive them (a
	// round of one node whose caller can only wait runs inline): a new
	// goroutine grew its stack by copying on every node call (issue 26).
	pool *quorum.Pool
}

// poolIdle is how long a goroutine of Client.pool waits for its next node
// call, at least (at most twice that), before it exits.
const poolIdle = 2 * time.Second

// New returns a Client over nodes, each an independent Redis instance (no
// replication between them). One node is single-instance mode with the same API.
// The nodes stay the caller's: Close does not close them. New refuses
// WithNodeOptions (ErrInvalid): the nodes are built already, so give their
// options to node.Dial or node.FromPool.
func New(nodes []node.Node, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.nodeOptsGiven {
		return nil, invalid("WithNodeOptions given to New: they apply to the nodes Dial creates, and New's nodes are built already, so they would be ignored " +
			"(a restart quarantine among them would be off): give them to node.Dial or node.FromPool")
	}
	return newClient(nodes, cfg)
}

// newClient is New with its options applied.
func newClient(nodes []node.Node, cfg config) (*Client, error) {
	if err := checkTTL(cfg.ttl, cfg.driftFactor); err != nil {
		return nil, err
	}
	if err := checkNodes(nodes); err != nil {
		return nil, err
	}
	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	c := &Client{nodes: append([]node.Node(nil), nodes...), all: all, cfg: cfg, queues: map[string]*queue{}, held: map[string]*Lock{}, heldSweep: heldSweepMin,
		stop:   make(chan struct{}),
		health: make([]*nodeHealth, len(nodes)), contended: map[string]time.Time{}, waiterGroup: newWaiterGroup(), ticketNow: time.Now, realNow: time.Now}
	c.cleanup, c.cancelCleanup = context.WithCancel(context.Background())
	c.now = cfg.clock.Now
	c.pool = quorum.NewPool(poolIdle)
	for i := range nodes {
		c.health[i] = newNodeHealth(cfg.breakerFailures, cfg.nodeTimeout)
	}
	if n := len(nodes); n%2 == 0 && cfg.logger != nil {
		cfg.logger.Warn("even number of nodes: it tolerates no more failed nodes than one node fewer would, and costs one more vote per call",
			"nodes", n, "majority", quorum.Majority(n), "tolerates", n-quorum.Majority(n))
	}
	return c, nil
}

func checkNodes(nodes []node.Node) error {
	if len(nodes) == 0 {
		return invalid("no nodes")
	}
	if len(nodes) > MaxNodes {
		return invalid("%d nodes is more than the maximum %d", len(nodes), MaxNodes)
	}
	seen := make(map[string]int, len(nodes))
	instances := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n == nil {
			return invalid("node %d is nil", i)
		}
		name := n.Name()
		if strings.TrimSpace(name) == "" {
			return invalid("node %d has an empty name", i)
		}
		if j, dup := seen[name]; dup {
			return invalid("duplicate node %s (positions %d and %d): each node must be an independent instance", name, j, i)
		}
		seen[name] = i
		if addr := instanceOf(name); addr != "" {
			if j, dup := instances[addr]; dup {
				return invalid("nodes %s and %s (positions %d and %d) are the same Redis instance %s: each node must be an independent instance",
					nodes[j].Name(), name, j, i, addr)
			}
			instances[addr] = i
		}
	}
	return nil
}

// instanceOf returns the host:port of a node name of the canonical form
// host:port/db (the name of a dialed node), or "".
func instanceOf(name string) string {
	host, db, ok := strings.Cut(name, "/")
	if !ok || !strings.Contains(host, ":") || db == "" {
		return ""
	}
	u, err := node.Parse("redis://" + name)
	if err != nil {
		return ""
	}
	return u.Addr()
}

// Dial returns a Client over the Redis instances at urls, one URL per independent
// node: redis://[user[:password]@]host[:port][/db] or rediss:// for TLS (the
// grammar of node.URL). Two URLs of one host:port are refused, whatever their
// databases: they are one instance, not independent nodes. It does not connect;
// nodes that are down are simply failed votes until they come back.
func Dial(urls []string, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if len(urls) == 0 {
		return nil, invalid("no node URLs")
	}
	if err := node.CheckDistinct(urls); err != nil {
		return nil, invalid("%w", err) // a bad URL, or two URLs of one instance (other dbs included)
	}
	nodes := make([]node.Node, 0, len(urls))
	closeAll := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	if d, set, err := node.TimeoutOf(cfg.nodeOpts...); err != nil {
		return nil, invalid("node options: %w", err)
	} else if set && d != cfg.nodeTimeout {
		return nil, invalid("node timeout given twice: node.WithTimeout(%v) in WithNodeOptions, and %v as the client's node timeout (WithNodeTimeout, or its default): give it once, with WithNodeTimeout", d, cfg.nodeTimeout)
	}
	// One set for the nodes of this client: two URLs of one instance are refused.
	nodeOpts := append([]node.Option{node.WithTimeout(cfg.nodeTimeout), node.WithInstances(node.NewInstances())}, cfg.nodeOpts...)
	for i, u := range urls {
		n, err := node.Dial(u, nodeOpts...)
		if err != nil {
			closeAll()
			return nil, invalid("node %d: %w", i, err)
		}
		nodes = append(nodes, n)
	}
	c, err := newClient(nodes, cfg)
	if err != nil {
		closeAll()
		return nil, err
	}
	c.owned = true
	return c, nil
}

// Close waits for background work (releases of stragglers) for at most the
// node timeout, and, for a Client made by Dial, closes the nodes: a paused or
// hung node does not hold it longer. A cleanup release that has not landed by
// then is given up; its key expires by itself within the TTL. Locks taken from
// the client cannot be extended or released afterwards (their calls return an
// error matching ErrClosed); Lock calls waiting for their next attempt return
// at once, their error wrapping ErrNotAcquired and ErrClosed, and Close returns
// once they have left the nodes' waiters' queues (within the same bound), so
// that no release wakes them after Close.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	// Calls already on the wire end within the node timeout by themselves;
	// the cleanups they lead to (a straggler's release, leaving the queues)
	// end with c.cleanup.
	giveUp := time.AfterFunc(c.cfg.nodeTimeout, c.cancelCleanup)
	c.calls.Wait() // they end at once (c.stop), and spawn their leaving of the queues
	c.bg.Wait()
	c.pool.Close()
	giveUp.Stop()
	c.cancelCleanup()
	if !c.owned {
		return nil
	}
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// begin marks the start of an operation that may start background work, so
// that Close waits for it; it fails once the client is closed. Unless it
// failed, the caller must call c.end when the operation is over.
func (c *Client) begin() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// end ends an operation that begin began.
func (c *Client) end() { c.mu.RUnlock() }

// enterCall registers a Lock call (or a fair TryLock): Close waits for it to
// end, and for the background work it started, its leaving of the queues
// included. It fails once the client is closed. Unless it failed, the caller
// must call c.leaveCall when the call is over.
func (c *Client) enterCall() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.calls.Add(1)
	return nil
}

// leaveCall ends a call that enterCall registered.
func (c *Client) leaveCall() { c.calls.Done() }

// spawn runs f in a goroutine that Close waits for. It is called only while an
// operation holds c.mu for reading, from a call registered by enterCall, or
// from a goroutine spawn already tracks.
func (c *Client) spawn(f func()) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
}

// Lock acquires the lock on resource, retrying with exponential backoff and full
// jitter until it succeeds or ctx ends. On failure the error wraps ErrNotAcquired
// and, when ctx ended, ctx.Err(). Lock does not wait for the readers of
// RLock: on a resource read with RLock, write with WLock. While a lock on
// resource taken through this Client is held (neither released, nor past
// its validity, nor found lost by Extend), Lock waits for that lock's
// Release, which wakes it, and makes no attempt meanwhile, unless it is
// queued on the nodes already (in fair mode, say): its attempts then keep
// its place there.
func (c *Client) Lock(ctx context.Context, resource string, opts ...LockOption) (*Lock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	lc, err := c.lockConfig(resource, opts)
	if err != nil {
		return nil, err
	}
	if h := c.cfg.hooks.OnAcquire; h != nil {
		start, attempts := c.cfg.clock.Now(), 0
		lc.attempts = &attempts
		l, err := c.lock(ctx, resource, lc)
		h(AcquireEvent{Resource: resource, Acquired: err == nil, Wait: c.cfg.clock.Now().Sub(start), Attempts: attempts, Err: err})
		return l, err
	}
	return c.lock(ctx, resource, lc)
}

// lock is Lock after its hook. A fair-mode waiter queues from its first
// attempt; a default-mode one once an attempt was refused, or from the first when the resource was refused lately (lockWait).
// Either leaves the queues when the call is over.
func (c *Client) lock(ctx context.Context, resource string, lc lockConfig) (*Lock, error) {
	if err := c.enterCall(); err != nil {
		return nil, err
	}
	defer c.leaveCall()
	if c.cfg.fair {
		lc.waiter = c.newWaiter(lc, c.nodeClock.ticket(time.Now()))
	}
	l, waiter, err := c.lockWait(ctx, resource, lc)
	if waiter != nil {
		c.leaveQueue(c.lockKey(resource), waiter, l != nil)
	}
	return l, err
}

// TryLock makes one attempt to acquire the lock on resource. On failure the error
// wraps ErrNotAcquired.
func (c *Client) TryLock(ctx context.Context, resource string, opts ...LockOption) (*Lock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	lc, err := c.lockConfig(resource, opts)
	if err != nil {
		return nil, err
	}
	if h := c.cfg.hooks.OnAcquire; h != nil {
		start := c.cfg.clock.Now()
		l, err := c.tryOnce(ctx, resource, lc)
		h(AcquireEvent{Resource: resource, Acquired: err == nil, Wait: c.cfg.clock.Now().Sub(start), Attempts: 1, Err: err})
		return l, err
	}
	return c.tryOnce(ctx, resource, lc)
}

// tryOnce is TryLock's attempt; in fair mode it queues for that attempt only.
func (c *Client) tryOnce(ctx context.Context, resource string, lc lockConfig) (*Lock, error) {
	lc.once = true
	if !c.cfg.fair {
		return c.try(ctx, resource, lc)
	}
	if err := c.enterCall(); err != nil {
		return nil, err
	}
	defer c.leaveCall()
	lc.waiter = c.newWaiter(lc, 0)
	l, err := c.try(ctx, resource, lc)
	c.leaveQueue(c.lockKey(resource), lc.waiter, l != nil)
	return l, err
}

func (c *Client) lockConfig(resource string, opts []LockOption) (lockConfig, error) {
	lc := lockConfig{ttl: c.cfg.ttl, retryMin: c.cfg.retryMin, retryMax: c.cfg.retryMax}
	if resource == "" {
		return lc, invalid("empty resource name")
	}
	if len(resource) > MaxResourceLen {
		return lc, invalid("resource name of %d bytes exceeds %d", len(resource), MaxResourceLen)
	}
	if len(opts) > 0 {
		var err error
		if lc, err = withLockOptions(lc, opts); err != nil {
			return lc, err
		}
	}
	if lc.ttl != c.cfg.ttl {
		if err := checkTTL(lc.ttl, c.cfg.driftFactor); err != nil {
			return lc, err
		}
	}
	return lc, nil
}

// withLockOptions returns lc with opts applied. (Apart from lockConfig, whose
// lc would otherwise be on the heap for every call, options or not.)
func withLockOptions(lc lockConfig, opts []LockOption) (lockConfig, error) {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyLock(&lc); err != nil {
			return lc, err
		}
	}
	return lc, nil
}

// lockKey returns the lock key of resource under the client's prefix.
func (c *Client) lockKey(resource string) string { return LockKey(c.cfg.prefix, resource) }

// try is one acquisition attempt, through the nodes' queues for a waiter.
func (c *Client) try(ctx context.Context, resource string, lc lockConfig) (*Lock, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	defer c.end()
	if err := ctx.Err(); err != nil { // nothing is sent once the caller gave up
		return nil, c.failed("acquire", resource, ErrNotAcquired, err)
	}
	// The counters are read with the grant only for a lock fenced at once,
	// through the queue too (until 6 December 2026 a waiter's attempts read
	// them always: two commands per contended acquisition; Lock.Fence reads
	// them inside the lock). A lock with a holder's record may be observed
	// (Observe, Leader): its release tells the key's channel, as an
	// election's does.
	l, err := c.newLock(resource, lc.ttl, lc.fence, lc.watched || lc.meta != nil)
	if err != nil {
		return nil, err
	}
	start := c.cfg.clock.Now()
	// Past TTL − drift the lease could have no validity left: stop waiting then,
	// even if the caller would wait longer, and release what was taken. A
	// split vote stops the wait earlier.
	split := &l.split
	rd := l.acquireRound(lc)
	var halt <-chan struct{}
	if !rd.runsInline(c) {
		// On one node the round's call returns before the wait starts, and
		// votes cannot split: no watch, its channel, timer and closure.
		halt = split.watch(l.ttl - clock.Drift(l.ttl, c.cfg.driftFactor))
	}
	defer split.stop()
	call := rd.start(ctx, c)
	o := call.WaitOr(ctx, halt)
	splitVote := !o.Decided && split.split(ctx)
	split.stop()
	now := c.cfg.clock.Now()
	elapsed := now.Sub(start)
	validity := clock.Validity(l.ttl, elapsed, c.cfg.driftFactor)
	if !o.Success || validity <= 0 {
		decided := time.Now() // the waiter's ticket: before the hook (notAcquired)
		c.attempted(resource, lc, o, elapsed, validity, false)
		return nil, c.notAcquired(ctx, l, lc, call, o, validity, splitVote, decided)
	}
	l.granted(call.Call, now, start.Add(l.ttl-clock.Drift(l.ttl, c.cfg.driftFactor)))
	c.log(ctx, slog.LevelDebug, "lock acquired", l.key, l.token, "agreed", o.Yes, "validity", validity)
	err = l.afterGrant(ctx, lc)
	c.attempted(resource, lc, o, elapsed, validity, err == nil)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// acquireRound is l's acquisition round: the plain acquire script, or, for
// a waiter, the queue's (acquireQueuedOn), whose replies also settle the
// waiter's place on nodes that answer late (leaveLate).
func (l *Lock) acquireRound(lc lockConfig) round[node.Acquired] {
	// The call, undo and reply callback are l's methods (acquireOps).
	rd := round[node.Acquired]{op: "acquire", timeout: l.ttl, ops: acquireOps{l}, inline: true}
	if w := lc.waiter; w != nil {
		rd.ops = nil
		rd.call = l.acquireQueuedOn(w)
		rd.undo = l.undoStraggler
		l.waiter = w.ID
		l.args.SetWaiter(w.ID)
		rd.onReply = func(j int, r quorum.Reply[node.Acquired]) {
			l.split.observe(j, r)
			l.heard(j, r)
			l.c.leaveLate(l.key, w, j, r)
		}
	}
	return rd
}

// afterGrant completes a granted lock as lc asks: its fencing token (or the
// grant is given back) and the holder's record (or the lock is abandoned).
func (l *Lock) afterGrant(ctx context.Context, lc lockConfig) error {
	if lc.fence {
		if err := l.fenceOrGiveBack(ctx); err != nil {
			return err
		}
	}
	if lc.meta != nil { // holder metadata (meta.go), after the term it carries
		if err := l.announce(ctx, *lc.meta); err != nil {
			l.abandon()
			return err
		}
	}
	return nil
}

// awaitSettled waits until every node of call answered, d has passed, or
// ctx ended.
func awaitSettled[T any](ctx context.Context, call *quorum.Call[T], d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-call.Settled():
	case <-t.C:
	case <-ctx.Done():
	}
}

// notAcquired gives a failed attempt of l up (what was taken is released),
// learns the nodes' clocks from its replies (after a short wait, once per
// node, for one not heard lately: nodeClock.unheard), settles the waiter's
// place from them, and returns the error. decided is when the attempt's
// outcome was known (time.Now, before its OnAttempt hook): its waiter's
// ticket is the nodes' clocks then, none earlier than its reply's reading
// (nodeClock.ticketOr).
//
// Not later: the hook, the wait above or a busy machine may let a caller
// that started after the outcome take its ticket first
// (TestFairWaitersBehindDoNotPoll, 1 or 2 runs in 8 when it was read here).
// Not earlier either, at the send time: every reading of a node's clock is
// noted after the node made it, so what the client knows of a node's clock
// at a time before the reply is early by the reply's way back, and a
// client whose replies come 20 ms late queued 20 ms early, ahead of waiters
// queued before it (TestGoroutineDuringOwnReleaseQueues, 3 runs in 40 with
// the send time). At the outcome, a node's clock counts as no earlier than
// the reading its reply carried (nodeClock.ticketOr): a caller that starts
// after this attempt's outcome gets a later ticket, however late this
// attempt's replies came back. Not when this attempt's request reached a
// node late: that node read its clock after the outcome, the ticket is late
// by as much, and a caller started meanwhile goes first (an adversarial
// review: N=4, requests to two nodes 6 ms late, 19 runs in 20). That costs
// this waiter its place, nobody else's; which way a reply was late cannot
// be told without one-way delays, and a ticket early by a late reply's way
// back took the places of waiters queued before it.
func (c *Client) notAcquired(ctx context.Context, l *Lock, lc lockConfig, call flight[node.Acquired], o quorum.Outcome[node.Acquired], validity time.Duration, splitVote bool, decided time.Time) *QuorumError {
	c.abandonAcquire(call.Call, l)
	replies := call.Replies()
	if !lc.once { // a one-shot attempt's refusal takes no ticket: no wait
		if d, wait := c.nodeClock.unheard(replies, call.r.idx, len(c.nodes), time.Now()); wait {
			awaitSettled(ctx, call.Call, d)
			replies = call.Replies()
		}
	}
	c.nodeClock.learn(replies, call.r.idx, len(c.nodes), time.Now())
	known, few := c.nodeClock.ticketOr(decided, replies, call.r.idx)
	if lc.waiter != nil {
		lc.waiter.settle(replies, quorum.Majority(len(c.nodes)), known, few, c.ticketNow)
	}
	undecided := errLeaseOutlived
	if splitVote {
		undecided = errSplitVote
	}
	qe := call.fail(ctx, l.resource, ErrNotAcquired, o, undecided)
	qe.ticket = known
	if o.Success {
		qe.Validity = validity
	}
	c.log(ctx, slog.LevelDebug, "lock not acquired", l.key, l.token, "agreed", o.Yes, "refused", o.No, "failed", o.Failed)
	return qe
}

// attempted counts an attempt for Lock's hook and reports it to OnAttempt:
// acquired is false for a grant given back (its fence or metadata failed).
func (c *Client) attempted(resource string, lc lockConfig, o quorum.Outcome[node.Acquired], elapsed, validity time.Duration, acquired bool) {
	if lc.attempts != nil {
		*lc.attempts++
	}
	if h := c.cfg.hooks.OnAttempt; h != nil {
		h(AttemptEvent{Resource: resource, Acquired: acquired, Agreed: o.Yes, Refused: o.No,
			Failed: o.Failed, Elapsed: elapsed, Validity: validity})
	}
}

// abandonAcquire gives up an acquisition: nodes that granted it (or whose
// answer is unknown) are released now, stragglers as they land (l.undoStraggler).
func (c *Client) abandonAcquire(call *quorum.Call[node.Acquired], l *Lock) {
	for i, r := range call.Abandon() {
		if r.Unsettled() {
			c.spawn(func() { l.undoStraggler(i, r) })
		}
	}
}

// releaseDetached releases key on node i on a context of its own, bounded by the
// node timeout: cleanup that the caller's cancellation cannot cut short. For a
// node whose breaker is open, the release waits (bounded, deduplicated) until
// the node answers again.
func (c *Client) releaseDetached(i int, key, token, waiter string, to tell, args *node.LockArgs) {
	if c.health[i].deferRelease(key, token, to) {
		return // a waiter still queued there is dropped when its lease runs out
	}
	c.releaseNow(i, key, token, waiter, to, args)
}

// releaseNow sends a cleanup release to node i through its breaker.
func (c *Client) releaseNow(i int, key, token, waiter string, to tell, args *node.LockArgs) {
	ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.nodeTimeout)
	defer cancel()
	err := ErrNodeDown
	if c.health[i].allow() { // through the breaker, as a round's call
		_, _, err = c.releaseOn(ctx, c.nodes[i], key, token, waiter, to, args)
		c.recordCall(i, err)
	}
	if errors.Is(err, ErrNodeDown) && c.health[i].deferRelease(key, token, to) {
		return
	}
	if err != nil {
		c.log(ctx, slog.LevelWarn, "cleanup release failed", key, token, "node", c.nodes[i].Name(), "err", err)
	}
}

// newToken returns 16 random bytes from crypto/rand, hex-encoded.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Digest returns a short, stable digest of a key or token, fit for logs: the first
// 8 hex digits of its SHA-256.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

func (c *Client) log(ctx context.Context, level slog.Level, msg, key, token string, args ...any) {
	l := c.cfg.logger
	if l == nil || !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, msg, append([]any{"key", Digest(key), "token", Digest(token)}, args...)...)
}
