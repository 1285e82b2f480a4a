package goredis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sync/atomic"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestClusterWakeOtherSlot: on a goredis Cluster node that watched a key on
// master X first, a waiter of a lock key on master Y is woken by a release
// (its watch is on Y, where the release PUBLISHes) and stays queued.
func TestClusterWakeOtherSlot(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	c := redistest.StartCluster(t, 3)
	cc := clusterClient(t, c, nil)
	n := newNode(t, cc)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master := func(k string) string {
		m, err := cc.MasterForKey(ctx, k)
		require.NoError(t, err)
		return m.Options().Addr
	}
	a := "cw:{a}"
	var b string
	for i := 0; ; i++ {
		b = fmt.Sprintf("redlock:{b%d}", i)
		if master(b) != master(a) {
			break
		}
	}
	t.Logf("first watch %s on %s, lock %s on %s", a, master(a), b, master(b))
	_, stopA, err := n.Watch(ctx, a) // opens the shared PubSub on a's master
	require.NoError(t, err)
	defer stopA()

	ok, err := n.Acquire(ctx, b, b+":fence", "holder", time.Minute)
	require.NoError(t, err)
	require.True(t, ok.OK)
	w := node.Waiter{ID: "grp/1", Ticket: time.Now().UnixMicro(), Lease: time.Minute}
	ch, stopW, err := n.Watch(ctx, node.WaiterChannel(b, w.ID))
	require.NoError(t, err)
	defer stopW()
	r, err := n.AcquireFair(ctx, b, b+":fence", "waiter", time.Minute, w)
	require.NoError(t, err)
	require.Equal(t, node.Queued, r.Queue)
	q, _ := node.QueueKeys(b)

	rel, _, err := n.ReleaseFair(ctx, b, "holder", "", true)
	require.NoError(t, err)
	require.True(t, rel)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the queued, listening waiter got no wake-up")
	}
	after, err := cc.ZRange(ctx, q, 0, -1).Result()
	require.NoError(t, err)
	require.Contains(t, after, w.ID, "a woken waiter stays queued")
}

// TestClusterHerd: three listening waiters of a lock key on another master
// than the first key watched: one release wakes the first only (the wake
// queue, since replaced, woke all three when every watch shared the first
// key's master).
func TestClusterHerd(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	c := redistest.StartCluster(t, 3)
	cc := clusterClient(t, c, nil)
	n := newNode(t, cc)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master := func(k string) string {
		m, err := cc.MasterForKey(ctx, k)
		require.NoError(t, err)
		return m.Options().Addr
	}
	a := "cw:{a}"
	var b string
	for i := 0; ; i++ {
		b = fmt.Sprintf("redlock:{b%d}", i)
		if master(b) != master(a) {
			break
		}
	}
	_, stopA, err := n.Watch(ctx, a)
	require.NoError(t, err)
	defer stopA()
	ok, err := n.Acquire(ctx, b, b+":fence", "holder", time.Minute)
	require.NoError(t, err)
	require.True(t, ok.OK)
	var chans []<-chan struct{}
	for i := range 3 {
		w := node.Waiter{ID: fmt.Sprintf("g%d/1", i), Ticket: time.Now().UnixMicro() + int64(i), Lease: time.Minute}
		ch, stop, err := n.Watch(ctx, node.WaiterChannel(b, w.ID))
		require.NoError(t, err)
		defer stop()
		chans = append(chans, ch)
		r, err := n.AcquireFair(ctx, b, b+":fence", "w", time.Minute, w)
		require.NoError(t, err)
		require.Equal(t, node.Queued, r.Queue)
	}
	rel, _, err := n.ReleaseFair(ctx, b, "holder", "", true)
	require.NoError(t, err)
	require.True(t, rel)
	select {
	case <-chans[0]:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the first waiter got no wake-up")
	}
	time.Sleep(300 * time.Millisecond) // the others' would-be wake-ups are on their way
	woken := 1
	for _, ch := range chans[1:] {
		select {
		case <-ch:
			woken++
		default:
		}
	}
	q, _ := node.QueueKeys(b)
	after, _ := cc.ZRange(ctx, q, 0, -1).Result()
	t.Logf("woken by one release: %d of 3; queue after: %q", woken, after)
	require.Equal(t, 1, woken, "a release wakes the first waiter only")
}

// TestClusterClientHerd: lock clients over one goredis Cluster node that
// watched a key on another master than the resource's first: one release
// makes one waiting client attempt, not all of them.
func TestClusterClientHerd(t *testing.T) {
	t.Parallel() // its servers are its own; it mostly waits (failovers, quarantines)
	c := redistest.StartCluster(t, 3)
	cc := clusterClient(t, c, nil)
	n := newNode(t, cc)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	master := func(k string) string {
		m, err := cc.MasterForKey(ctx, k)
		require.NoError(t, err)
		return m.Options().Addr
	}
	a := "cw:{a}"
	var res string
	for i := 0; ; i++ {
		res = fmt.Sprintf("r%d", i)
		if master(redlock.LockKey("redlock", res)) != master(a) && master(redlock.LockKey("", res)) != master(a) {
			break
		}
	}
	_, stopA, err := n.Watch(ctx, a)
	require.NoError(t, err)
	defer stopA()
	holder, err := redlock.New([]node.Node{n})
	require.NoError(t, err)
	defer holder.Close()
	held, err := holder.Lock(ctx, res)
	require.NoError(t, err)
	const k = 4
	attempts := make([]atomic.Int64, k)
	got := make(chan int, k)
	for i := range k {
		cl, err := redlock.New([]node.Node{n}, redlock.WithRetryBackoff(time.Minute, time.Minute),
			redlock.WithHooks(redlock.Hooks{OnAttempt: func(redlock.AttemptEvent) { attempts[i].Add(1) }}))
		require.NoError(t, err)
		defer cl.Close()
		go func() {
			l, err := cl.Lock(ctx, res)
			if err == nil {
				got <- i
				<-ctx.Done()
				_ = l
			}
		}()
		require.Eventually(t, func() bool { return attempts[i].Load() >= 2 }, 5*time.Second, time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	var before [k]int64
	for i := range k {
		before[i] = attempts[i].Load()
	}
	require.NoError(t, held.Release(ctx))
	w := <-got
	time.Sleep(300 * time.Millisecond)
	tried := 0
	for i := range k {
		if attempts[i].Load() > before[i] {
			tried++
		}
	}
	t.Logf("client %d got the lock; %d of %d waiting clients attempted after one release", w, tried, k)
	require.Equal(t, 1, tried, "a release wakes the first waiter only")
}
