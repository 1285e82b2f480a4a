package node_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
)

// silent accepts and never answers: TCP connects, TLS never finishes its
// handshake, commands never get a reply. It returns when the connection closes.
func silent(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// fullBacklog returns the address of a socket that listens with a backlog of 0
// and never accepts, its queue filled: new connections hang in connect (the
// SYNs are dropped), as with a node whose host is overloaded or gone.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	for i := 0; i < 4; i++ { // fill the accept queue; later connects hang
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
		t.Skip("this kernel completes connections beyond the backlog")
	}
	return addr
}

// hungNodes returns the URLs and options of nodes that never answer.
func hungNodes(t *testing.T) map[string]struct {
	url  string
	opts []node.Option
} {
	silentSrv := startFake(t, silentServe)
	tlsOpt := node.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})
	return map[string]struct {
		url  string
		opts []node.Option
	}{
		"accepts, never answers": {silentSrv.URL(), nil},
		"TLS never handshakes":   {"rediss://" + silentSrv.ln.Addr().String(), []node.Option{tlsOpt}},
		"backlog full":           {"redis://" + fullBacklog(t), nil},
	}
}

var silentServe = silent

// TestHungNodeDeadlines: against a node that never answers (or never accepts,
// or never finishes TLS), every call returns by its context's deadline, load
// does not pile up goroutines, and Close is quick and leaves nothing behind.
func TestHungNodeDeadlines(t *testing.T) {
	for name, hn := range hungNodes(t) {
		t.Run(name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			n, err := node.Dial(hn.url, hn.opts...)
			require.NoError(t, err)
			for i := 0; i < 3; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				start := time.Now()
				err := n.Ping(ctx)
				el := time.Since(start)
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
				start = time.Now()
				_, aerr := n.Acquire(ctx, "k", "k:f", "tok", time.Second)
				el2 := time.Since(start)
				cancel()
				// The deadline is 100ms; the slack absorbs a loaded machine (the
				// race detector, 2 shared cores). Before, these took 10s.
				assert.Less(t, el, time.Second, "deadline 100ms")
				require.Error(t, err)
				require.Error(t, aerr)
				t.Logf("Ping returned after %v, Acquire after %v: %v", el.Round(time.Millisecond), el2.Round(time.Millisecond), err)
				assert.Less(t, el2, time.Second, "deadline 100ms")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			_, stop, err := n.Watch(ctx, "k")
			cancel()
			require.Error(t, err)
			assert.Less(t, time.Since(start), time.Second, "Watch, deadline 100ms")
			stop()
			peak, calls, late := hammer(n, 64, time.Second)
			t.Logf("64 goroutines for 1s: goroutine peak %d (baseline %d), %d calls, %d later than deadline+node timeout", peak, base, calls, late)
			// The callers, and at most one timer goroutine each (a context
			// deadline firing): nothing that accumulates.
			assert.Less(t, peak, base+2*64+20)
			assert.LessOrEqual(t, late*100, calls, "at most 1% late, for a loaded machine")
			start = time.Now()
			require.NoError(t, n.Close())
			closeTime := time.Since(start)
			assert.Less(t, closeTime, 1500*time.Millisecond)
			require.Eventually(t, func() bool { return runtime.NumGoroutine() <= base+20 }, 2*time.Second, 10*time.Millisecond)
			t.Logf("Close took %v; goroutines after: %d", closeTime.Round(time.Microsecond), runtime.NumGoroutine())
		})
	}
}

// hammer makes calls with 100ms deadlines from g goroutines for d, and returns
// the goroutine peak and how many calls returned later than their deadline plus
// the node timeout (the bound the lock client promises).
func hammer(n *node.Redis, g int, d time.Duration) (peak int, calls, late int64) {
	var wg sync.WaitGroup
	var lateN, callsN atomic.Int64
	end := time.Now().Add(d)
	stopSample := make(chan struct{})
	sampled := make(chan int)
	go func() {
		p := 0
		for {
			select {
			case <-stopSample:
				sampled <- p
				return
			case <-time.After(5 * time.Millisecond):
				p = max(p, runtime.NumGoroutine())
			}
		}
	}()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				start := time.Now()
				_, _ = n.Acquire(ctx, "k", "k:f", "tok", time.Second)
				_, _ = n.Release(ctx, "k", "tok", false)
				callsN.Add(1)
				if time.Since(start) > 100*time.Millisecond+node.DefaultTimeout {
					lateN.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	close(stopSample)
	return <-sampled, callsN.Load(), lateN.Load()
}

// TestQueuedRequestFailsWithConnection: a request waiting on a connection that
// dies gets that connection's error at once, not its timeout.
func TestQueuedRequestFailsWithConnection(t *testing.T) {
	srv := startFake(t, func(c net.Conn) {
		var b [64]byte
		_, _ = c.Read(b[:])
		time.Sleep(100 * time.Millisecond)
		c.Close()
	})
	n, err := node.Dial(srv.URL(), node.WithTimeout(5*time.Second))
	require.NoError(t, err)
	defer n.Close()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := n.Ping(context.Background())
			assert.Error(t, err)
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(start), 2*time.Second)
		}()
	}
	wg.Wait()
}
