package redlock

import (
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// A waiter's ticket orders it in every node's queue (docs/safety.md,
// "Bounded tickets"): a time on the nodes' clocks, never this client's.

// settle reads the replies of a failed attempt of waiter w: how many waiters
// a majority of the nodes had queued first (ahead), and the nodes' clocks.
//
// A ticket is a time on the nodes' clocks, never this client's: a waiter
// starts without one (0), or with the median of the clocks the nodes
// answered with when they refused the attempt that made it a waiter
// (QuorumError.clock), or what the client knows of their clock (nodeClock).
// The first attempt without a ticket is not queued and learns
// the clocks; the waiter then takes their median and tries again at once.
// A node queues a waiter, or moves a queued one, only to a ticket within
// node.TicketBound of its own clock (node.TicketRefused otherwise): when a
// node whose clock agrees with the others (within the bound of the median)
// refused w's ticket (it had dropped w, and the ticket has aged), w takes a
// new ticket, sent alike to every node (w loses its place, but every node
// orders it the same), and tries again at once. A node whose clock is
// further off cannot queue anyone: its refusals are ignored. Only when no
// node can tell its clock (a user without TIME) does the ticket come from
// now, this client's clock.
func (w *place) settle(replies []quorum.Reply[node.Acquired], need int, now func() time.Time) {
	w.ahead = queuedAhead(replies, need)
	m, ok := medianClock(replies)
	renew := w.Ticket == 0
	if ok {
		for _, r := range replies {
			if r.Done && r.Err == nil && r.Value.Queue == node.TicketRefused && abs(r.Value.Clock-m) <= node.TicketBound.Microseconds() {
				renew = true
			}
		}
	} else {
		m = now().UnixMicro()
	}
	if renew {
		w.Ticket = m
	}
	w.requeue = renew && !w.requeued
	w.requeued = false
}

// nodeClock is what a client knows of its nodes' clock: the median of the
// clocks the replies of a refused attempt carried, against this process'
// monotonic clock when the attempt was decided. A waiter's ticket can so be
// a time on the nodes' clocks without asking them first; only when the
// client has not heard from them lately does it ask (ticket 0, place.settle).
//
// Every reading is late: the nodes read their clocks before they replied,
// and the client notes the reply when its goroutine next runs, after the
// round was decided. The lateness makes the tickets early by as much, so
// that a client whose last reading was noted late (a garbage collection, a
// goroutine not scheduled on a busy machine) cut ahead of the waiters queued
// just before it: with 8 separate clients on one key (N=1, hold 0) tickets
// were early by 59 µs at the median, but by 0.3 to 2 ms for 1 % of them and
// up to 5 ms, while a hand-over takes about 0.25 ms, and 1.5–2 % of the
// grants went to a client that had been granted less than one round of the
// others before (fair mode's fewest/most grants read 0.88–0.92 in some runs).
// Since no reading can be early, the least late of those of the last
// nodeClockBest is kept: a later one replaces it only if it puts the nodes'
// clock further on, or once it is that old (the nodes' clocks may have been
// stepped back). With that, the tickets of the same runs were early by 30 µs
// at the median and by 80 µs for the 1 % (docs/benchmarks.md, "Tickets from
// the least late reading").
type nodeClock struct {
	mu     sync.Mutex
	offset int64     // the nodes' clock (µs) minus monotonic µs since monoBase
	at     time.Time // when the last reading was noted (zero: never)
	kept   time.Time // when the reading that gave offset was noted
}

// nodeClockBest is how long the least late reading of the nodes' clock is
// kept against later, later-noted ones (nodeClock): a waiting client notes
// one on every refused attempt, dozens in that time under contention. A
// node's clock stepped back is followed after that long at most; until then
// this client's tickets are late by the step, which costs it places, never
// anybody else's (and a step over node.TicketBound is refused at once).
const nodeClockBest = 100 * time.Millisecond

// monoBase is the origin of the monotonic readings nodeClock keeps.
var monoBase = time.Now()

// nodeClockFresh is how long what a client learnt of its nodes' clock serves
// for tickets: at the 1 % drift allowance, 100 ms of error at most, well
// within node.TicketBound.
const nodeClockFresh = 10 * time.Second

// learn records the nodes' clock (µs; 0: unknown) as read at now, unless a
// reading of the last nodeClockBest put it further on (nodeClock).
func (k *nodeClock) learn(clock int64, now time.Time) {
	if clock <= 0 {
		return
	}
	offset := clock - now.Sub(monoBase).Microseconds()
	k.mu.Lock()
	if k.at.IsZero() || offset >= k.offset || now.Sub(k.kept) > nodeClockBest {
		k.offset, k.kept = offset, now
	}
	k.at = now
	k.mu.Unlock()
}

// ticket returns the nodes' clock at now, or 0 when the client has not heard
// it for nodeClockFresh.
func (k *nodeClock) ticket(now time.Time) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at.IsZero() || now.Sub(k.at) > nodeClockFresh {
		return 0
	}
	return now.Sub(monoBase).Microseconds() + k.offset
}

// medianClock returns the median of the clocks the nodes answered with, and
// whether any did.
func medianClock(replies []quorum.Reply[node.Acquired]) (int64, bool) {
	var clocks []int64
	for _, r := range replies {
		if r.Done && r.Err == nil && r.Value.Clock > 0 {
			clocks = append(clocks, r.Value.Clock)
		}
	}
	if len(clocks) == 0 {
		return 0, false
	}
	slices.Sort(clocks)
	return clocks[len(clocks)/2], true
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// takeRequeue reports whether the next attempt goes at once (settle), and
// marks it as the one retry in a row.
func (w *place) takeRequeue() bool {
	if !w.requeue {
		return false
	}
	w.requeue, w.requeued = false, true
	return true
}
