package node_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// wakeQueue drives the default mode's wake queue of one key on one node, and
// listens on the waiters' channels over one connection.
type wakeQueue struct {
	t          *testing.T
	s          *redistest.Server
	n          *node.Redis
	ctx        context.Context
	key, fence string
	psc        redis.PubSubConn
	base       int64 // added to the waiters' tickets (see waiter): now, in µs
}

const reserve = time.Minute // long enough that no reservation runs out in a test

func newWakeQueue(t *testing.T, key string) *wakeQueue {
	s, n, ctx := dialed(t, 10*time.Second)
	c, err := redis.Dial("tcp", s.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &wakeQueue{t: t, s: s, n: n, ctx: ctx, key: key, fence: key + ":fence", psc: redis.PubSubConn{Conn: c},
		base: time.Now().UnixMicro()}
}

// acquire is AcquireQueued with a TTL of a minute; it must not fail.
func (q *wakeQueue) acquire(token string, w node.Waiter) node.Acquired {
	q.t.Helper()
	w.Ticket += q.base
	a, err := q.n.AcquireQueued(q.ctx, q.key, q.fence, token, time.Minute, w)
	require.NoError(q.t, err)
	return a
}

// release is ReleaseQueued; it must not fail.
func (q *wakeQueue) release(token, waiter string) bool {
	q.t.Helper()
	ok, err := q.n.ReleaseQueued(q.ctx, q.key, token, waiter, reserve)
	require.NoError(q.t, err)
	return ok
}

// listen subscribes to the channels of waiter groups.
func (q *wakeQueue) listen(groups ...string) {
	q.t.Helper()
	for _, g := range groups {
		require.NoError(q.t, q.psc.Subscribe(node.WaiterChannel(q.key, g+"/1")))
		_, ok := q.psc.ReceiveWithTimeout(5 * time.Second).(redis.Subscription)
		require.True(q.t, ok)
	}
}

// told returns the channels told since the last call: the messages received
// before the answer to a PING sent now (one connection keeps the order).
func (q *wakeQueue) told() []string {
	q.t.Helper()
	require.NoError(q.t, q.psc.Ping("mark"))
	var got []string
	for {
		switch m := q.psc.ReceiveWithTimeout(5 * time.Second).(type) {
		case redis.Message:
			got = append(got, m.Channel)
		case redis.Pong:
			return got
		case error:
			require.NoError(q.t, m)
		}
	}
}

// queued returns the wake queue's content and the waiter woken.
func (q *wakeQueue) queued() (string, string) {
	q.t.Helper()
	wq, wk := node.WakeQueueKeys(q.key)
	v, err := redis.String(q.s.Do("GET", wq))
	if err != redis.ErrNil {
		require.NoError(q.t, err)
	}
	w, err := redis.String(q.s.Do("GET", wk))
	if err != redis.ErrNil {
		require.NoError(q.t, err)
	}
	return q.offsets(v), w
}

// offsets rewrites the tickets of queue lines "ticket id wakes" as offsets
// from q.base, as the tests' waiters give them.
func (q *wakeQueue) offsets(v string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(v, "\n") {
		ticket, rest, ok := strings.Cut(line, " ")
		if !ok {
			b.WriteString(line)
			continue
		}
		n, err := strconv.ParseInt(ticket, 10, 64)
		require.NoError(q.t, err)
		fmt.Fprintf(&b, "%d %s", n-q.base, rest)
	}
	return b.String()
}

// A release wakes the first waiter by ticket only, whatever the order of
// arrival, and reserves the lock for it: other waiters are refused until it
// comes, and it leaves the queue with the lock.
func TestWakeQueueWakesTheFirstWaiterOnly(t *testing.T) {
	q := newWakeQueue(t, "redlock:{wq}")
	a, b, c := waiter("a/1", 20), waiter("b/1", 30), waiter("c/1", 10)
	q.listen("a", "b", "c")

	require.True(t, q.acquire("ta", a).OK, "free: granted, queued or not")
	wq, _ := q.queued()
	assert.Empty(t, wq, "a holder is not queued")

	got := q.acquire("tb", b)
	assert.False(t, got.OK)
	assert.Equal(t, 0, got.Ahead)
	got = q.acquire("tc", c)
	assert.False(t, got.OK)
	assert.Equal(t, 0, got.Ahead, "an earlier ticket goes first")
	got = q.acquire("tb", b)
	assert.Equal(t, 1, got.Ahead, "a waiter queues once")
	wq, _ = q.queued()
	assert.Equal(t, "10 c/1 0\n30 b/1 0\n", wq, "a waiter's attempt renews its entry")
	assert.Empty(t, q.told(), "attempts wake nobody")

	require.True(t, q.release("ta", ""))
	assert.Equal(t, []string{node.WaiterChannel(q.key, "c/1")}, q.told(), "one waiter told")
	_, woken := q.queued()
	assert.Equal(t, "c/1", woken)

	got = q.acquire("tb", b)
	assert.False(t, got.OK, "reserved for c")
	assert.Equal(t, 1, got.Ahead)
	require.True(t, q.acquire("tc", c).OK)
	wq, woken = q.queued()
	assert.Equal(t, "30 b/1 0\n", wq, "granted: c left the queue")
	assert.Empty(t, woken, "the reservation ends with the grant")

	// c's release names c: a node that refused it still has it queued.
	require.True(t, q.release("tc", "c/1"))
	assert.Equal(t, []string{node.WaiterChannel(q.key, "b/1")}, q.told())
	require.True(t, q.acquire("tb", b).OK)
	require.NoError(t, q.psc.Subscribe(q.key))
	_, ok := q.psc.ReceiveWithTimeout(5 * time.Second).(redis.Subscription)
	require.True(t, ok)
	require.True(t, q.release("tb", "b/1"))
	assert.Equal(t, []string{q.key}, q.told(), "nobody queued: the key's channel")
	wq, _ = q.queued()
	assert.Empty(t, wq)
}

// A waiter whose client is gone (nobody listens on its channel) is dropped
// when a release would wake it; the next one is woken. A woken waiter that
// leaves without the lock passes the wake-up on; a release of a lock that
// another client holds wakes nobody.
func TestWakeQueueSkipsGoneWaiters(t *testing.T) {
	q := newWakeQueue(t, "redlock:{gone}")
	q.listen("b", "c")
	require.True(t, q.acquire("tx", waiter("x/1", 1)).OK)
	for _, w := range []node.Waiter{waiter("gone/1", 5), waiter("b/1", 30), waiter("c/1", 10)} {
		require.False(t, q.acquire("t"+w.ID, w).OK)
	}
	assert.False(t, q.release("not-the-token", ""), "held by another")
	assert.Empty(t, q.told())

	require.True(t, q.release("tx", ""))
	assert.Equal(t, []string{node.WaiterChannel(q.key, "c/1")}, q.told(), "gone/1 skipped")
	wq, woken := q.queued()
	assert.Equal(t, "30 b/1 0\n10 c/1 1\n", wq, "gone/1 dropped; c woken once")
	assert.Equal(t, "c/1", woken)

	require.NoError(t, q.n.LeaveWakeQueue(q.ctx, q.key, "c/1", reserve))
	assert.Equal(t, []string{node.WaiterChannel(q.key, "b/1")}, q.told(), "c passed its wake-up on")
	wq, woken = q.queued()
	assert.Equal(t, "30 b/1 1\n", wq)
	assert.Equal(t, "b/1", woken)
	require.NoError(t, q.n.LeaveWakeQueue(q.ctx, q.key, "nobody/1", reserve), "leaving twice, or never queued")
}

// A waiter that listens but does not try (its process is paused) is woken
// three times at most; the next release wakes the waiter after it.
func TestWakeQueueDropsAStuckWaiter(t *testing.T) {
	q := newWakeQueue(t, "redlock:{stuck}")
	q.listen("stuck", "b")
	require.True(t, q.acquire("tx", waiter("x/1", 1)).OK)
	require.False(t, q.acquire("ts", waiter("stuck/1", 5)).OK)
	require.False(t, q.acquire("tb", waiter("b/1", 30)).OK)
	for i := range 4 {
		require.True(t, q.release("tx", ""))
		want := "stuck/1"
		if i == 3 {
			want = "b/1"
		}
		assert.Equal(t, []string{node.WaiterChannel(q.key, want)}, q.told(), "release %d", i+1)
		// A newcomer's plain attempt is not held back by the reservation.
		a, err := q.n.Acquire(q.ctx, q.key, q.fence, "tx", time.Minute)
		require.NoError(t, err)
		require.True(t, a.OK)
	}
	wq, _ := q.queued()
	assert.Equal(t, "30 b/1 1\n", wq)
	require.False(t, q.acquire("ts", waiter("stuck/1", 5)).OK, "back: queued again, first")
	wq, _ = q.queued()
	assert.Equal(t, "30 b/1 1\n5 stuck/1 0\n", wq)
}

// The queue holds at most 256 waiters; the others are refused without a place
// (they poll), and the queue expires with the lease of its last attempt.
func TestWakeQueueBounded(t *testing.T) {
	q := newWakeQueue(t, "redlock:{many}")
	require.True(t, q.acquire("th", waiter("h/1", 1)).OK)
	for i := range 300 {
		w := node.Waiter{ID: "w" + string(rune('a'+i%26)) + "/" + time.Duration(i).String(), Ticket: int64(100 + i), Lease: time.Second}
		got := q.acquire("t", w)
		require.False(t, got.OK)
		assert.Equal(t, min(i, 256), got.Ahead)
	}
	wq, _ := node.WakeQueueKeys(q.key)
	n, err := redis.Int(q.s.Do("STRLEN", wq))
	require.NoError(t, err)
	assert.Less(t, n, 256*32) // 256 lines of a 16-digit ticket (µs), an id and a count
	ttl, err := redis.Int(q.s.Do("PTTL", wq))
	require.NoError(t, err)
	assert.Greater(t, ttl, 0)
	assert.LessOrEqual(t, ttl, 1000)
}

// Waiters the queue cannot hold are refused with ErrInvalidWaiter, before
// anything is sent.
func TestWakeQueueInvalidWaiter(t *testing.T) {
	q := newWakeQueue(t, "redlock:{bad}")
	for name, w := range map[string]node.Waiter{
		"empty id":        {ID: "", Ticket: 1, Lease: time.Second},
		"space in id":     {ID: "a b", Ticket: 1, Lease: time.Second},
		"newline in id":   {ID: "a\n5 b", Ticket: 1, Lease: time.Second},
		"negative ticket": {ID: "a/1", Ticket: -1, Lease: time.Second},
	} {
		_, err := q.n.AcquireQueued(q.ctx, q.key, q.fence, "t", time.Minute, w)
		require.ErrorIs(t, err, node.ErrInvalidWaiter, name)
	}
	_, err := q.n.ReleaseQueued(q.ctx, q.key, "t", "a b", reserve)
	require.ErrorIs(t, err, node.ErrInvalidWaiter)
	require.ErrorIs(t, q.n.LeaveWakeQueue(q.ctx, q.key, "", reserve), node.ErrInvalidWaiter)
	assert.Empty(t, q.s.Keys("*"), "nothing written")
}

// A node queues a waiter, or moves a queued one, only to a ticket within
// node.TicketBound of its clock: a client's wrong clock buys no place. A
// waiter without a ticket (0) is not queued and learns the node's clock. Every queued acquisition reports the
// node's clock. Both queues (the wake queue, fair mode's) follow the rule.
func TestTicketBound(t *testing.T) {
	type queue struct {
		acquire func(token string, w node.Waiter) node.Acquired
		order   func() []string // waiter ids, first first
	}
	s, n, ctx := dialed(t, 10*time.Second)
	queues := map[string]func(key string) queue{
		"wake": func(key string) queue {
			return queue{
				acquire: func(token string, w node.Waiter) node.Acquired {
					a, err := n.AcquireQueued(ctx, key, key+":fence", token, time.Minute, w)
					require.NoError(t, err)
					return a
				},
				order: func() []string {
					wq, _ := node.WakeQueueKeys(key)
					v, _ := redis.String(s.Do("GET", wq))
					type entry struct {
						ticket int64
						id     string
					}
					var es []entry
					for _, line := range strings.Split(strings.TrimSpace(v), "\n") {
						if f := strings.Fields(line); len(f) == 3 {
							tk, err := strconv.ParseInt(f[0], 10, 64)
							require.NoError(t, err)
							es = append(es, entry{tk, f[1]})
						}
					}
					slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(a.ticket, b.ticket), cmp.Compare(a.id, b.id)) })
					var ids []string
					for _, e := range es {
						ids = append(ids, e.id)
					}
					return ids
				},
			}
		},
		"fair": func(key string) queue {
			return queue{
				acquire: func(token string, w node.Waiter) node.Acquired {
					a, err := n.AcquireFair(ctx, key, key+":fence", token, time.Minute, w)
					require.NoError(t, err)
					return a
				},
				order: func() []string {
					q, _ := node.QueueKeys(key)
					ids, err := redis.Strings(s.Do("ZRANGE", q, 0, -1))
					require.NoError(t, err)
					return ids
				},
			}
		},
	}
	for name, mk := range queues {
		t.Run(name, func(t *testing.T) {
			q := mk("redlock:{tb-" + name + "}")
			now := time.Now().UnixMicro()
			hour := time.Hour.Microseconds()
			bound := node.TicketBound.Microseconds()
			require.True(t, q.acquire("th", node.Waiter{ID: "h/1", Ticket: now, Lease: time.Minute}).OK)

			for _, tc := range []struct {
				id     string
				ticket int64
				want   node.QueueState
			}{
				{"behind/1", now - hour, node.TicketRefused},
				{"ahead/1", now + hour, node.TicketRefused},
				{"none/1", 0, node.NotQueued}, // no ticket yet: learns the clock
				{"on-time/1", now + 10, node.Queued},
				{"just-behind/1", now - bound/2, node.Queued},
			} {
				before := time.Now().UnixMicro()
				a := q.acquire("t-"+tc.id, node.Waiter{ID: tc.id, Ticket: tc.ticket, Lease: time.Minute})
				after := time.Now().UnixMicro()
				assert.False(t, a.OK)
				assert.Equal(t, tc.want, a.Queue, tc.id)
				assert.InDelta(t, (before+after)/2, a.Clock, float64(bound/10), "%s: the node's clock, in µs", tc.id)
			}
			assert.Equal(t, []string{"just-behind/1", "on-time/1"}, without(q.order(), "h/1"))

			// A queued waiter moves to a ticket within the bound of the
			// node's clock, not beyond.
			q.acquire("t-on-time/1", node.Waiter{ID: "on-time/1", Ticket: now - bound/2 - 5, Lease: time.Minute})
			assert.Equal(t, []string{"on-time/1", "just-behind/1"}, without(q.order(), "h/1"), "moved by the bound")
			q.acquire("t-just-behind/1", node.Waiter{ID: "just-behind/1", Ticket: now - 10*hour, Lease: time.Minute})
			assert.Equal(t, []string{"on-time/1", "just-behind/1"}, without(q.order(), "h/1"), "a move beyond the bound keeps the place")
		})
	}
}

// without returns ids without id.
func without(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == id })
}
