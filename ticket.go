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
// starts without one (0), or with what the client knows of their clocks
// (known: nodeClock.ticket, the median of its readings of each node's
// clock, which include those of the attempt that made it a waiter; no
// ticket yet, and no retry at once, when it heard fewer than a majority:
// few). The first attempt
// without a ticket is not queued and learns the clocks; the waiter then
// takes that median and tries again at once.
// A node queues a waiter, or moves a queued one, only to a ticket within
// node.TicketBound of its own clock (node.TicketRefused otherwise): when a
// node whose clock agrees with the others (within the bound of that median)
// refused w's ticket (it had dropped w, and the ticket has aged), w takes a
// new ticket, sent alike to every node (w loses its place, but every node
// orders it the same), and tries again at once. A node whose clock is
// further off cannot queue anyone: its refusals are ignored. (Measured
// against the median of this attempt's replies, as until 6 December 2026,
// a node far off agreed with the median of two replies of which it was
// one, and its refusal renewed the ticket to its own clock, which the
// others refused in turn: 8 clients at N=3 with one node 1.5 s ahead got
// 405 to 720 grants each.) Only when no node can tell its clock (a user
// without TIME) does the ticket come from now, this client's clock.
func (w *place) settle(replies []quorum.Reply[node.Acquired], need int, known int64, few bool, now func() time.Time) {
	w.ahead = queuedAhead(replies, need)
	if known == 0 && few { // too few nodes heard for a ticket: none, and ask again
		w.requeue, w.requeued = false, false
		return
	}
	m, renew := known, w.Ticket == 0
	if m == 0 { // no reply told a clock (known includes this attempt's)
		m = now().UnixMicro()
	} else {
		for _, r := range replies {
			if r.Done && r.Err == nil && r.Value.Queue == node.TicketRefused && abs(r.Value.Clock-m) <= node.TicketBound.Microseconds() {
				renew = true
			}
		}
	}
	if renew {
		w.Ticket = m
	}
	w.requeue = renew && !w.requeued
	w.requeued = false
}

// nodeClock is what a client knows of its nodes' clocks: for each node, a
// reading of its clock that an acquisition's reply carried, against this
// process' monotonic clock when the reply arrived (hear) or the attempt was
// decided (learn). A waiter's ticket
// is the median of the nodes' clocks so known, at the time it is taken
// (ticket): a time on the nodes' clocks without asking them first; only
// when the client has heard from none of them lately does it ask (ticket 0,
// place.settle).
//
// Every reading is late: a node read its clock before it replied, and the
// client notes the reply when its goroutine next runs, after the round was
// decided. The lateness makes the tickets early by as much: a client whose
// last reading was noted late (a garbage collection, a goroutine not
// scheduled on a busy machine) cut ahead of the waiters queued just before
// it. With 8 separate clients on one key (N=1, hold 0) tickets were early by
// 59 µs at the median but by 0.3–2 ms for 1 % of them, and up to 5 ms, while
// a hand-over takes about 0.25 ms; 1.5–2 % of the grants went to a client
// granted less than one round of the others before. Since no reading of a
// clock can be early, the least late reading of each node of the last
// nodeClockBest is kept: a later one replaces it only if it puts that
// node's clock further on, or once it is that old (the node's clock may
// have been stepped back). This compares readings of one clock only: a
// first version kept the least late of the replies' medians, but when the
// nodes' clocks disagree, which nodes answered first moves a median more
// than lateness does, and it kept the clock of whichever node was fastest
// (an adversarial review: a node 1.5 s off set nearly every ticket, all of
// them refused by the others; clients that saw a node 5 ms ahead only now
// and then got late tickets for 100 ms, and fewer grants). The median over
// the nodes, rather than over one attempt's replies, no longer depends on
// which nodes answered first either (docs/benchmarks.md, "Tickets from each
// node's least late reading").
type nodeClock struct {
	mu    sync.Mutex
	nodes []nodeReading // by position in Client.nodes; nil until a first reading
}

// nodeReading is what a client knows of one node's clock.
type nodeReading struct {
	offset int64     // the node's clock (µs) minus monotonic µs since monoBase
	kept   time.Time // when the reading that gave offset was noted
	at     time.Time // when the last reading was noted (zero: never)
	waited time.Time // when an attempt last waited for this node's reply (unheard)
}

// unheard reports whether a refused attempt, whose replies[j] come from
// node idx[j] of n, should wait for the replies still on their way before
// its waiter takes a ticket, and how long at most: some node it asked is
// still to answer, and was not heard in the last nodeClockFresh, nor waited
// for. Without that node the client may know too few nodes for a ticket
// (ticketOr: few, and it asks again), or pick a later clock than the
// others: a new client in
// TestOneNodeAheadBuysNoPlace waited 0.5 s once. The wait is bounded by
// four times the slowest answer so far (errors aside; at least a
// millisecond), and made at
// most once per node and nodeClockFresh, whatever it brought: a node that
// is down or hung costs one such wait, and is then left out of the
// client's tickets (counted as later than all) until it is heard. now is
// the time of the attempt's end.
func (k *nodeClock) unheard(replies []quorum.Reply[node.Acquired], idx []int, n int, now time.Time) (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	wait, slowest := false, time.Duration(0)
	for j, r := range replies {
		if r.Done {
			if r.Err == nil { // a timeout or a refused connection is no measure
				slowest = max(slowest, r.Latency)
			}
			continue
		}
		if j >= len(idx) || idx[j] < 0 || idx[j] >= n {
			continue
		}
		nr := k.readingLocked(idx[j], n)
		heard := !nr.at.IsZero() && now.Sub(nr.at) <= nodeClockFresh
		waited := !nr.waited.IsZero() && now.Sub(nr.waited) <= nodeClockFresh
		if !heard && !waited {
			nr.waited, wait = now, true
		}
	}
	return max(4*slowest, time.Millisecond), wait
}

// monoBase is the origin of the monotonic readings nodeClock keeps.
var monoBase = time.Now()

// nodeClockFresh is how long what a client learnt of a node's clock serves
// for tickets: at the 1 % drift allowance, 100 ms of error at most, well
// within node.TicketBound.
const nodeClockFresh = 10 * time.Second

// nodeClockBest is how long the least late reading of a node's clock is
// kept against later, later-noted ones (nodeClock): a waiting client notes
// one on every refused attempt, dozens in that time under contention. A
// node's clock stepped back is followed after that long at most; until then
// that node's part in this client's tickets is late by the step (the median
// of three or more nodes leaves one such node out), which costs this client
// places, never anybody else's. A step of more than node.TicketBound makes
// that node refuse the tickets, and its refusals do not count meanwhile (its
// clock disagrees with the median: place.settle): at N=1 a waiter then polls
// until the reading is followed, and takes a ticket on the new clock.
const nodeClockBest = 100 * time.Millisecond

// learn records the clocks (µs; 0: unknown) that replies carried, replies[j]
// from node idx[j] of n, as noted at now (hear).
func (k *nodeClock) learn(replies []quorum.Reply[node.Acquired], idx []int, n int, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for j, r := range replies {
		if j < len(idx) {
			k.noteLocked(idx[j], n, r, now)
		}
	}
}

// hear records the clock that node i's (of n) reply r carried, if any, as
// noted at its arrival. An acquisition round's replies are heard as they
// come, stragglers included: a node always slower than the majority that
// decides a refusal was otherwise never heard, and its clients knew an even
// number of the nodes (ticket), which others did not (a review of 09fed9f).
func (k *nodeClock) hear(i, n int, r quorum.Reply[node.Acquired]) {
	if !r.Done || r.Err != nil || r.Value.Clock <= 0 {
		return // most replies: a grant, or an error
	}
	now := time.Now()
	k.mu.Lock()
	k.noteLocked(i, n, r, now)
	k.mu.Unlock()
}

// noteLocked records the clock node i's (of n) reply r carried, as noted at
// now: it replaces what is known of that node unless a reading of the last
// nodeClockBest put the node's clock further on (nodeClock); k.mu must be
// held.
func (k *nodeClock) noteLocked(i, n int, r quorum.Reply[node.Acquired], now time.Time) {
	if !r.Done || r.Err != nil || r.Value.Clock <= 0 || i < 0 || i >= n {
		return
	}
	nr, offset := k.readingLocked(i, n), r.Value.Clock-now.Sub(monoBase).Microseconds()
	if nr.at.IsZero() || offset >= nr.offset || now.Sub(nr.kept) > nodeClockBest {
		nr.offset, nr.kept = offset, now
	}
	if now.After(nr.at) {
		nr.at = now
	}
}

// readingLocked returns what is known of node i's (of n) clock; k.mu must
// be held.
func (k *nodeClock) readingLocked(i, n int) *nodeReading {
	if k.nodes == nil {
		k.nodes = make([]nodeReading, n)
	}
	return &k.nodes[i]
}

// ticket returns the nodes' median clock at now, as far as the client heard
// them in the last nodeClockFresh: of the N nodes' clocks in order, the
// one at N/2 (the later of the two middle ones for an even N, as every
// client chooses, so that a wrong choice could only cost this client
// places), with the clocks of nodes it did not hear counted as later than
// all: a client that missed a node then picks no earlier than one that
// heard them all (a third review, of 67e984a: at N=4 a new client that
// missed one node picked the earlier middle clock and went ahead of five
// waiters). It returns 0 when it heard fewer than N/2+1 nodes (ticketOr),
// or none. When that clock and the
// one before it are more than node.TicketBound apart, the one nearer this
// client's clock (now): one of the two nodes cannot queue the other's
// tickets (a new client that heard two of three nodes, one 1.5 s ahead,
// took a ticket on it that the two others refused). Choosing by the
// client's clock within the bound made clients on either side of the
// midpoint of two nodes 100 ms apart take tickets 100 ms apart, and those
// behind took every turn (a review of 09fed9f: 29 grants against 969).
func (k *nodeClock) ticket(now time.Time) int64 {
	t, _ := k.ticketOr(now, nil, nil)
	return t
}

// ticketOr is ticket, and tells apart the two cases without one: few is
// true when the client heard some node lately, but fewer than N/2+1 (a
// majority). Its attempt's own median would then follow the nodes that
// answered first, which may be earlier than every other client's ticket (a
// third review: at N=2, a new client that missed the node ahead went first
// of six); the waiter rather takes no ticket, and asks again.
//
// replies (replies[j] from node idx[j]; nil for none) are those of the
// refused attempt whose outcome was known at now (Client.notAcquired): a
// node's clock counts as no earlier than the reading its reply carried. A
// reply that came after now (a straggler, or one waited for) was read by
// its node before it came, by up to its way back: what the client knows of
// that node at now alone is early by as much, and its tickets were early
// by a slow node's lateness (TestNewcomerMissingANodeQueuesLast without the
// 50 ms between W4 and X: X, 10 ms late from one node, went ahead of W4 in
// 3 runs of 5). The reading may be late instead, when the request reached
// the node after now: the ticket is then late by as much, which costs this
// waiter places (a caller that started after its outcome may go first: an
// adversarial review, N=4, requests to two nodes 6 ms late), never anybody
// else's, as everywhere in the choice of a ticket.
func (k *nodeClock) ticketOr(now time.Time, replies []quorum.Reply[node.Acquired], idx []int) (t int64, few bool) {
	var buf [8]int64
	clocks := buf[:0]
	mono := now.Sub(monoBase).Microseconds()
	k.mu.Lock()
	for i := range k.nodes {
		if nr := &k.nodes[i]; !nr.at.IsZero() && now.Sub(nr.at) <= nodeClockFresh {
			clocks = append(clocks, max(mono+nr.offset, replyClock(replies, idx, i)))
		}
	}
	h := len(k.nodes) / 2
	k.mu.Unlock()
	if h >= len(clocks) {
		return 0, len(clocks) > 0
	}
	slices.Sort(clocks)
	t = clocks[h]
	if h > 0 && clocks[h]-clocks[h-1] > node.TicketBound.Microseconds() {
		if before, own := clocks[h-1], now.UnixMicro(); abs(before-own) < abs(t-own) {
			t = before
		}
	}
	return t, false
}

// replyClock returns the clock (µs) that node i's reply among replies
// (replies[j] from node idx[j]) carried, 0 if none.
func replyClock(replies []quorum.Reply[node.Acquired], idx []int, i int) int64 {
	for j, r := range replies {
		if j < len(idx) && idx[j] == i && r.Done && r.Err == nil {
			return r.Value.Clock
		}
	}
	return 0
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
