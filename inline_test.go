package redlock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestSingleNodeCallerEndsInlineWait: with one node the acquisition's node
// call runs on the caller's goroutine (an inline round, a lone command), yet
// the caller's context still ends the call at once: cancelled, or at its
// deadline, against a paused node whose timeout is far longer. The node is
// not blamed for it (its health records no failure), and the acquisition,
// which lands once the node resumes, is released.
func TestSingleNodeCallerEndsInlineWait(t *testing.T) {
	const nodeTimeout = 3 * time.Second
	s := redistest.Start(t)
	c, err := redlock.Dial([]string{s.URL()}, redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	warm, err := c.TryLock(context.Background(), "inline-warm")
	require.NoError(t, err)
	require.NoError(t, warm.Release(context.Background()))

	ends := map[string]func() (context.Context, context.CancelFunc){
		"cancelled": func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		},
		"deadline": func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			key := "inline-" + name
			s.Pause()
			ctx, cancel := end()
			start := time.Now()
			_, err := c.TryLock(ctx, key)
			took := time.Since(start)
			cancel()
			s.Resume()
			require.Error(t, err)
			assert.ErrorIs(t, err, ctx.Err())
			assert.Less(t, took, nodeTimeout/2, "the caller's context ended the wait, not the node timeout")
			h := c.Health()[0]
			assert.Equal(t, redlock.NodeOK, h.State, "no failure recorded for a call the caller gave up: %+v", h)
			assert.Zero(t, h.Failures)
			// The acquisition landed once the node resumed; it is released.
			require.Eventually(t, func() bool { return len(s.Keys("*"+key+"*")) == 0 }, 5*time.Second, 10*time.Millisecond,
				"the acquisition the caller gave up was not released")
			l, err := c.TryLock(context.Background(), key)
			require.NoError(t, err, "free again")
			require.NoError(t, l.Release(context.Background()))
		})
	}
}

// TestReleaseSentWhenCallerGaveUpDuringDial: Release's deletes run whatever
// its context does: at N=1 (an inline round) with a context that ended while
// the node's connection was being dialed again, the release is still sent
// (an adversarial review found it dropped: the key held for its TTL).
func TestReleaseSentWhenCallerGaveUpDuringDial(t *testing.T) {
	s := redistest.Start(t)
	c, err := redlock.Dial([]string{s.URL()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryLock(context.Background(), "dialed-again", redlock.WithLockTTL(time.Minute))
	require.NoError(t, err)
	// The connection breaks, and a call fails on it: the next one dials.
	// An Extend, which undoes nothing on failure (a failed acquisition's
	// undo would dial at once). One that succeeds found the connection
	// closed already and dialed (the reader saw the close first): break
	// the new one, and again. A Release written on a broken connection
	// nobody noticed yet would be lost with it (a CI run under load),
	// which is not this test's case.
	broken := false
	for range 20 {
		_, _ = s.Do("CLIENT", "KILL", "TYPE", "normal")
		if l.Extend(context.Background()) != nil {
			broken = true
			break
		}
	}
	require.True(t, broken, "no call failed on a broken connection in 20 tries: the case was not built")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a request's context, over before its deferred Release
	_ = l.Release(ctx)
	require.Eventually(t, func() bool { return len(s.Keys("*dialed-again*")) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the release was not sent")
}

// delayedConn delivers its writes in order, the first one after arm was set
// 300ms late (a lost segment, retransmitted).
type delayedConn struct {
	net.Conn
	arm    *atomic.Bool
	landed chan<- struct{} // told once the late write was written
	mu     sync.Mutex
	q      chan delayedWrite // nil once closed
}

type delayedWrite struct {
	b    []byte
	at   time.Time
	late bool
}

func (d *delayedConn) Write(p []byte) (int, error) {
	at, late := time.Now(), d.arm.CompareAndSwap(true, false)
	if late {
		at = at.Add(300 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.q == nil {
		return 0, net.ErrClosed
	}
	d.q <- delayedWrite{append([]byte(nil), p...), at, late}
	return len(p), nil
}

func (d *delayedConn) Close() error {
	d.mu.Lock()
	if d.q != nil {
		close(d.q)
		d.q = nil
	}
	d.mu.Unlock()
	return d.Conn.Close()
}

func (d *delayedConn) loop(q <-chan delayedWrite) {
	for w := range q {
		time.Sleep(time.Until(w.at))
		if _, err := d.Conn.Write(w.b); err != nil {
			return
		}
		if w.late {
			d.landed <- struct{}{}
		}
	}
}

// TestUndoStaysBehindAcquisition: with several connections to the node, the
// release that undoes an acquisition its caller gave up (N=1: the call's
// reply unknown) takes the acquisition's connection, behind it: it never
// overtakes it on another, which would leave the key held for its TTL by
// nobody (an adversarial review's timeline: the acquisition's bytes 300ms
// late, the caller gone at 50ms).
func TestUndoStaysBehindAcquisition(t *testing.T) {
	s := redistest.Start(t)
	var arm atomic.Bool
	landed := make(chan struct{}, 1)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nd net.Dialer
		nc, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		q := make(chan delayedWrite, 64)
		d := &delayedConn{Conn: nc, arm: &arm, landed: landed, q: q}
		go d.loop(q)
		return d, nil
	}
	c, err := redlock.Dial([]string{s.URL()}, redlock.WithNodeTimeout(500*time.Millisecond),
		redlock.WithNodeOptions(node.WithConnections(2), node.WithDialer(dial)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for i := range 4 { // both connections dialed, the scripts loaded
		l, err := c.TryLock(context.Background(), fmt.Sprint("warm", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(context.Background()))
	}
	for i := range 3 {
		key := fmt.Sprint("overtaken", i)
		arm.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = c.TryLock(ctx, key, redlock.WithLockTTL(time.Minute))
		cancel()
		require.Error(t, err, "the acquisition is 300ms late")
		select {
		case <-landed: // the acquisition reached the server; its undo may follow
		case <-time.After(5 * time.Second):
			t.Fatal("the late write was never written")
		}
		require.Eventually(t, func() bool { return len(s.Keys("*"+key+"*")) == 0 }, 3*time.Second, 10*time.Millisecond,
			"the acquisition the caller gave up landed after its release: held for the TTL by nobody")
	}
}
