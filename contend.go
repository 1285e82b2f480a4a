package redlock

import (
	"context"
	"errors"
	"hash/fnv"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// Contention between clients. If a release woke the waiters of every client
// at once and each then sent its SET to every node, the nodes would pick
// different winners, nobody would reach a majority, and all would release and
// retry: a herd that splits the votes.
//
// On nodes with wake queues (node.WakeQueuer: every node this package dials)
// a waiter queues with a ticket on every node once refused, and a release
// wakes the first waiter only, reserving the lock for it for wokenReserve
// (fair.go, node/wakequeue.lua): one waiter tries per release.
//
// On other nodes (the adapter modules'), an attempt made because of another
// client's release is gated: it asks one node first, the gate, the same for
// every client (a hash of the key, skipping nodes this client saw fail), and
// asks the others only once the gate said yes. Exactly one waiter passes the
// gate; the others cost one command and go back to waiting. Safety is
// untouched: a grant is still SET NX on a majority within the validity,
// measured from the start of the attempt.
//
// What gating cannot prevent (clients disagreeing on the gate, a gate that
// does not answer, a first attempt racing a gated one) can still split the
// votes. A split is decided early: once a node has refused, the attempt waits
// only a short grace for the rest before it gives up, releases what it took
// and backs off by a random bounded delay; a paused node is not waited for.

const (
	// gateGrace is how long the other nodes wait for the gate's answer
	// before they are asked anyway (a slow or paused gate).
	gateGrace = 25 * time.Millisecond
	// splitGraceMin is the least time an attempt waits for its remaining
	// nodes once a node refused.
	splitGraceMin = 2 * time.Millisecond
	// suspectFor is how long a node that failed, or did not answer as a gate
	// within gateGrace, is skipped as a gate.
	suspectFor = time.Second
	// contendedFor is how long after a refusal a Lock call on the resource
	// makes even its first attempt through the gate.
	contendedFor = time.Second
	// maxContended bounds the resources remembered as contended.
	maxContended = 4096
)

// pace is how a waiting Lock call makes its attempts.
type pace struct {
	queued bool // the nodes' queues wake this waiter (fair mode, or the default mode's wake queue): no gate
	gated  bool // the next attempt asks the gate first
	quiet  int  // backoffs in a row that no release notification cut short
	lost   int  // failed or dropped gated attempts: the older the waiter, the sooner it goes
	soon   bool // queued: the last attempt was granted by some nodes only
	soons  int  // queued: attempts in a row granted by some nodes only
	// behind: queued, the last attempt was refused by a majority with
	// other waiters queued first (place.ahead)
	behind bool
	skip   bool // the next attempt is dropped: another client's waiter took the lock
	yield  bool // the first wait lets other clients' waiters go first (yieldFirst)
}

// gatherMax bounds how long a woken fair or queued waiter waits for a
// majority of the nodes to notify the release (releaseWatch.gather).
const gatherMax = time.Millisecond

// fairRetry is how soon a fair waiter whose attempt some nodes granted tries
// again: the others were most likely still receiving the previous holder's
// release, and the releases that would wake it have been sent already. After
// fairSoonMax such retries in a row, the nodes disagree for another reason
// (a head that is not trying): the waiter backs off as usual.
const (
	fairRetry   = time.Millisecond
	fairSoonMax = 3
)

// backoff is the wait before the retry after attempt.
func (p *pace) backoff(lc lockConfig, attempt int) time.Duration {
	if p.yield {
		p.yield = false
		return yieldWait
	}
	if p.soon {
		return mrand.N(fairRetry) + 1
	}
	if p.behind {
		// Other waiters go first, and each is woken in turn by a release:
		// this one will be too. The backoff only covers a lost wake-up
		// and renews the place (fairLease outlasts it).
		return lc.retryMax/2 + mrand.N(lc.retryMax/2+1)
	}
	return backoff(lc.retryMin, lc.retryMax, attempt)
}

// newPace starts a Lock call on resource: its first attempt goes through the
// gate when the resource was refused lately, as other clients' waiters may be
// going through the gate right now.
func (c *Client) newPace(resource string) pace {
	if c.cfg.fair {
		return pace{queued: true}
	}
	return pace{gated: c.contendedLately(resource)}
}

// farBehind reports whether fair waiter w had at least two waiters queued
// before it on a majority of the nodes at its last attempt: then a release
// while it subscribed woke the first of them, and it need not try again at
// once; missing its own wake-up would take two handoffs within that round
// trip, and costs one backoff.
func (p *pace) farBehind(w *place) bool { return p.queued && w != nil && w.ahead >= 2 }

// failed records a failed attempt on resource.
func (p *pace) failed(c *Client, resource string, qe *QuorumError, w *place) {
	p.soons++
	if !p.queued || qe.Agreed == 0 {
		p.soons = 0
	}
	p.soon = p.soons > 0 && p.soons <= fairSoonMax
	p.behind = p.queued && !p.soon && w != nil && w.ahead > 0
	if qe.Refused > 0 {
		c.sawContention(resource)
	}
	if p.gated {
		p.lost++
	}
}

// woken decides the next attempt after a wait that w ended. Another client's
// release wakes the waiters of every client: they go through the gate, after
// a stagger, and so does a retry after a backoff while the lock is being
// handed around. This client's own release wakes only its queue's head, which
// asks every node; so does a retry after two backoffs in a row without a
// release (a gate that kept a stale key cannot hold waiters back for long).
func (p *pace) woken(ctx context.Context, w wake, rw *releaseWatch) error {
	if p.queued {
		if w == wokeRemote {
			rw.gather(ctx, gatherMax)
		}
		return nil
	}
	switch w {
	case wokeRemote:
		rw.drain() // the same release, notified twice
		p.gated, p.quiet = true, 0
		taken, err := stagger(ctx, p.lost, rw.taken)
		if taken {
			p.lost++
			p.skip = true
		}
		return err
	case wokeLocal:
		p.gated, p.quiet = false, 0
	default:
		p.quiet++
		p.gated = p.quiet < 2
	}
	return nil
}

// staggerMax bounds the random delay before a woken waiter goes to the gate.
const staggerMax = time.Millisecond

// stagger waits before a woken waiter's gated attempt: a random delay below
// staggerMax/(1+lost), where lost counts the handoffs this Lock call let pass
// (its failed or dropped gated attempts). Waiters of all clients are woken by
// one release at the same moment, in the same order every time (their order
// of subscription): without the delay the first one would always win the
// gate, and the others would all spend a command on a refusal. Dividing by
// 1+lost lets waiters that let more handoffs pass go sooner, an approximation
// of first come, first served. When taken tells, meanwhile, that another
// waiter's grant was announced, the attempt would be refused: stagger reports
// it, and the waiter goes back to waiting without sending it.
func stagger(ctx context.Context, lost int, taken <-chan struct{}) (bool, error) {
	select {
	case <-taken: // announced already
		return true, nil
	default:
	}
	d := mrand.N(staggerMax) / time.Duration(1+lost)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false, nil
	case <-taken:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// errSplitVote is the cause of an attempt given up because the votes split:
// a node refused and the remaining ones did not decide within the grace.
var errSplitVote = errors.New("votes split between contenders: gave up early and backs off")

// errNotSent is what a round's call returns for a node it chose not to ask
// (the gate refused): the round counts a refusal, and the node's breaker
// learns nothing.
var errNotSent = errors.New("not sent")

// gateOf returns the gate node of key: the first node, from a position every
// client derives from the key alike, that is fit to be a gate (nodeHealth.gateOK:
// no failure in the last suspectFor, breaker closed, not quarantined; the
// first one if none is).
func (c *Client) gateOf(key string, now time.Time) int {
	f := fnv.New32a()
	_, _ = f.Write([]byte(key))
	n := len(c.nodes)
	start := int(f.Sum32() % uint32(n))
	for k := range n {
		if i := (start + k) % n; c.health[i].gateOK(now) {
			return i
		}
	}
	return start
}

// gate orders one gated attempt: the gate node is asked first, the others
// once it said yes (open), not at all once it said no (shut), and anyway once
// it did not answer within gateGrace.
type gate struct {
	c    *Client
	idx  int
	open chan struct{}
	shut chan struct{}
	once sync.Once
}

// gated wraps the acquisition's call on one node into a gated one.
// The gate node is asked through announce (a grant there is announced to other
// clients' waiters), the others through acquire.
func (c *Client) gated(key string, acquire, announce func(context.Context, int, node.Node) (node.Acquired, bool, error)) func(context.Context, int, node.Node) (node.Acquired, bool, error) {
	g := &gate{c: c, idx: c.gateOf(key, c.cfg.clock.Now()), open: make(chan struct{}), shut: make(chan struct{})}
	return func(ctx context.Context, i int, n node.Node) (node.Acquired, bool, error) {
		if i == g.idx {
			a, ok, err := announce(ctx, i, n)
			if ok || err != nil { // granted, or unknown: let the others decide
				g.once.Do(func() { close(g.open) })
			} else {
				g.once.Do(func() { close(g.shut) })
			}
			return a, ok, err
		}
		t := time.NewTimer(gateGrace)
		defer t.Stop()
		select {
		case <-g.open:
			return g.behindGate(ctx, i, n, acquire)
		case <-g.shut:
			return node.Acquired{}, false, errNotSent // held on the gate
		case <-t.C:
			g.c.health[g.idx].suspect(g.c.cfg.clock.Now())
		case <-ctx.Done():
			return node.Acquired{}, false, errNotSent
		}
		return acquire(ctx, i, n)
	}
}

// gateRetries are the pauses before asking again a node that refused an
// attempt that holds the gate.
var gateRetries = [...]time.Duration{250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond}

// behindGate asks node i once the gate said yes. A refusal then most likely
// comes from a release still on its way to node i (the previous holder's), or
// from a contender that did not go through the gate and is about to give up:
// node i is asked again a few times, briefly, within the same attempt (the
// validity still counts from its start).
func (g *gate) behindGate(ctx context.Context, i int, n node.Node, acquire func(context.Context, int, node.Node) (node.Acquired, bool, error)) (node.Acquired, bool, error) {
	a, ok, err := acquire(ctx, i, n)
	for _, d := range gateRetries {
		if ok || err != nil {
			break
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return a, ok, err
		}
		a, ok, err = acquire(ctx, i, n)
	}
	return a, ok, err
}

// splitWatch gives an attempt up early when its votes split: once a node
// refused, the remaining nodes have a grace (4× that refusal's latency, at
// least splitGraceMin) to decide the outcome.
type splitWatch struct {
	cancel context.CancelFunc
	once   sync.Once
	timer  atomic.Pointer[time.Timer]
}

// watchSplit returns a context that ends like ctx, or when a split was seen.
func watchSplit(ctx context.Context) (context.Context, *splitWatch) {
	ctx, cancel := context.WithCancel(ctx)
	return ctx, &splitWatch{cancel: cancel}
}

// observe is the round's reply callback.
func (s *splitWatch) observe(_ int, r quorum.Reply[node.Acquired]) {
	if !r.Done || r.OK || r.Err != nil {
		return
	}
	s.once.Do(func() {
		s.timer.Store(time.AfterFunc(max(splitGraceMin, 4*r.Latency), s.cancel))
	})
}

// stop ends the watch.
func (s *splitWatch) stop() {
	s.once.Do(func() {}) // no timer starts after this
	if t := s.timer.Load(); t != nil {
		t.Stop()
	}
	s.cancel()
}

// contention is what a client remembers of a resource that other clients
// contend for.
type contention struct {
	refused  time.Time // last refusal of one of this client's attempts
	released time.Time // last release of the resource by this client, while contended
}

// sawContention records that an attempt on resource was refused by a node
// (another client holds it, or is taking it).
func (c *Client) sawContention(resource string) {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if e := c.contended[resource]; e != nil {
		e.refused = now
		return
	}
	if len(c.contended) >= maxContended {
		for r, e := range c.contended {
			if now.Sub(e.refused) > contendedFor {
				delete(c.contended, r)
			}
		}
		if len(c.contended) >= maxContended {
			return // too many resources contended at once: they go ungated
		}
	}
	c.contended[resource] = &contention{refused: now}
}

// contendedLately reports whether an attempt on resource was refused less
// than contendedFor ago.
func (c *Client) contendedLately(resource string) bool {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	e := c.contended[resource]
	return e != nil && now.Sub(e.refused) <= contendedFor
}

const (
	// yieldFor is how long after releasing a contended resource a client's
	// next Lock on it lets the waiters of other clients go first.
	yieldFor = 50 * time.Millisecond
	// yieldWait is how long such a Lock waits for the next release before it
	// makes its first attempt anyway (nobody was waiting after all).
	yieldWait = 10 * time.Millisecond
)

// releasedContendedLocked records a release of resource by this client; c.qmu
// must be held.
func (c *Client) releasedContendedLocked(resource string, now time.Time) {
	if e := c.contended[resource]; e != nil && now.Sub(e.refused) <= contendedFor {
		e.released = now
	}
}

// yieldFirst reports whether this client released resource, contended, less
// than yieldFor ago: its next Lock then waits for the next release instead of
// taking the lock from under the waiters of other clients (who have waited
// longer). Should nobody be waiting after all, the wait is yieldWait.
func (c *Client) yieldFirst(resource string) bool {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	e := c.contended[resource]
	return e != nil && !e.released.IsZero() && now.Sub(e.released) <= yieldFor
}
