package redlock_test

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// nodeReplies counts, per node, the replies seen by the OnNodeReply hook.
type nodeReplies struct {
	mu   sync.Mutex
	down map[string]int // ErrNodeDown: not sent
	ok   map[string]int
}

func (r *nodeReplies) hook(e redlock.NodeReplyEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(e.Err, redlock.ErrNodeDown) {
		r.down[e.Node]++
	}
	if e.OK {
		r.ok[e.Node]++
	}
}

func (r *nodeReplies) counts(name string) (down, ok int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[name], r.ok[name]
}

// closedPort returns the address of a loopback port nobody listens on: calls to
// it are refused at once.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// A paused or refusing node fails fast once its breaker opened: acquisitions
// stop waiting for it, nothing is sent to it, its cleanup releases wait for it
// and are sent once it answers a probe again, and Close is not held back by the
// probe.
func TestBreaker(t *testing.T) {
	const nodeTimeout = 250 * time.Millisecond
	for _, tc := range []struct {
		name     string
		failures int // WithBreaker
		refused  bool
	}{
		{"paused", redlock.DefaultBreakerFailures, false},
		{"refused", redlock.DefaultBreakerFailures, true},
		{"paused without breaker", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			servers := redistest.StartN(t, 3)
			urls := redistest.URLs(servers)
			if tc.refused {
				urls[0] = "redis://" + closedPort(t)
			}
			replies := &nodeReplies{down: map[string]int{}, ok: map[string]int{}}
			// A node timeout of 250ms: with one of 3 nodes paused a Release
			// asks the two others and needs both, so a healthy node slower
			// than the timeout fails it; at 100ms, a CI run's race-built
			// tests beside the simulation on 2 cores did (5 December).
			c, err := redlock.Dial(urls, redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(nodeTimeout),
				redlock.WithBreaker(tc.failures), redlock.WithHooks(redlock.Hooks{OnNodeReply: replies.hook}))
			require.NoError(t, err)
			bad := servers[0].Addr() + "/0"
			if tc.refused {
				bad = urls[0][len("redis://"):] + "/0"
			} else {
				servers[0].Pause()
			}
			lockRelease := func() {
				ctx := ctxT(t, 10*time.Second)
				l, err := c.Lock(ctx, "breaker")
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
			}
			if tc.failures == 0 {
				// Past several node timeouts, every call is still sent.
				for start := time.Now(); time.Since(start) < 5*nodeTimeout; {
					lockRelease()
				}
				down, _ := replies.counts(bad)
				assert.Zero(t, down, "without a breaker every call is sent")
			} else {
				// The calls to the bad node fail (time out or are refused) until
				// the breaker opens; from then on they are not sent.
				require.Eventually(t, func() bool {
					lockRelease()
					down, _ := replies.counts(bad)
					return down > 0
				}, 10*time.Second, time.Millisecond)
				before, _ := replies.counts(bad)
				for range 20 {
					lockRelease()
				}
				// Every acquisition failed fast on the bad node (a round returns
				// with a majority: its last hook calls may follow).
				assert.Eventually(t, func() bool {
					down, _ := replies.counts(bad)
					return down-before >= 20
				}, 5*time.Second, time.Millisecond, "acquisitions failed fast")
			}
			if !tc.refused {
				servers[0].Resume()
				// The probe sees the node answer; then it votes again, and the
				// releases that waited for it are sent.
				require.Eventually(t, func() bool {
					l, err := c.TryLock(ctxT(t, time.Second), "breaker")
					if err == nil {
						require.NoError(t, l.Release(ctxT(t, time.Second)))
					}
					_, ok := replies.counts(bad)
					return ok > 0
				}, 15*time.Second, 20*time.Millisecond)
				if tc.failures > 0 {
					require.Eventually(t, func() bool { return len(servers[0].Keys("redlock:*")) == 0 },
						5*time.Second, 10*time.Millisecond, "cleanup releases sent once the node answered")
				}
				// Without a breaker nothing waits for the node: a release that
				// timed out while it was paused is not sent again, and when
				// the paused node ran it before the SET it was to undo (they
				// had gone out on different connections: a CI run), that key
				// stays until its TTL (docs/operations.md, node health).
			}
			start := time.Now()
			require.NoError(t, c.Close())
			assert.Less(t, time.Since(start), 1500*time.Millisecond, "Close waited for the probe")
			require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+20 }, 5*time.Second, 10*time.Millisecond,
				"goroutines: %d before, %d after Close", before, runtime.NumGoroutine())
		})
	}
}

func TestBreakerInvalid(t *testing.T) {
	_, err := redlock.Dial([]string{"redis://127.0.0.1:1"}, redlock.WithBreaker(-1))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "breaker failures -1")
}
