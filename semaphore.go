package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-go/redlock/quorum"
)

// A counting semaphore over the client's nodes, built of permit slots
// (docs/semaphore.md): a semaphore of n permits is n locks, slot i being the
// lock on resource SemaphoreSlot(name, i), each granted by a majority of the
// nodes as any lock is. A permit is any one slot. At most one holder per slot
// while its lease is valid (docs/safety.md, section 1.4) makes at most n
// holders, with the fault tolerance of a lock, N − ⌊N/2⌋ − 1 nodes, for every
// n. The other design, a counting quorum (each node admits n holders, a permit
// needs quorum.Counting(n, N) nodes), loses its fault tolerance as n grows:
// docs/semaphore.md has both, measured.

// MaxPermits is the largest number of permits a Semaphore accepts: each permit
// is a lock key on every node, and a waiting Acquire listens for the release
// of each.
const MaxPermits = 1024

// semaphoreSlotSep separates a semaphore's name from its slot number in the
// slots' resource names.
const semaphoreSlotSep = "#permit"

// SemaphoreSlot returns the resource whose lock is slot i of the semaphore
// called name: "semaphore:" + name + "#permit" + i. Its key on the nodes is
// LockKey(prefix, SemaphoreSlot(name, i)); each slot is a resource of its own,
// with its own hash tag (no script ever touches two slots). A lock taken on
// that resource with Lock takes the permit.
func SemaphoreSlot(name string, i int) string {
	return "semaphore:" + name + semaphoreSlotSep + strconv.Itoa(i)
}

// SemaphoreOption configures a Semaphore (Client.Semaphore) or one acquisition
// of a permit (Acquire, TryAcquire).
type SemaphoreOption interface{ applySemaphore(*semConfig) error }

type semOptionFunc func(*semConfig) error

func (f semOptionFunc) applySemaphore(c *semConfig) error { return f(c) }

type semConfig struct {
	ttl     time.Duration
	noFault bool // AllowNoFaultTolerance
	perCall bool // the options of one acquisition
}

// WithPermitTTL sets the lease of a permit (default: the client's TTL), on
// Client.Semaphore for every permit, or on Acquire and TryAcquire for one. It
// obeys the rules of WithTTL. Permits of different TTLs may be held at once:
// each slot is a key of its own, so a short lease never shortens another's.
func WithPermitTTL(d time.Duration) SemaphoreOption {
	return semOptionFunc(func(c *semConfig) error { c.ttl = d; return nil })
}

// AllowNoFaultTolerance lets Client.Semaphore build a semaphore over nodes
// that tolerate no failure: one or two nodes, where a permit needs every node.
// Without it, Semaphore refuses them (ErrInvalid). Acquire and TryAcquire
// refuse it (ErrInvalid): it applies to the semaphore.
func AllowNoFaultTolerance() SemaphoreOption {
	return semOptionFunc(func(c *semConfig) error {
		if c.perCall {
			return invalid("AllowNoFaultTolerance applies to Client.Semaphore, not to one acquisition")
		}
		c.noFault = true
		return nil
	})
}

// Semaphore is a counting semaphore of a fixed number of permits over the
// client's nodes: at most Permits holders at once, while their leases are
// valid, under the preconditions of a lock (docs/safety.md). Every user of one
// name must give the same number of permits and key prefix: two users of one
// name with different numbers exclude each other only up to the smaller one,
// and together admit as many holders as the larger one. It is safe for
// concurrent use.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	ttl     time.Duration
	slots   []string // SemaphoreSlot(name, i)
	keys    []string // the slots' lock keys

	mu     sync.Mutex
	held   []*Permit // by slot: the permit of this Semaphore that holds it, if any
	trying []bool    // by slot: a call of this Semaphore is trying it
	// busy, by slot: refused (held elsewhere) since its last release heard,
	// while watching; gen, by slot: counts the releases heard (an attempt
	// that began before one must not mark the slot busy).
	busy     []bool
	gen      []uint64
	watching bool          // the slots' releases are listened for (busy marks hold)
	waiters  []*semWaiter  // Acquire calls waiting, first come first
	next     int           // the waiter the next slot hint goes to (round robin)
	watch    *slotWatch    // the slots' release notifications, while someone waits
	watched  chan struct{} // closed once watch has started (its subscriptions confirmed, or given up)
}

// Semaphore returns the semaphore called name, of permits permits. It
// refuses (ErrInvalid) an empty name or one too long for its slots' resource
// names, permits below 1 or above MaxPermits, a bad WithPermitTTL, and a
// client of fewer than three nodes, which tolerates no failed node, unless
// AllowNoFaultTolerance is given. It does not talk to the nodes.
func (c *Client) Semaphore(name string, permits int, opts ...SemaphoreOption) (*Semaphore, error) {
	if name == "" {
		return nil, invalid("semaphore: empty name")
	}
	if permits < 1 || permits > MaxPermits {
		return nil, invalid("semaphore %q: %d permits: it must have 1 to %d", name, permits, MaxPermits)
	}
	if l := len(SemaphoreSlot(name, permits-1)); l > MaxResourceLen {
		return nil, invalid("semaphore name of %d bytes too long: its slots' resource names are %d bytes, above %d", len(name), l, MaxResourceLen)
	}
	cfg, err := c.semConfig(semConfig{ttl: c.cfg.ttl}, opts)
	if err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", name, err)
	}
	n := len(c.nodes)
	if tol := n - quorum.Majority(n); tol == 0 && !cfg.noFault {
		return nil, invalid("semaphore %q: %d node(s) tolerate no failure: a permit needs %d of %d nodes, so one node down stops every acquisition; use 3 or more nodes, or give AllowNoFaultTolerance()",
			name, n, quorum.Majority(n), n)
	}
	s := &Semaphore{c: c, name: name, permits: permits, ttl: cfg.ttl,
		slots: make([]string, permits), keys: make([]string, permits),
		held: make([]*Permit, permits), trying: make([]bool, permits),
		busy: make([]bool, permits), gen: make([]uint64, permits)}
	for i := range permits {
		s.slots[i] = SemaphoreSlot(name, i)
		s.keys[i] = c.lockKey(s.slots[i])
	}
	return s, nil
}

// semConfig applies opts to cfg and checks the TTL.
func (c *Client) semConfig(cfg semConfig, opts []SemaphoreOption) (semConfig, error) {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applySemaphore(&cfg); err != nil {
			return cfg, err
		}
	}
	if err := checkTTL(cfg.ttl, c.cfg.driftFactor); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits.
func (s *Semaphore) Permits() int { return s.permits }

// Permit is a held permit of a Semaphore: the lock on one of its slots. It is
// safe for concurrent use.
type Permit struct {
	s    *Semaphore
	slot int
	lock *Lock
}

// Slot returns the permit's slot, in [0, Permits).
func (p *Permit) Slot() int { return p.slot }

// TTL returns the lease requested from each node.
func (p *Permit) TTL() time.Duration { return p.lock.TTL() }

// Until returns the end of the permit's validity, net of the drift allowance,
// as Lock.Until does.
func (p *Permit) Until() time.Time { return p.lock.Until() }

// Extend renews the permit's lease, as Lock.Extend does (ErrLockLost once it
// is lost: its lease ran out and another holder may have its slot).
func (p *Permit) Extend(ctx context.Context) error { return p.lock.Extend(ctx) }

// Release gives the permit back, as Lock.Release does, and hands its slot to
// a waiting Acquire of this Semaphore at once. Releasing twice returns nil.
func (p *Permit) Release(ctx context.Context) error {
	err := p.lock.Release(ctx)
	s := p.s
	s.mu.Lock()
	if s.held[p.slot] == p {
		s.held[p.slot] = nil
	}
	s.hintLocked(p.slot)
	s.mu.Unlock()
	return err
}

// Context returns a context that ends with the permit's validity, as
// Lock.Context does.
func (p *Permit) Context(parent context.Context, opts ...HoldOption) (context.Context, context.CancelFunc) {
	return p.lock.Context(parent, opts...)
}

// Keep renews the permit in the background, as Lock.Keep does.
func (p *Permit) Keep(parent context.Context, opts ...HoldOption) (context.Context, context.CancelFunc) {
	return p.lock.Keep(parent, opts...)
}

// TryAcquire makes one pass over the slots, from a random one, and returns the
// first it takes; the error wraps ErrNotAcquired when none was free (or so
// many nodes failed that none could be taken). Slots held by permits of this
// Semaphore, or being tried by its other calls, are skipped: it makes at most
// Permits attempts, each a round to every node.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...SemaphoreOption) (*Permit, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	cfg, err := s.c.semConfig(semConfig{ttl: s.ttl, perCall: true}, opts)
	if err != nil {
		return nil, err
	}
	p, last, err := s.pass(ctx, cfg.ttl, false)
	if p != nil || err != nil {
		return p, err
	}
	return nil, s.notAcquired(last, nil)
}

// Acquire waits for a permit until it gets one or ctx ends (the error then
// wraps ErrNotAcquired and ctx.Err()), or the client is closed (ErrClosed).
// It makes one pass over the slots, then waits for a release of any slot,
// notified by the nodes once a majority of them released it (and at once for
// a release through this Semaphore), and tries the slot released; a vote
// split with other clients' waiters is tried again after a jittered backoff.
// While Acquire calls of this Semaphore wait, they listen for every slot's
// release, and its passes skip the slots refused since their last release
// heard; the first of them makes a full pass every 125 to 250 ms (half to all
// of the client's maximum retry backoff, jittered) in case a notification was
// lost (a lease that expired, a node that could not notify).
func (s *Semaphore) Acquire(ctx context.Context, opts ...SemaphoreOption) (*Permit, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	cfg, err := s.c.semConfig(semConfig{ttl: s.ttl, perCall: true}, opts)
	if err != nil {
		return nil, err
	}
	c := s.c
	if err := c.enterCall(); err != nil {
		return nil, err
	}
	defer c.leaveCall()
	p, last, err := s.pass(ctx, cfg.ttl, true)
	if p != nil || err != nil {
		return p, err
	}
	w := s.enter(ctx)
	defer s.leave(w)
	// A slot released while the subscriptions were made is missed by them:
	// one more pass (skipping the slots refused while listening: their
	// release would be heard). Then a full pass now and then, in case a
	// notification was lost, by the first waiter only (the others are
	// hinted at what it does not take).
	t := time.NewTimer(0)
	defer t.Stop()
	first := true
	splits := 0
	for {
		select {
		case <-ctx.Done():
			return nil, s.notAcquired(last, ctx.Err())
		case <-c.stop:
			return nil, s.notAcquired(last, ErrClosed)
		case slot := <-w.hint:
			p, q, err := s.tryHint(ctx, w, slot, cfg.ttl, &splits)
			if p != nil || err != nil {
				return p, err
			}
			if q != nil {
				last = q
			}
		case <-t.C:
			if first || s.first(w) {
				p, q, err := s.pass(ctx, cfg.ttl, first)
				if p != nil || err != nil {
					return p, err
				}
				if q != nil {
					last = q
				}
			}
			first = false
			t.Reset(semResync(c.cfg.retryMax))
		}
	}
}

// tryHint tries slot, which a release notification hinted at, for waiter
// w. It returns the permit, or the error that ends the call, or neither and
// the refusal (nil when the slot was not tried: held or tried here). Some
// nodes granted it: the vote split between the waiters of several clients
// hinted at the same release, and the slot is free again once they undo
// it; it is tried again after a jittered backoff (splits counts them).
func (s *Semaphore) tryHint(ctx context.Context, w *semWaiter, slot int, ttl time.Duration, splits *int) (*Permit, *QuorumError, error) {
	p, err := s.try(ctx, slot, ttl, false)
	if p != nil || err == nil {
		return p, nil, nil
	}
	var q *QuorumError
	if !errors.As(err, &q) {
		return nil, nil, err
	}
	if q.Agreed > 0 {
		w.retry(slot, backoff(s.c.cfg.retryMin, s.c.cfg.retryMax, *splits))
		*splits++
	}
	return nil, q, nil
}

// semResync returns the wait before a waiter's next pass over the slots, in
// case a release notification was lost: uniform in [max/2, max].
func semResync(max time.Duration) time.Duration {
	return max/2 + mrand.N(max/2+1)
}

// notAcquired returns the error of a failed acquisition: the last refusal,
// with cause, if any; without one, no slot was tried (each held or being
// taken through this Semaphore).
func (s *Semaphore) notAcquired(last *QuorumError, cause error) error {
	if last == nil {
		err := fmt.Errorf("%w: semaphore %q: each of its %d permits is held or being taken through this Semaphore", ErrNotAcquired, s.name, s.permits)
		if cause != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		return err
	}
	if cause != nil {
		last.Cause = cause
	}
	return fmt.Errorf("redlock: semaphore %q: no permit of %d acquired: %w", s.name, s.permits, last)
}

// pass tries every slot not held nor tried through this Semaphore (nor, with
// skipBusy, refused since its last release heard), from a random one,
// and returns the first permit taken; else the last refusal, or the error
// that ends the call (one that retrying cannot help: bad input, a closed
// client, or ctx ended).
func (s *Semaphore) pass(ctx context.Context, ttl time.Duration, skipBusy bool) (*Permit, *QuorumError, error) {
	var last *QuorumError
	start := mrand.N(s.permits)
	for k := range s.permits {
		if err := ctx.Err(); err != nil {
			return nil, last, s.notAcquired(last, err)
		}
		i := (start + k) % s.permits
		p, err := s.try(ctx, i, ttl, skipBusy)
		if p != nil {
			return p, nil, nil
		}
		if err == nil {
			continue // not tried: held or tried here
		}
		var q *QuorumError
		if !errors.As(err, &q) || q.Kind != ErrNotAcquired {
			return nil, last, err
		}
		last = q
	}
	return nil, last, nil
}

// claim marks slot i as tried by this Semaphore, unless a valid permit of it
// holds the slot (an attempt is bound to fail) or another of its calls is
// trying it (two attempts of one client on one slot can split the nodes'
// votes so that neither wins), and reports whether it did. Unless it
// failed, unclaim must follow.
func (s *Semaphore) claim(i int, skipBusy bool) (gen uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.trying[i] || skipBusy && s.busy[i] {
		return 0, false
	}
	if p := s.held[i]; p != nil {
		until, released := p.lock.lease()
		if !released && time.Now().Before(until) {
			return 0, false
		}
	}
	s.trying[i] = true
	return s.gen[i], true
}

// try makes one attempt on slot i, if claim allows it; a permit, or the
// attempt's error, or neither when it was not made. A slot refused for being
// held elsewhere while the releases are listened for is marked busy, unless
// a release of it was heard since the attempt began.
func (s *Semaphore) try(ctx context.Context, i int, ttl time.Duration, skipBusy bool) (*Permit, error) {
	gen, ok := s.claim(i, skipBusy)
	if !ok {
		return nil, nil
	}
	l, err := s.c.TryLock(ctx, s.slots[i], WithLockTTL(ttl), watchedKey) // its waiters watch the slot's key (slotWatch)
	var p *Permit
	var q *QuorumError
	if err == nil {
		p = &Permit{s: s, slot: i, lock: l}
	}
	// Held elsewhere: a majority refused, and none agreed (a vote split
	// between contenders leaves the slot free once they undo it).
	refused := err != nil && errors.As(err, &q) && q.Kind == ErrNotAcquired && q.Agreed == 0 && q.Refused >= q.Need
	s.mu.Lock()
	s.trying[i] = false
	if p != nil {
		s.held[i] = p
	}
	if refused && s.watching && s.gen[i] == gen {
		s.busy[i] = true
	}
	s.mu.Unlock()
	return p, err
}

// first reports whether w is the first of the waiting calls.
func (s *Semaphore) first(w *semWaiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters) > 0 && s.waiters[0] == w
}

// semWaiter is an Acquire call waiting for a release.
type semWaiter struct {
	hint chan int // slots released, to try
}

// retry hints w at slot i again after d.
func (w *semWaiter) retry(i int, d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case w.hint <- i:
		default:
		}
	})
}

// enter registers a waiter, and starts listening for the slots' releases
// if nobody listens yet; it returns once the subscriptions are made.
func (s *Semaphore) enter(ctx context.Context) *semWaiter {
	w := &semWaiter{hint: make(chan int, 4)}
	s.mu.Lock()
	s.waiters = append(s.waiters, w)
	if s.watch == nil {
		s.watch = &slotWatch{s: s, done: make(chan struct{}), noted: make([]uint128, s.permits)}
		s.watched = make(chan struct{})
		watch, watched := s.watch, s.watched
		s.mu.Unlock()
		watch.start(ctx)
		s.mu.Lock()
		if s.watch == watch {
			s.watching = true
		}
		s.mu.Unlock()
		close(watched)
		return w
	}
	watched := s.watched
	s.mu.Unlock()
	select {
	case <-watched:
	case <-ctx.Done():
	}
	return w
}

// leave unregisters w; the last waiter to leave stops the watch.
func (s *Semaphore) leave(w *semWaiter) {
	s.mu.Lock()
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	var stop *slotWatch
	if len(s.waiters) == 0 && s.watch != nil {
		stop, s.watch = s.watch, nil
		// Nothing listens any more: a busy mark would outlive the release
		// that should clear it.
		s.watching = false
		clear(s.busy)
	}
	watched := s.watched
	s.mu.Unlock()
	if stop != nil {
		<-watched // started: its stops are all registered
		stop.stop()
	}
}

// hintLocked records that slot i was released (it is no longer busy) and
// tells one waiter, the next in turn that has room. s.mu must be held.
func (s *Semaphore) hintLocked(i int) {
	s.busy[i] = false
	s.gen[i]++
	for range s.waiters {
		s.next %= len(s.waiters)
		w := s.waiters[s.next]
		s.next++
		select {
		case w.hint <- i:
			return
		default:
		}
	}
}

// uint128 is a set of node indexes (MaxNodes < 128).
type uint128 [2]uint64

func (u *uint128) add(i int)     { u[i/64] |= 1 << (i % 64) }
func (u uint128) has(i int) bool { return u[i/64]&(1<<(i%64)) != 0 }
func (u uint128) count() int     { return bits.OnesCount64(u[0]) + bits.OnesCount64(u[1]) }

// slotWatch listens for the release notifications of every slot on every
// node, and passes a slot on to a waiter once a majority of the nodes
// notified its release (or semGather after the first did): a waiter woken by
// the first node to release would be refused by those still on their way.
type slotWatch struct {
	s    *Semaphore
	done chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	stops []func()
	noted []uint128     // by slot: the nodes that notified a release since it was passed on
	late  []*time.Timer // by slot, lazily: passes it on if no majority notifies
}

// semGather bounds how long a slot's release waits for a majority of the
// nodes to notify it before waiters are told anyway.
const semGather = 2 * time.Millisecond

// start subscribes to every slot's release on every node, and returns once
// one node confirmed every subscription, every node answered, or the node
// timeout passed (unconfirmed subscriptions stay registered and may still
// deliver).
func (sw *slotWatch) start(ctx context.Context) {
	c := sw.s.c
	ctx, cancel := context.WithTimeout(ctx, c.cfg.nodeTimeout)
	defer cancel()
	sw.late = make([]*time.Timer, sw.s.permits)
	confirmed := make(chan bool, len(c.nodes))
	for j, n := range c.nodes {
		var mu sync.Mutex
		left, ok := sw.s.permits, true
		for i, key := range sw.s.keys {
			sw.wg.Add(1)
			go func() {
				defer sw.wg.Done()
				ch, stop, err := n.Watch(ctx, key)
				sw.addStop(stop)
				mu.Lock()
				ok = ok && err == nil && stop != nil
				if left--; left == 0 {
					confirmed <- ok
				}
				mu.Unlock()
				if ch == nil {
					return
				}
				for {
					select {
					case <-ch:
						sw.released(i, j)
					case <-sw.done:
						return
					}
				}
			}()
		}
	}
	for range c.nodes {
		select {
		case ok := <-confirmed:
			if ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (sw *slotWatch) addStop(stop func()) {
	if stop == nil {
		return
	}
	sw.mu.Lock()
	sw.stops = append(sw.stops, stop)
	sw.mu.Unlock()
}

// released notes node j's notification of slot i's release.
func (sw *slotWatch) released(i, j int) {
	need := quorum.Majority(len(sw.s.c.nodes))
	sw.mu.Lock()
	sw.noted[i].add(j)
	if sw.noted[i].count() < need {
		if sw.late[i] == nil {
			sw.late[i] = time.AfterFunc(semGather, func() { sw.passOn(i) })
		} else {
			sw.late[i].Reset(semGather)
		}
		sw.mu.Unlock()
		return
	}
	sw.mu.Unlock()
	sw.passOn(i)
}

// passOn forgets the nodes heard for slot i and hints a waiter at it.
func (sw *slotWatch) passOn(i int) {
	sw.mu.Lock()
	heard := sw.noted[i].count() > 0
	sw.noted[i] = uint128{}
	if t := sw.late[i]; t != nil {
		t.Stop()
	}
	sw.mu.Unlock()
	if !heard {
		return // passed on already
	}
	s := sw.s
	s.mu.Lock()
	s.hintLocked(i)
	s.mu.Unlock()
}

// stop ends the watch.
func (sw *slotWatch) stop() {
	close(sw.done)
	sw.wg.Wait()
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, t := range sw.late {
		if t != nil {
			t.Stop()
		}
	}
	for _, stop := range sw.stops {
		stop()
	}
}
