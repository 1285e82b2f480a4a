package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// nodeClock keeps, for each node, the least late reading of its clock, and
// a ticket is the median of the nodes' clocks so known: a reading noted
// late (its goroutine not scheduled at once) would make this client's
// tickets early and buy it places ahead of the waiters queued just before
// it; and the nodes that answered an attempt first must not decide whose
// clock the tickets follow (an adversarial review of the first version,
// which kept the least late of the replies' medians).
func TestNodeClockKeepsTheLeastLateReadingOfEachNode(t *testing.T) {
	at := func(d time.Duration) time.Time { return monoBase.Add(time.Hour + d) }
	c0 := at(0).UnixMicro() // the nodes' clock at 0, µs: this client's too
	us := func(d time.Duration) int64 { return d.Microseconds() }
	// reading is one refused attempt's replies, noted at: clocks[i] from node
	// i, -1 for a node that did not answer (yet), 0 for one that tells no
	// clock.
	type reading struct {
		clocks []int64
		at     time.Duration
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		readings []reading
		now      time.Duration
		want     int64 // the ticket at now; 0: none
	}{
		{"one node, one reading", []reading{{[]int64{c0}, 0}}, 2 * ms, c0 + us(2*ms)},
		{"a later reading noted 900µs late is not kept",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0 + us(100*time.Microsecond)}, ms}},
			2 * ms, c0 + us(2*ms)},
		{"a later reading that puts the clock further on is kept at once",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0 + us(1500*time.Microsecond)}, ms}},
			2 * ms, c0 + us(2500*time.Microsecond)},
		{"a late reading is kept once the kept one is older than nodeClockBest (a clock stepped back)",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0 - us(500*ms)}, nodeClockBest + ms}},
			nodeClockBest + 2*ms, c0 - us(500*ms) + us(ms)},
		{"but not before",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0 - us(500*ms)}, nodeClockBest - ms}},
			nodeClockBest, c0 + us(nodeClockBest)},
		{"an unknown clock changes nothing",
			[]reading{{[]int64{c0}, 0}, {[]int64{0}, ms}},
			2 * ms, c0 + us(2*ms)},
		{"a reading not kept keeps the clock fresh",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0}, 50 * ms}},
			50*ms + nodeClockFresh - ms, c0 + us(50*ms+nodeClockFresh-ms)},
		{"stale once nodeClockFresh passed since the last reading",
			[]reading{{[]int64{c0}, 0}, {[]int64{c0}, 50 * ms}},
			50*ms + nodeClockFresh + ms, 0},
		{"never read", nil, 0, 0},
		// Three nodes, node 1's clock 50 ms ahead: whichever two answered
		// first, the ticket follows the median node.
		{"the fast node answered first: the median of the three, not of the two",
			[]reading{{[]int64{c0, c0 + us(50*ms), c0}, 0}, {[]int64{c0 + us(ms), c0 + us(50*ms+ms), -1}, ms}},
			2 * ms, c0 + us(2*ms)},
		{"a node 1.5 s off is left out",
			[]reading{{[]int64{c0, c0 + us(1500*ms), c0 - us(ms)}, 0}},
			ms, c0 + us(ms)},
		{"each node's late reading is its own: node 0 noted late, node 2 not",
			[]reading{{[]int64{c0, c0, c0}, 0}, {[]int64{c0, -1, c0 + us(ms)}, ms}},
			2 * ms, c0 + us(2*ms)},
		{"two nodes heard within the bound: the later, whichever is nearer this client's clock",
			[]reading{{[]int64{c0 - us(10*ms), c0 + us(90*ms), -1}, 0}},
			ms, c0 + us(90*ms) + us(ms)},
		{"two nodes heard, one 1.5 s ahead: the one nearer this client's clock",
			[]reading{{[]int64{c0, c0 + us(1500*ms), -1}, 0}},
			ms, c0 + us(ms)},
		{"two nodes heard, one 1.5 s behind: the one nearer this client's clock",
			[]reading{{[]int64{c0, c0 - us(1500*ms), -1}, 0}},
			ms, c0 + us(ms)},
		// Four nodes, two of them 400 ms ahead: a client that missed one
		// picks no earlier than one that heard all (a third review).
		{"N=4, every node heard: the later of the two middle clocks",
			[]reading{{[]int64{c0, c0, c0 + us(400*ms), c0 + us(400*ms)}, 0}},
			ms, c0 + us(400*ms) + us(ms)},
		{"N=4, a node ahead not heard: no earlier",
			[]reading{{[]int64{c0, c0, c0 + us(400*ms), -1}, 0}},
			ms, c0 + us(400*ms) + us(ms)},
		{"N=4, a node behind not heard: later, never earlier",
			[]reading{{[]int64{-1, c0, c0 + us(400*ms), c0 + us(400*ms)}, 0}},
			ms, c0 + us(400*ms) + us(ms)},
		{"N=4, two nodes not heard: none (ask again)",
			[]reading{{[]int64{c0, c0, -1, -1}, 0}},
			ms, 0},
		{"N=2, one node heard: none",
			[]reading{{[]int64{c0, -1}, 0}},
			ms, 0},
		{"N=3, one node heard: none",
			[]reading{{[]int64{c0, -1, -1}, 0}},
			ms, 0},
		{"a node not heard for nodeClockFresh is left out",
			[]reading{{[]int64{c0 - us(300*ms), -1, -1}, 0}, {[]int64{-1, c0 + us(nodeClockFresh), c0 + us(nodeClockFresh+10*ms)}, nodeClockFresh}},
			nodeClockFresh + 10*ms, c0 + us(10*ms) + us(nodeClockFresh+10*ms)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k nodeClock
			for _, r := range tc.readings {
				replies := make([]quorum.Reply[node.Acquired], len(r.clocks))
				idx := make([]int, len(r.clocks))
				for i, clock := range r.clocks {
					idx[i] = i
					if clock >= 0 {
						replies[i] = quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{Clock: clock}}
					}
				}
				k.learn(replies, idx, len(r.clocks), at(r.at))
			}
			assert.Equal(t, tc.want, k.ticket(at(tc.now)))
		})
	}
}

// hear records a reply's clock as it arrives, stragglers included, and
// nothing for a reply without one (a grant, an error).
func TestNodeClockHearsEachReply(t *testing.T) {
	now := time.Now()
	c0 := now.UnixMicro()
	var k nodeClock
	k.hear(0, 3, quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{OK: true}})
	k.hear(1, 3, quorum.Reply[node.Acquired]{Done: true, Err: assert.AnError, Value: node.Acquired{Clock: c0}})
	k.hear(2, 3, quorum.Reply[node.Acquired]{Value: node.Acquired{Clock: c0}}) // not done
	k.hear(5, 3, quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{Clock: c0}})
	assert.Zero(t, k.ticket(now), "nothing heard")
	k.hear(2, 3, quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{Clock: c0 + 50_000}})
	assert.Zero(t, k.ticket(now), "one node of three heard: too few")
	k.hear(0, 3, quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{Clock: c0}})
	got := k.ticket(time.Now())
	assert.InDelta(t, c0+50_000, got, float64(time.Since(now).Microseconds()+1000), "node 2's clock, 50 ms ahead, the later of two")
}

// unheard makes a refused attempt wait for a node still to answer that the
// client has not heard lately, at most once per node and nodeClockFresh,
// for at most four times the slowest reply (at least a millisecond).
func TestNodeClockWaitsOnceForAnUnheardNode(t *testing.T) {
	now := time.Now()
	done := func(clock int64, latency time.Duration) quorum.Reply[node.Acquired] {
		return quorum.Reply[node.Acquired]{Done: true, Latency: latency, Value: node.Acquired{Clock: clock}}
	}
	pending := quorum.Reply[node.Acquired]{}
	idx := []int{0, 1, 2}
	var k nodeClock
	timedOut := quorum.Reply[node.Acquired]{Done: true, Err: context.DeadlineExceeded, Latency: time.Second}
	replies := []quorum.Reply[node.Acquired]{done(1, 300*time.Microsecond), done(1, 2*time.Millisecond), pending, timedOut}
	idx = append(idx, 3)
	d, wait := k.unheard(replies, idx, 4, now)
	assert.True(t, wait, "node 2 never heard")
	assert.Equal(t, 8*time.Millisecond, d, "four times the slowest answer, not the timeout's")
	_, wait = k.unheard(replies, idx, 4, now.Add(time.Second))
	assert.False(t, wait, "once per node")
	_, wait = k.unheard(replies, idx, 4, now.Add(nodeClockFresh+time.Second))
	assert.True(t, wait, "again once nodeClockFresh passed")
	k.learn([]quorum.Reply[node.Acquired]{done(now.UnixMicro(), 0), done(now.UnixMicro(), 0), done(now.UnixMicro(), 0)}, idx, 4, now.Add(2*nodeClockFresh))
	_, wait = k.unheard(replies, idx, 4, now.Add(2*nodeClockFresh+time.Second))
	assert.False(t, wait, "node 2 heard lately")
	var k2 nodeClock
	d, wait = k2.unheard([]quorum.Reply[node.Acquired]{done(1, 0), pending, pending}, idx, 3, now)
	assert.True(t, wait, "node 1 never heard nor waited for")
	assert.Equal(t, time.Millisecond, d, "at least a millisecond")
}

// A refused attempt's ticket is the nodes' clocks when its outcome was
// known, and no node's counts as earlier than the reading its reply
// carried: a reply that came after the outcome (a straggler, or one waited
// for) alone would put its node's clock at the outcome early by that
// reply's lateness.
func TestNodeClockTicketNoEarlierThanTheAttemptsReadings(t *testing.T) {
	at := func(d time.Duration) time.Time { return monoBase.Add(time.Hour + d) }
	c0 := at(0).UnixMicro()
	ms := time.Millisecond.Microseconds()
	reply := func(clock int64) quorum.Reply[node.Acquired] {
		return quorum.Reply[node.Acquired]{Done: true, Value: node.Acquired{Clock: clock}}
	}
	idx := []int{0, 1, 2}
	for _, tc := range []struct {
		name    string
		late    time.Duration // when node 2's reply was heard, after the outcome at 0
		replies []quorum.Reply[node.Acquired]
		want    int64
	}{
		{"without the replies: node 2's clock at the outcome is early by its reply's lateness",
			10 * time.Millisecond, nil, c0 + 30*ms - 10*ms},
		{"with them: its reading",
			10 * time.Millisecond, []quorum.Reply[node.Acquired]{reply(c0), reply(c0 + 40*ms), reply(c0 + 30*ms)}, c0 + 30*ms},
		{"a reading that came before the outcome changes nothing",
			-time.Millisecond, []quorum.Reply[node.Acquired]{reply(c0), reply(c0 + 40*ms), reply(c0 + 30*ms)}, c0 + 30*ms + ms},
		{"an error or a pending reply is no reading",
			10 * time.Millisecond, []quorum.Reply[node.Acquired]{reply(c0), {Done: true, Err: assert.AnError}, {}}, c0 + 30*ms - 10*ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k nodeClock
			// Nodes 0 and 1 answered at the outcome, 0 and 40 ms ahead, node
			// 2 (30 ms ahead) at late: the ticket, the clock at N/2 of the
			// three in order, is node 2's.
			k.learn([]quorum.Reply[node.Acquired]{reply(c0), reply(c0 + 40*ms)}, idx[:2], 3, at(0))
			k.learn([]quorum.Reply[node.Acquired]{reply(c0 + 30*ms)}, idx[2:], 3, at(tc.late))
			got, few := k.ticketOr(at(0), tc.replies, idx)
			assert.False(t, few)
			assert.Equal(t, tc.want, got)
		})
	}
}
