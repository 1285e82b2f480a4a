package redlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// TestGiveBackBacksOff: n0, n1 have the counter, n2 none; n1 is held by
// someone else for 1.5 s. Every grant is {n0, n2}: it cannot fence, and is
// given back. How many attempts does one Lock(WithFence) make meanwhile?
func TestGiveBackBacksOff(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	t.Run("default", func(t *testing.T) { giveBackPace(t) })
	t.Run("fair", func(t *testing.T) { giveBackPace(t, redlock.WithFair()) })
}

func giveBackPace(t *testing.T, opts ...redlock.Option) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	lockKey := redlock.LockKey(redlock.DefaultKeyPrefix, "res")
	fenceKey := redlock.FenceKey(redlock.DefaultKeyPrefix, "res")
	for _, s := range servers[:2] {
		_, err := s.Do("SET", fenceKey, "5")
		require.NoError(t, err)
	}
	_, err := servers[1].Do("SET", lockKey, "someone-else", "PX", 1500)
	require.NoError(t, err)
	var attempts, granted, givenBack atomic.Int64
	c, err := redlock.Dial(redistest.URLs(servers), append(opts, redlock.WithNodeTimeout(2*time.Second),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
			attempts.Add(1)
			switch {
			case e.Acquired:
				granted.Add(1)
			case e.Agreed >= 2 && e.Validity > 0: // a majority granted it: given back
				givenBack.Add(1)
			}
		}}))...)
	require.NoError(t, err)
	defer c.Close()
	before := cmdCount(t, servers)
	start := time.Now()
	l, err := c.Lock(ctx, "res", redlock.WithFence())
	require.NoError(t, err)
	el := time.Since(start)
	tok, err := l.Fence(ctx)
	require.NoError(t, err)
	after := cmdCount(t, servers)
	t.Logf("Lock(WithFence) took %v: %d attempts, %d granted and given back, token %d, server commands %v",
		el, attempts.Load(), givenBack.Load(), tok, cmdDiff(after, before))
	assert.Equal(t, int64(1), granted.Load(), "OnAttempt reports only the grant that was kept as acquired")
	assert.Positive(t, givenBack.Load(), "no grant was given back: the test's fault did not bite")
	require.NoError(t, l.Release(ctx))
	// With backoff (4 ms doubling to 250 ms; 125 ms for a writer) 1.5 s takes
	// about 15 to 30 attempts; woken by its own give-backs, hundreds.
	require.Less(t, attempts.Load(), int64(80), "the call retried at once after each give-back: a hot loop")
}

func cmdCount(t *testing.T, servers []*redistest.Server) []int {
	out := make([]int, len(servers))
	for i, s := range servers {
		v, err := s.Do("INFO", "stats")
		require.NoError(t, err)
		var n int
		for _, line := range splitLines(string(v.([]byte))) {
			if k := "total_commands_processed:"; len(line) > len(k) && line[:len(k)] == k {
				for _, ch := range line[len(k):] {
					if ch >= '0' && ch <= '9' {
						n = n*10 + int(ch-'0')
					}
				}
			}
		}
		out[i] = n
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func cmdDiff(a, b []int) []int {
	out := make([]int, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// TestGiveBackBacksOffWLock: the same for WLock(WithFence).
func TestGiveBackBacksOffWLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 20*time.Second)
	lockKey := redlock.LockKey(redlock.DefaultKeyPrefix, "res")
	fenceKey := redlock.FenceKey(redlock.DefaultKeyPrefix, "res")
	for _, s := range servers[:2] {
		_, err := s.Do("SET", fenceKey, "5")
		require.NoError(t, err)
	}
	_, err := servers[1].Do("SET", lockKey, "someone-else", "PX", 1500)
	require.NoError(t, err)
	// The first attempt is refused (n0 and n2 held for 30 ms): the call then
	// listens on the lock key's channel, where every give-back's release
	// publishes.
	for _, s := range []*redistest.Server{servers[0], servers[2]} {
		_, err = s.Do("SET", lockKey, "brief", "PX", 30)
		require.NoError(t, err)
	}
	var attempts, granted, givenBack atomic.Int64
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(2*time.Second),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
			attempts.Add(1)
			switch {
			case e.Acquired:
				granted.Add(1)
			case e.Agreed >= 2 && e.Validity > 0: // a majority granted it: given back
				givenBack.Add(1)
			}
		}}))
	require.NoError(t, err)
	defer c.Close()
	before := cmdCount(t, servers)
	start := time.Now()
	l, err := c.WLock(ctx, "res", redlock.WithFence())
	require.NoError(t, err)
	el := time.Since(start)
	tok, err := l.Fence(ctx)
	require.NoError(t, err)
	after := cmdCount(t, servers)
	t.Logf("WLock(WithFence) took %v: %d attempts, %d granted and given back, token %d, server commands %v",
		el, attempts.Load(), givenBack.Load(), tok, cmdDiff(after, before))
	assert.Equal(t, int64(1), granted.Load(), "OnAttempt reports only the grant that was kept as acquired")
	assert.Positive(t, givenBack.Load(), "no grant was given back: the test's fault did not bite")
	require.NoError(t, l.Release(ctx))
	// With backoff (4 ms doubling to 250 ms; 125 ms for a writer) 1.5 s takes
	// about 15 to 30 attempts; woken by its own give-backs, hundreds.
	require.Less(t, attempts.Load(), int64(80), "the call retried at once after each give-back: a hot loop")
}
