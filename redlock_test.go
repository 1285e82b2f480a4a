package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// cluster starts n real redis-server processes and a client over them.
func cluster(t testing.TB, n int, opts ...redlock.Option) (*redlock.Client, []*redistest.Server) {
	t.Helper()
	servers := redistest.StartN(t, n)
	c, err := redlock.Dial(redistest.URLs(servers), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, servers
}

// occupancy counts the goroutines inside a critical section: how many are
// in now, the most ever in at once, and how many entered.
type occupancy struct{ inside, most, total atomic.Int64 }

func (o *occupancy) enter() {
	n := o.inside.Add(1)
	for m := o.most.Load(); n > m && !o.most.CompareAndSwap(m, n); m = o.most.Load() {
	}
	o.total.Add(1)
}

func (o *occupancy) leave() { o.inside.Add(-1) }

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestInvalidInput(t *testing.T) {
	n1, err := node.Dial("redis://127.0.0.1:1")
	require.NoError(t, err)
	n1b, err := node.Dial("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	n1db2, err := node.Dial("redis://127.0.0.1:1/2")
	require.NoError(t, err)
	tests := []struct {
		name string
		make func() error
		want string
	}{
		{"no nodes", func() error { _, err := redlock.New(nil); return err }, "no nodes"},
		{"nil node", func() error { _, err := redlock.New([]node.Node{nil}); return err }, "node 0 is nil"},
		{"duplicate node", func() error { _, err := redlock.New([]node.Node{n1, n1b}); return err }, "duplicate node 127.0.0.1:1/0"},
		{"two dbs of one node", func() error { _, err := redlock.New([]node.Node{n1, n1db2}); return err }, "same Redis instance 127.0.0.1:1"},
		{"no urls", func() error { _, err := redlock.Dial(nil); return err }, "no node URLs"},
		{"http url", func() error { _, err := redlock.Dial([]string{"http://localhost:6379"}); return err }, "scheme must be redis:// or rediss://"},
		{"no host", func() error { _, err := redlock.Dial([]string{"redis://:6379"}); return err }, "missing host"},
		{"bad db", func() error { _, err := redlock.Dial([]string{"redis://localhost/x"}); return err }, `database "x"`},
		{"bad port", func() error { _, err := redlock.Dial([]string{"redis://localhost:99999"}); return err }, `port "99999"`},
		{"duplicate url", func() error {
			_, err := redlock.Dial([]string{"redis://LOCALHOST:6379", "redis://localhost"})
			return err
		}, "same Redis instance localhost:6379"},
		{"two dbs of one instance", func() error { _, err := redlock.Dial([]string{"redis://h/0", "redis://h/1"}); return err }, "same Redis instance h:6379"},
		{"password not echoed", func() error { _, err := redlock.Dial([]string{"ftp://u:s3cret@h"}); return err }, "scheme"},
		{"ttl below 1ms", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithTTL(time.Microsecond)); return err }, "at least 1ms"},
		{"ttl eaten by drift", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithTTL(2*time.Millisecond)); return err }, "too short for its own drift allowance"},
		{"ttl sub-millisecond", func() error {
			_, err := redlock.New([]node.Node{n1}, redlock.WithTTL(1500*time.Microsecond))
			return err
		}, "whole number of milliseconds"},
		{"ttl absurd", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithTTL(1000*time.Hour)); return err }, "exceeds the maximum"},
		{"negative ttl", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithTTL(-time.Second)); return err }, "at least 1ms"},
		{"drift negative", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithDriftFactor(-0.1)); return err }, "drift factor"},
		{"drift too big", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithDriftFactor(0.5)); return err }, "drift factor"},
		{"node timeout negative", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithNodeTimeout(-1)); return err }, "node timeout"},
		{"backoff inverted", func() error {
			_, err := redlock.New([]node.Node{n1}, redlock.WithRetryBackoff(time.Second, time.Millisecond))
			return err
		}, "retry backoff"},
		{"prefix with brace", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithKeyPrefix("a{b")); return err }, "braces"},
		{"nil clock", func() error { _, err := redlock.New([]node.Node{n1}, redlock.WithClock(nil)); return err }, "nil clock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.make()
			require.Error(t, err)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}

	c, err := redlock.New([]node.Node{n1})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		resource string
		opts     []redlock.LockOption
		want     string
	}{
		"empty resource":     {"", nil, "empty resource"},
		"long resource":      {strings.Repeat("x", redlock.MaxResourceLen+1), nil, "exceeds"},
		"lock ttl too short": {"r", []redlock.LockOption{redlock.WithLockTTL(time.Millisecond)}, "drift allowance"},
		"lock backoff":       {"r", []redlock.LockOption{redlock.WithLockRetryBackoff(0, 0)}, "retry backoff"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.TryLock(ctx, tc.resource, tc.opts...)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			_, err = c.Lock(ctx, tc.resource, tc.opts...)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
		})
	}
}

// nodeAnswers records the nodes' answers, stragglers included, as the
// OnNodeReply hook reports them.
type nodeAnswers struct {
	mu   sync.Mutex
	byOp map[string][]redlock.NodeReplyEvent
	more chan struct{} // signalled (coalesced) after each answer
}

func newNodeAnswers() *nodeAnswers {
	return &nodeAnswers{byOp: map[string][]redlock.NodeReplyEvent{}, more: make(chan struct{}, 1)}
}

func (r *nodeAnswers) hook(e redlock.NodeReplyEvent) {
	r.mu.Lock()
	r.byOp[e.Op] = append(r.byOp[e.Op], e)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
}

// await waits until n answers to op ("acquire", "extend", ...) have been
// recorded in all, and returns them.
func (r *nodeAnswers) await(ctx context.Context, t *testing.T, op string, n int) []redlock.NodeReplyEvent {
	t.Helper()
	for {
		r.mu.Lock()
		got := append([]redlock.NodeReplyEvent(nil), r.byOp[op]...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.more:
		case <-ctx.Done():
			t.Fatalf("%d answers to %s recorded, want %d: %v", len(got), op, n, got)
		}
	}
}

func TestExclusion(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			// Every node's answer is counted, however loaded the machine:
			// with the default node timeout (500ms) a late answer would be
			// a failure instead of a refusal.
			answers := newNodeAnswers()
			c, servers := cluster(t, n, redlock.WithNodeTimeout(20*time.Second),
				redlock.WithHooks(redlock.Hooks{OnNodeReply: answers.hook}))
			ctx := ctxT(t, 30*time.Second)

			a, err := c.TryLock(ctx, "orders")
			require.NoError(t, err)
			assert.Equal(t, "orders", a.Resource())
			assert.True(t, a.Until().After(time.Now()))
			assert.True(t, a.Until().Before(time.Now().Add(redlock.DefaultTTL)))

			// The call returns once a majority agreed; stragglers land just after.
			for _, e := range answers.await(ctx, t, "acquire", n) {
				assert.True(t, e.OK, "node %s: %v", e.Node, e.Err)
			}
			for _, s := range servers {
				v, err := redis.String(s.Do("GET", "redlock:{orders}"))
				require.NoError(t, err)
				assert.Equal(t, a.Token(), v)
			}
			assert.Len(t, a.Token(), 32, "token is 16 random bytes, hex")

			_, err = c.TryLock(ctx, "orders")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			assert.Equal(t, "acquire", qe.Op)
			// The error counts the answers at the decision: once a node
			// refused, the others have a short grace (contend.go), which a
			// loaded machine can outlast. Every answer is counted below.
			assert.Zero(t, qe.Agreed, "%v", err)
			assert.Zero(t, qe.Failed, "%v", err)
			assert.Positive(t, qe.Refused, "decided on a refusal: %v", err)
			refused := map[string]bool{}
			for _, e := range answers.await(ctx, t, "acquire", 2*n)[n:] {
				assert.False(t, e.OK, "node %s granted a held lock", e.Node)
				assert.NoError(t, e.Err, "node %s", e.Node)
				refused[e.Node] = true
			}
			assert.Len(t, refused, n, "every node refused")

			other, err := c.TryLock(ctx, "invoices")
			require.NoError(t, err, "other resources are independent")
			require.NoError(t, other.Release(ctx))

			require.NoError(t, a.Release(ctx))
			// Release returns at a majority too: b asks once the key is
			// gone everywhere, else a node still holding it refuses b.
			for _, s := range servers {
				require.Eventually(t, func() bool {
					n, err := redis.Int(s.Do("EXISTS", "redlock:{orders}"))
					return err == nil && n == 0
				}, 10*time.Second, time.Millisecond)
			}
			require.NoError(t, a.Release(ctx), "releasing twice is harmless")
			b, err := c.TryLock(ctx, "orders")
			require.NoError(t, err)
			require.NoError(t, b.Release(ctx))
		})
	}
}

func TestTokensAreUniqueAndReleaseIsOwnerOnly(t *testing.T) {
	c, servers := cluster(t, 1)
	ctx := ctxT(t, 10*time.Second)
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		l, err := c.TryLock(ctx, "tok")
		require.NoError(t, err)
		v, err := redis.String(servers[0].Do("GET", "redlock:{tok}"))
		require.NoError(t, err)
		require.False(t, seen[v], "token reused")
		seen[v] = true
		require.NoError(t, l.Release(ctx))
	}
	// A key taken over by someone else is not deleted by a stale holder.
	l, err := c.TryLock(ctx, "tok")
	require.NoError(t, err)
	_, err = servers[0].Do("SET", "redlock:{tok}", "someone-else")
	require.NoError(t, err)
	require.ErrorIs(t, l.Release(ctx), redlock.ErrLockLost)
	v, err := redis.String(servers[0].Do("GET", "redlock:{tok}"))
	require.NoError(t, err)
	assert.Equal(t, "someone-else", v)
}

func TestExtend(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithTTL(5*time.Second))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "ext")
	require.NoError(t, err)
	before := l.Until()
	for _, s := range servers {
		_, err := s.Do("PEXPIRE", "redlock:{ext}", 1000)
		require.NoError(t, err)
	}
	require.NoError(t, l.Extend(ctx))
	assert.True(t, l.Until().After(before), "Until moves forward")
	for _, s := range servers { // Extend returns at a majority; the rest land just after
		require.Eventually(t, func() bool {
			pttl, err := redis.Int64(s.Do("PTTL", "redlock:{ext}"))
			return err == nil && pttl > 4000
		}, 10*time.Second, time.Millisecond, "lease renewed to the TTL")
	}

	// Lost on a majority: Extend reports it and never re-creates the keys.
	for _, s := range servers[:2] {
		_, err := s.Do("DEL", "redlock:{ext}")
		require.NoError(t, err)
	}
	err = l.Extend(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	for _, s := range servers[:2] {
		assert.Empty(t, s.Keys("redlock:{ext}"), "a lapsed lock is never re-taken by Extend")
	}
	require.ErrorIs(t, l.Release(ctx), redlock.ErrLockLost)
	require.ErrorIs(t, l.Extend(ctx), redlock.ErrLockLost, "extend after release")
}

// A failed attempt releases what it took on the minority, and leaves other
// owners' keys alone.
func TestPartialAcquisitionIsReleased(t *testing.T) {
	c, servers := cluster(t, 5)
	ctx := ctxT(t, 10*time.Second)
	for _, s := range servers[:3] {
		_, err := s.Do("SET", "redlock:{part}", "foreign", "PX", 60000)
		require.NoError(t, err)
	}
	_, err := c.TryLock(ctx, "part")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, c.Close()) // waits for the background releases
	for _, s := range servers[3:] {
		assert.Empty(t, s.Keys("redlock:*"), "partial acquisition left behind on %s", s.Addr())
	}
	for _, s := range servers[:3] {
		v, err := redis.String(s.Do("GET", "redlock:{part}"))
		require.NoError(t, err)
		assert.Equal(t, "foreign", v)
	}
	_, err = c.TryLock(ctx, "part")
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// A paused minority does not hold acquisition back: Lock returns while the
// paused nodes' calls are still pending (the node timeout is far longer than the
// context), and its keys are released once those nodes answer.
func TestPausedMinority(t *testing.T) {
	c, servers := cluster(t, 5, redlock.WithNodeTimeout(time.Minute))
	servers[0].Pause()
	servers[1].Pause()
	for i := 0; i < 20; i++ {
		ctx := ctxT(t, 20*time.Second)
		l, err := c.Lock(ctx, "pm")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	servers[0].Resume()
	servers[1].Resume()
	require.NoError(t, c.Close())
	for _, s := range servers {
		assert.Empty(t, s.Keys("redlock:*"), "stranded key on %s", s.Addr())
	}
}

// A paused majority makes Lock fail when its context ends, not when the node
// calls time out.
func TestPausedMajorityFailsAtDeadline(t *testing.T) {
	c, servers := cluster(t, 5, redlock.WithNodeTimeout(time.Minute))
	for _, s := range servers[:3] {
		s.Pause()
	}
	ctx := ctxT(t, 300*time.Millisecond)
	start := time.Now()
	_, err := c.Lock(ctx, "pM")
	elapsed := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 30*time.Second, "Lock waited for the node timeout instead of its context")
	for _, s := range servers[:3] {
		s.Resume()
	}
	require.NoError(t, c.Close())
	for _, s := range servers {
		assert.Empty(t, s.Keys("redlock:*"), "stranded key on %s", s.Addr())
	}
}

// Cancelling Lock mid-way (a majority is paused, so the attempt is in flight)
// leaves no key behind once the nodes resume and answer.
func TestCancelMidAcquireLeavesNoKeys(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(time.Minute))
	servers[1].Pause()
	servers[2].Pause()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "cancel")
		done <- err
	}()
	// Wait for the healthy node to hold the key: the attempt is then in flight.
	require.Eventually(t, func() bool { return len(servers[0].Keys("redlock:{cancel}")) == 1 },
		10*time.Second, time.Millisecond)
	cancel()
	err := <-done
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	servers[1].Resume()
	servers[2].Resume()
	require.NoError(t, c.Close())
	for _, s := range servers {
		assert.Empty(t, s.Keys("redlock:*"), "stranded key on %s", s.Addr())
	}
}

func TestKilledNode(t *testing.T) {
	c, servers := cluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	servers[2].Kill()
	l, err := c.Lock(ctx, "k")
	require.NoError(t, err, "a dead minority does not prevent locking")
	require.NoError(t, l.Release(ctx))

	servers[1].Kill()
	_, err = c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var ne *redlock.NodeError
	require.ErrorAs(t, err, &ne, "per-node detail is reachable")
	assert.Contains(t, []string{servers[1].Addr() + "/0", servers[2].Addr() + "/0"}, ne.Node)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Failed)

	servers[1].Restart()
	servers[2].Restart()
	l, err = c.Lock(ctx, "k")
	require.NoError(t, err, "restarted nodes vote again")
	require.NoError(t, l.Release(ctx))
}

// Scripts are sent by SHA; after SCRIPT FLUSH the NOSCRIPT fallback sends them again.
func TestScriptFlushFallback(t *testing.T) {
	c, servers := cluster(t, 1)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 3; i++ {
		_, err := servers[0].Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		l, err := c.TryLock(ctx, "flush")
		require.NoError(t, err)
		_, err = servers[0].Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx))
		_, err = servers[0].Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
}

// Many goroutines contend for one resource; at most one is ever inside.
func TestMutualExclusionUnderContention(t *testing.T) {
	c, _ := cluster(t, 3, redlock.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	ctx := ctxT(t, 60*time.Second)
	var occ occupancy
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				l, err := c.Lock(ctx, "hot")
				if !assert.NoError(t, err) {
					return
				}
				occ.enter()
				occ.leave()
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), occ.most.Load())
	assert.Equal(t, int64(120), occ.total.Load())
}

func TestLogsCarryDigestsOnly(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, servers := cluster(t, 1, redlock.WithLogger(logger))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "secret-resource")
	require.NoError(t, err)
	token, err := redis.String(servers[0].Do("GET", "redlock:{secret-resource}"))
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "secret-resource")
	require.Error(t, err)
	require.NoError(t, l.Extend(ctx))
	require.NoError(t, l.Release(ctx))
	out := buf.String()
	assert.Contains(t, out, "lock acquired")
	assert.Contains(t, out, "lock not acquired")
	assert.Contains(t, out, redlock.Digest("redlock:{secret-resource}"))
	assert.NotContains(t, out, "secret-resource")
	assert.NotContains(t, out, token)
}

func TestErrorsAs(t *testing.T) {
	err := error(&redlock.QuorumError{Op: "acquire", Kind: redlock.ErrNotAcquired, Need: 2, Nodes: 3,
		Errs: []*redlock.NodeError{{Node: "n1", Err: context.DeadlineExceeded}}})
	wrapped := fmt.Errorf("outer: %w", err)
	assert.ErrorIs(t, wrapped, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, wrapped, redlock.ErrLockLost)
	assert.ErrorIs(t, wrapped, context.DeadlineExceeded, "node causes are reachable")
	var ne *redlock.NodeError
	require.True(t, errors.As(wrapped, &ne))
	assert.Equal(t, "n1", ne.Node)
	assert.Contains(t, wrapped.Error(), "acquire on 3 nodes (2 needed): 0 agreed")
}

// An attempt whose majority cannot answer within the lease gives up then, even
// with a longer node timeout and context, and releases what it took.
func TestAttemptOutlivingItsLease(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithTTL(200*time.Millisecond), redlock.WithNodeTimeout(time.Minute))
	servers[1].Pause()
	servers[2].Pause()
	defer servers[1].Resume()
	defer servers[2].Resume()
	start := time.Now()
	_, err := c.TryLock(ctxT(t, time.Minute), "outlived")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Less(t, time.Since(start), 30*time.Second, "it gave up at the lease, not at the node timeout")
	// The wait for a majority ends at TTL − drift, 4 ms before the node calls
	// (bounded by the TTL) fail: usually it is what ends the attempt, but on a
	// loaded machine the failed calls may be counted first.
	if !strings.Contains(err.Error(), "before the lease would have run out") {
		assert.ErrorIs(t, err, context.DeadlineExceeded, "%v", err)
	}
	require.Eventually(t, func() bool { return len(servers[0].Keys("redlock:*")) == 0 },
		10*time.Second, 5*time.Millisecond, "the partial acquisition is released")
}
