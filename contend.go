package redlock

import (
	"context"
	"errors"
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
// So a Lock call refused once becomes a waiter, queued with a ticket on every
// node (every node keeps the queue: node.Queuer), a queued waiter may take
// the lock only at the head of the queue, and a release wakes the head only
// (fair.go, node/fairacquire.lua): one waiter tries per release, and every
// node grants it to the same one. Safety is untouched: a grant is still SET
// NX on a majority within the validity, measured from the start of the
// attempt.
//
// What the queue cannot prevent (a newcomer's first attempt in the default
// mode racing the head's) can still split the votes. A split is decided early: once a node
// has refused, the attempt waits only a short grace for the rest before it
// gives up, releases what it took and backs off by a random bounded delay; a
// paused node is not waited for.

const (
	// splitGraceMin is the least time an attempt waits for its remaining
	// nodes once a node refused.
	splitGraceMin = 2 * time.Millisecond
	// contendedFor is how long after a refusal a Lock call on the resource
	// queues from its first attempt.
	contendedFor = time.Second
	// maxContended bounds the resources remembered as contended.
	maxContended = 4096
)

// pace is how a waiting Lock call spaces its attempts.
type pace struct {
	soon  bool // queued: the last attempt was granted by some nodes only
	soons int  // queued: attempts in a row granted by some nodes only
	// behind: queued, the last attempt was refused by a majority with
	// other waiters queued first (ahead: how many, place.ahead)
	behind bool
	ahead  int
}

// pollPerAhead is how long a waiter expects each waiter queued before it to
// take: one far behind polls (for a lost wake-up, and to renew its place)
// about as often as its turn may come, not every backoff; hundreds of waiters
// polling every 125–250 ms kept the nodes too busy to hand the lock over.
const pollPerAhead = 5 * time.Millisecond

// gatherMax bounds how long a woken waiter waits for a majority of the nodes
// to notify the release (releaseWatch.gather).
const gatherMax = time.Millisecond

// fairRetry is how soon a waiter whose attempt some nodes granted tries
// again: the others were most likely still receiving the previous holder's
// release, and the releases that would wake it have been sent already. After
// fairSoonMax such retries in a row, the nodes disagree for another reason
// (a head that is not trying): the waiter backs off as usual.
const (
	fairRetry   = time.Millisecond
	fairSoonMax = 3
)

// backoff returns the wait before retry number attempt: uniform in [0, bound) with
// bound = min(max, min·2^attempt).
func backoff(min, max time.Duration, attempt int) time.Duration {
	bound := max
	if attempt < 30 {
		if b := min << attempt; b > 0 && b < max {
			bound = b
		}
	}
	return mrand.N(bound) + 1 // never zero: a retry always yields
}

// backoff is the wait before the retry after attempt.
func (p *pace) backoff(lc lockConfig, attempt int) time.Duration {
	if p.soon {
		return mrand.N(fairRetry) + 1
	}
	if p.behind {
		// Other waiters go first, and each is woken in turn by a release:
		// this one will be too. The backoff only covers a lost wake-up
		// and renews the place, so it must end within fairLease: the
		// further behind, the longer, up to half the lease.
		d := lc.retryMax / 2
		if far := time.Duration(p.ahead) * pollPerAhead; far > d {
			d = min(far, fairLease(lc)/4)
		}
		return d + mrand.N(d+1)
	}
	return backoff(lc.retryMin, lc.retryMax, attempt)
}

// farBehind reports whether waiter w had at least two waiters queued before
// it on a majority of the nodes at its last attempt: then a release while it
// subscribed woke the first of them, and it need not try again at once;
// missing its own wake-up would take two handoffs within that round trip,
// and costs one backoff.
func (p *pace) farBehind(w *place) bool { return w != nil && w.ahead >= 2 }

// failed records a failed attempt on resource by waiter w (nil: not a
// waiter yet).
func (p *pace) failed(c *Client, resource string, qe *QuorumError, w *place) {
	p.soons++
	if w == nil || qe.Agreed == 0 {
		p.soons = 0
	}
	p.soon = p.soons > 0 && p.soons <= fairSoonMax
	p.behind = w != nil && !p.soon && w.ahead > 0
	if p.behind {
		p.ahead = w.ahead
	}
	if qe.Refused > 0 {
		c.sawContention(resource)
	}
}

// errSplitVote is the cause of an attempt given up because the votes split:
// a node refused and the remaining ones did not decide within the grace.
var errSplitVote = errors.New("votes split between contenders: gave up early and backs off")

// splitWatch gives an attempt up early when its votes split: once a node
// refused, the remaining nodes have a grace (4× that refusal's latency, at
// least splitGraceMin) to decide the outcome. It also ends the wait at its
// deadline: its halt channel is closed by whichever comes first.
type splitWatch struct {
	halt     chan struct{}
	deadline time.Time
	atEnd    *time.Timer // closes halt at the deadline
	mu       sync.Mutex
	ended    bool // halt is closed
	byGrace  bool // halt was closed by a split
	once     sync.Once
	timer    atomic.Pointer[time.Timer] // the grace's
}

// watch starts s (once): its halt channel is closed after d, or when a
// split was seen (split tells which).
func (s *splitWatch) watch(d time.Duration) <-chan struct{} {
	s.halt = make(chan struct{})
	s.deadline = time.Now().Add(d)
	s.mu.Lock() // the timer may fire at once
	s.atEnd = time.AfterFunc(d, s.expire)
	s.mu.Unlock()
	return s.halt
}

func (s *splitWatch) expire() { s.end(false) }

func (s *splitWatch) splitNow() { s.end(true) }

// end closes halt, once.
func (s *splitWatch) end(split bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended, s.byGrace = true, split
		close(s.halt)
	}
}

// split reports whether the wait ended on a split: halt was closed by the
// grace, while ctx had not ended and the deadline had not passed.
func (s *splitWatch) split(ctx context.Context) bool {
	s.mu.Lock()
	byGrace := s.byGrace
	s.mu.Unlock()
	return byGrace && ctx.Err() == nil && time.Now().Before(s.deadline)
}

// observe is the round's reply callback.
func (s *splitWatch) observe(_ int, r quorum.Reply[node.Acquired]) {
	if s.halt == nil || !r.Done || r.OK || r.Err != nil {
		return // not watching (an inline round: try), or not a refusal
	}
	s.once.Do(func() {
		s.timer.Store(time.AfterFunc(max(splitGraceMin, 4*r.Latency), s.splitNow))
	})
}

// stop ends the watch.
func (s *splitWatch) stop() {
	s.once.Do(func() {}) // no timer starts after this
	if t := s.timer.Load(); t != nil {
		t.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.atEnd != nil {
		s.atEnd.Stop()
	}
}

// sawContention records that an attempt on resource was refused by a node
// (another client holds it, or is taking it).
func (c *Client) sawContention(resource string) {
	now := c.cfg.clock.Now()
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if _, ok := c.contended[resource]; !ok && len(c.contended) >= maxContended {
		for r, at := range c.contended {
			if now.Sub(at) > contendedFor {
				delete(c.contended, r)
			}
		}
		if len(c.contended) >= maxContended {
			return // too many resources contended at once: they queue once refused
		}
	}
	c.contended[resource] = now
}

// contendedLocked reports whether, at now, resource was seen contended
// (sawContention) less than contendedFor ago; c.qmu must be held.
func (c *Client) contendedLocked(resource string, now time.Time) bool {
	at, ok := c.contended[resource]
	return ok && now.Sub(at) <= contendedFor
}
