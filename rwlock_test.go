package redlock_test

import (
	"context"
	"fmt"
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

// rwHistory checks a read-write lock's history as its holders enter and
// leave: never a reader while a writer holds, never two writers.
type rwHistory struct {
	mu               sync.Mutex
	readers, writers int
	mostReaders      int
	reads, writes    int
	violations       []string
	fences           []uint64 // the writers' fencing tokens, in the order they entered
}

func (h *rwHistory) enterRead() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writers > 0 {
		h.violations = append(h.violations, fmt.Sprintf("a reader entered while %d writer(s) held", h.writers))
	}
	h.readers++
	h.reads++
	h.mostReaders = max(h.mostReaders, h.readers)
}

func (h *rwHistory) leaveRead() {
	h.mu.Lock()
	h.readers--
	h.mu.Unlock()
}

func (h *rwHistory) enterWrite(fence uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writers > 0 || h.readers > 0 {
		h.violations = append(h.violations, fmt.Sprintf("a writer entered while %d writer(s) and %d reader(s) held", h.writers, h.readers))
	}
	h.writers++
	h.writes++
	if fence != 0 {
		h.fences = append(h.fences, fence)
	}
}

func (h *rwHistory) leaveWrite() {
	h.mu.Lock()
	h.writers--
	h.mu.Unlock()
}

// seedFence fences a first, uncontended write lock of resource, so that
// every node has the resource's fence counter before writers contend: a
// first fenced grant under contention may leave a node that refused it
// without a counter, and a later grant by that node and a bare majority is
// then refused its token until the node is repaired (docs/fencing.md §6),
// for Lock as for WLock.
func seedFence(t *testing.T, c *redlock.Client, servers []*redistest.Server, resource string) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	w, err := c.WLock(ctx, resource, redlock.WithFence())
	require.NoError(t, err)
	// Fence returns at a majority: the last node's counter may still be on
	// its way, and must land inside the lock.
	for i, s := range servers {
		require.Eventually(t, func() bool {
			_, err := redis.Uint64(s.Do("GET", redlock.FenceKey(redlock.DefaultKeyPrefix, resource)))
			return err == nil
		}, 10*time.Second, time.Millisecond, "node %d has no fence counter after an uncontended fenced grant", i)
	}
	require.NoError(t, w.Release(ctx))
}

func TestRWReadersShare(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			c, _ := cluster(t, n)
			ctx := ctxT(t, 10*time.Second)
			var readers []*redlock.ReadLock
			for range 8 {
				r, err := c.RLock(ctx, "shared")
				require.NoError(t, err)
				assert.True(t, time.Now().Before(r.Until()))
				readers = append(readers, r)
			}
			_, err := c.TryWLock(ctx, "shared")
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while 8 readers hold")
			_, err = c.TryLock(ctx, "other")
			require.NoError(t, err, "another resource is not affected")
			for _, r := range readers {
				require.NoError(t, r.Release(ctx))
				assert.True(t, r.Until().IsZero())
				require.NoError(t, r.Release(ctx), "releasing twice")
			}
			w, err := c.WLock(ctx, "shared") // a release returns at its majority: the others may still be landing
			require.NoError(t, err, "the readers are gone")
			_, err = c.TryRLock(ctx, "shared")
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while a writer holds")
			_, err = c.TryWLock(ctx, "shared")
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second writer")
			require.NoError(t, w.Release(ctx))
		})
	}
}

// TestRWExclusion: goroutines of several clients take read and write locks on
// one resource at random; the history never has a reader beside a writer,
// nor two writers, and readers did share.
func TestRWExclusion(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var clients []*redlock.Client
	for range 3 {
		// A long node timeout: a release that times out on a loaded machine
		// leaves its reader for the TTL, and fails the test.
		c, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(3*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	seedFence(t, clients[0], servers, "rw-exclusion")
	ctx := ctxT(t, 60*time.Second)
	var h rwHistory
	var wg sync.WaitGroup
	for g := range 9 {
		c := clients[g%len(clients)]
		wg.Go(func() {
			for i := range 12 {
				if (g+i)%4 == 0 {
					w, err := c.WLock(ctx, "rw-exclusion", redlock.WithFence())
					if !assert.NoError(t, err) {
						return
					}
					f, err := w.Fence(ctx)
					assert.NoError(t, err)
					h.enterWrite(f)
					time.Sleep(time.Millisecond)
					h.leaveWrite()
					assert.NoError(t, w.Release(ctx))
					continue
				}
				r, err := c.RLock(ctx, "rw-exclusion")
				if !assert.NoError(t, err) {
					return
				}
				h.enterRead()
				time.Sleep(2 * time.Millisecond)
				h.leaveRead()
				assert.NoError(t, r.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Empty(t, h.violations)
	assert.Equal(t, 9*12, h.reads+h.writes)
	assert.Greater(t, h.mostReaders, 1, "readers never shared the lock")
	for i := 1; i < len(h.fences); i++ {
		assert.Greater(t, h.fences[i], h.fences[i-1], "writer fencing tokens must strictly increase: %v", h.fences)
	}
	t.Logf("%d reads (at most %d at once), %d writes, fences %v", h.reads, h.mostReaders, h.writes, h.fences)
}

// TestRWWriterNotStarved: readers come and go without a pause, always one
// holding, so that a writer refused once would be refused for ever if new
// readers were still admitted; the writer's mark keeps them out, and the
// writer gets in while the stream still runs.
func TestRWWriterNotStarved(t *testing.T) {
	c, _ := cluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	stop := make(chan struct{})
	var reads atomic.Int64
	read := make(chan struct{}, 1024) // a value per new read lock taken
	var wg sync.WaitGroup
	// Overlapping readers: each takes its next read lock before it releases
	// the last, so the set of readers is never empty unless new readers are
	// refused.
	for range 3 {
		wg.Go(func() {
			prev, err := c.RLock(ctx, "starve")
			if !assert.NoError(t, err) {
				return
			}
			for {
				select {
				case <-stop:
					assert.NoError(t, prev.Release(ctx))
					return
				default:
				}
				next, err := c.TryRLock(ctx, "starve")
				if err == nil {
					reads.Add(1)
					select {
					case read <- struct{}{}:
					default:
					}
				}
				time.Sleep(5 * time.Millisecond) // the reader's work
				assert.NoError(t, prev.Release(ctx))
				if err != nil { // refused: a writer waits; take a place again behind it
					next, err = c.RLock(ctx, "starve")
					if !assert.NoError(t, err) {
						return
					}
				}
				prev = next
			}
		})
	}
	awaitReads := func(n int, what string) {
		t.Helper()
		for range n {
			select {
			case <-read:
			case <-ctx.Done():
				t.Fatal(what)
			}
		}
	}
	awaitReads(20, "the readers did not start")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	w, err := c.WLock(wctx, "starve")
	require.NoError(t, err, "the writer was starved by the readers")
	t.Logf("writer in after %v, %d reads so far", time.Since(start), reads.Load())
	_, err = c.TryRLock(ctx, "starve")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while the writer holds")
	require.NoError(t, w.Release(ctx))
	for len(read) > 0 { // reads from before the writer's release
		<-read
	}
	awaitReads(5, "the readers did not resume after the writer")
	close(stop)
	wg.Wait()
}

// TestRWMixedReaderTTLs: a reader that joins later with a shorter TTL never
// shortens the readers' set under the earlier reader (nor does its expiry or
// its extension), on any node; a writer stays out until the earlier reader
// releases.
func TestRWMixedReaderTTLs(t *testing.T) {
	c, servers := cluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	long, err := c.RLock(ctx, "mixed", redlock.WithLockTTL(10*time.Second))
	require.NoError(t, err)
	readers, _ := node.ReaderKeys(redlock.LockKey(redlock.DefaultKeyPrefix, "mixed"))
	for _, s := range servers { // RLock returns at its majority: the last node's grant may still be on its way
		require.Eventually(t, func() bool {
			_, err := redis.Float64(s.Do("ZSCORE", readers, long.Token()))
			return err == nil
		}, 10*time.Second, time.Millisecond)
	}
	// Short, yet long enough that a loaded machine extends it in time.
	short, err := c.RLock(ctx, "mixed", redlock.WithLockTTL(250*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, short.Extend(ctx), "a short reader's extension")
	checkNodes := func(what string) {
		t.Helper()
		for i, s := range servers {
			pttl, err := redis.Int64(s.Do("PTTL", readers))
			require.NoError(t, err)
			assert.Greater(t, pttl, int64(9000), "node %d, %s: the readers' set would expire under the long reader", i, what)
			_, err = redis.Float64(s.Do("ZSCORE", readers, long.Token()))
			assert.NoError(t, err, "node %d, %s: the long reader is gone", i, what)
		}
	}
	checkNodes("after the short reader joined and extended")
	// No signal tells a lease ran out on a node: wait past it.
	time.Sleep(time.Until(short.Until()) + 100*time.Millisecond)
	_, err = c.TryWLock(ctx, "mixed")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while the long reader holds, the short one expired")
	checkNodes("after the short reader expired and a writer tried")
	require.ErrorIs(t, short.Extend(ctx), redlock.ErrLockLost, "an expired reader cannot extend")
	again, err := c.TryRLock(ctx, "mixed", redlock.WithLockTTL(250*time.Millisecond))
	require.NoError(t, err, "readers still share")
	require.NoError(t, again.Release(ctx))
	checkNodes("after a short reader released")
	require.NoError(t, long.Extend(ctx))
	require.NoError(t, long.Release(ctx))
	w, err := c.WLock(ctx, "mixed")
	require.NoError(t, err, "every reader is gone")
	require.NoError(t, w.Release(ctx))
}

// TestRWWriterFenceIncreases: writers of two clients, fenced, in turn: each
// writer's fencing token is larger than every earlier writer's.
func TestRWWriterFenceIncreases(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(3*time.Second))
	c2, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(3*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close() })
	seedFence(t, c, servers, "fenced")
	ctx := ctxT(t, 30*time.Second)
	var h rwHistory
	var wg sync.WaitGroup
	for g := range 4 {
		c := []*redlock.Client{c, c2}[g%2]
		wg.Go(func() {
			for range 5 {
				w, err := c.WLock(ctx, "fenced", redlock.WithFence())
				if !assert.NoError(t, err) {
					return
				}
				f, err := w.Fence(ctx)
				assert.NoError(t, err)
				h.enterWrite(f)
				h.leaveWrite()
				assert.NoError(t, w.Release(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, h.fences, 20)
	assert.Empty(t, h.violations)
	for i := 1; i < len(h.fences); i++ {
		assert.Greater(t, h.fences[i], h.fences[i-1], "writer fencing tokens must strictly increase: %v", h.fences)
	}
	// A plain lock of the resource shares the writers' counter.
	l, err := c.TryLock(ctx, "fenced", redlock.WithFence())
	require.NoError(t, err)
	f, err := l.Fence(ctx)
	require.NoError(t, err)
	assert.Greater(t, f, h.fences[len(h.fences)-1])
	require.NoError(t, l.Release(ctx))
}

// TestRWMinority: a killed or paused minority node keeps read and write
// locks working, exclusion included.
func TestRWMinority(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, s *redistest.Server)
	}{
		{"killed", func(t *testing.T, s *redistest.Server) { s.Kill() }},
		{"paused", func(t *testing.T, s *redistest.Server) { s.Pause(); t.Cleanup(s.Resume) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, servers := cluster(t, 3)
			tc.fault(t, servers[2])
			ctx := ctxT(t, 20*time.Second)
			r1, err := c.RLock(ctx, "minority")
			require.NoError(t, err)
			r2, err := c.RLock(ctx, "minority")
			require.NoError(t, err)
			_, err = c.TryWLock(ctx, "minority")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			got := make(chan *redlock.Lock, 1)
			go func() {
				w, err := c.WLock(ctx, "minority", redlock.WithFence())
				assert.NoError(t, err)
				got <- w
			}()
			require.NoError(t, r1.Release(ctx))
			require.NoError(t, r2.Release(ctx))
			w := <-got
			require.NotNil(t, w)
			f, err := w.Fence(ctx)
			require.NoError(t, err)
			assert.Positive(t, f)
			_, err = c.TryRLock(ctx, "minority")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.NoError(t, w.Release(ctx))
			r3, err := c.RLock(ctx, "minority")
			require.NoError(t, err)
			require.NoError(t, r3.Release(ctx))
		})
	}
}

func TestRWInvalidInput(t *testing.T) {
	c, _ := cluster(t, 1)
	ctx := context.Background()
	var nilCtx context.Context
	long := string(make([]byte, redlock.MaxResourceLen+1))
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"rlock empty resource", func() error { _, err := c.RLock(ctx, ""); return err }, "empty resource name"},
		{"trylock empty resource", func() error { _, err := c.TryRLock(ctx, ""); return err }, "empty resource name"},
		{"wlock empty resource", func() error { _, err := c.WLock(ctx, ""); return err }, "empty resource name"},
		{"trywlock empty resource", func() error { _, err := c.TryWLock(ctx, ""); return err }, "empty resource name"},
		{"rlock nil ctx", func() error { _, err := c.RLock(nilCtx, "r"); return err }, "nil context"},
		{"wlock nil ctx", func() error { _, err := c.WLock(nilCtx, "r"); return err }, "nil context"},
		{"rlock long name", func() error { _, err := c.RLock(ctx, long); return err }, "exceeds"},
		{"rlock fenced", func() error { _, err := c.RLock(ctx, "r", redlock.WithFence()); return err }, "readers have no fencing token"},
		{"tryrlock fenced", func() error { _, err := c.TryRLock(ctx, "r", redlock.WithFence()); return err }, "readers have no fencing token"},
		{"rlock ttl too short", func() error { _, err := c.RLock(ctx, "r", redlock.WithLockTTL(time.Millisecond)); return err }, "TTL"},
		{"wlock ttl sub-ms", func() error { _, err := c.WLock(ctx, "r", redlock.WithLockTTL(1500*time.Microsecond)); return err }, "TTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	r, err := c.TryRLock(ctx, "r")
	require.NoError(t, err)
	require.ErrorIs(t, r.Extend(nilCtx), redlock.ErrInvalid)
	require.ErrorIs(t, r.Release(nilCtx), redlock.ErrInvalid)
	require.NoError(t, r.Release(ctx))
	require.ErrorIs(t, r.Extend(ctx), redlock.ErrLockLost, "extending a released reader")
	require.NoError(t, c.Close())
	_, err = c.RLock(ctx, "r")
	require.ErrorIs(t, err, redlock.ErrClosed)
	_, err = c.TryWLock(ctx, "r")
	require.ErrorIs(t, err, redlock.ErrClosed)
}

// rwACL is what read-write locks need beyond MinimalACL (docs/rwlock.md).
const rwACL = " +zremrangebyscore +zcard"

// TestRWMinimalACL: a user with the minimal ACL and rwACL takes read and
// write locks, waits for them (pub/sub) and fences; without rwACL's
// commands, a read attempt fails with "permission denied" at once.
func TestRWMinimalACL(t *testing.T) {
	s := redistest.Start(t)
	for _, tc := range []struct{ user, rule string }{{"rw", MinimalACL + rwACL}, {"plain", MinimalACL}} {
		args := []any{"SETUSER", tc.user}
		for _, f := range strings.Fields(tc.rule) {
			args = append(args, f)
		}
		_, err := s.Do("ACL", args...)
		require.NoError(t, err)
	}
	ctx := ctxT(t, 10*time.Second)
	c, err := redlock.Dial([]string{"redis://rw:lock-pw@" + s.Addr()})
	require.NoError(t, err)
	defer c.Close()
	r, err := c.RLock(ctx, "acl-rw")
	require.NoError(t, err)
	require.NoError(t, r.Extend(ctx))
	got := make(chan error, 1)
	go func() {
		w, err := c.WLock(ctx, "acl-rw", redlock.WithFence())
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	require.NoError(t, r.Release(ctx))
	require.NoError(t, <-got)

	plain, err := redlock.Dial([]string{"redis://plain:lock-pw@" + s.Addr()})
	require.NoError(t, err)
	defer plain.Close()
	_, err = plain.RLock(ctx, "acl-rw")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "permission denied")
}

// TestRWWokenByRelease: readers whose backoff is long (1 min) are woken by
// the writer's release they wait for; then a writer gets in once they are
// gone.
func TestRWWokenByRelease(t *testing.T) {
	c, servers := cluster(t, 3)
	refused := make(chan struct{}, 64)
	waiter, err := redlock.Dial(redistest.URLs(servers), redlock.WithRetryBackoff(time.Minute, time.Minute),
		redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
			if e.Refused > 0 {
				refused <- struct{}{}
			}
		}}))
	require.NoError(t, err)
	defer waiter.Close()
	ctx := ctxT(t, 20*time.Second)

	w, err := c.WLock(ctx, "woken")
	require.NoError(t, err)
	type result struct {
		r  *redlock.ReadLock
		at time.Time
	}
	readers := make(chan result, 2)
	for range 2 {
		go func() {
			r, err := waiter.RLock(ctx, "woken")
			assert.NoError(t, err)
			readers <- result{r, time.Now()}
		}()
	}
	// A reader listens once refused, then is refused again (the attempt
	// right after it subscribed) and waits: four refusals for both.
	for range 4 {
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatal("the readers were not refused")
		}
	}
	released := time.Now()
	require.NoError(t, w.Release(ctx))
	var rs []*redlock.ReadLock
	for range 2 {
		res := <-readers
		require.NotNil(t, res.r)
		assert.Less(t, res.at.Sub(released), 3*time.Second, "a reader was not woken by the writer's release (its backoff is uniform in [0, 1m))")
		rs = append(rs, res.r)
	}
	type wroteRes struct {
		w   *redlock.Lock
		at  time.Time
		err error
	}
	wrote := make(chan wroteRes, 1)
	go func() {
		w, err := waiter.WLock(ctx, "woken")
		wrote <- wroteRes{w, time.Now(), err}
	}()
	require.NoError(t, rs[0].Release(ctx))
	require.NoError(t, rs[1].Release(ctx))
	released = time.Now()
	select {
	case res := <-wrote:
		require.NoError(t, res.err)
		t.Logf("writer in %v after the last reader's release", res.at.Sub(released))
		// Released here, not in the goroutine: the test's end closes the
		// client (a CI run saw that Release fail with "client closed").
		require.NoError(t, res.w.Release(ctx))
	case <-ctx.Done():
		t.Fatal("the writer did not get in")
	}
}

func ExampleClient_RLock() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.Dial(urls)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	// Readers share the lock.
	r1, err := client.RLock(ctx, "catalog")
	if err != nil {
		panic(err)
	}
	r2, _ := client.RLock(ctx, "catalog")
	fmt.Println("two readers")

	// A writer waits for them; once it waits, new readers wait behind it.
	written := make(chan uint64)
	go func() {
		w, err := client.WLock(ctx, "catalog", redlock.WithFence())
		if err != nil {
			panic(err)
		}
		token, _ := w.Fence(ctx) // larger for every later writer
		_ = w.Release(ctx)
		written <- token
	}()
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	fmt.Println("writer's fencing token:", <-written)

	r3, err := client.TryRLock(ctx, "catalog")
	fmt.Println("reader after the writer:", err == nil)
	_ = r3.Release(ctx)
	// Output:
	// two readers
	// writer's fencing token: 1
	// reader after the writer: true
}

// TestRWReadKeep: Keep renews a read lock past its TTL while a writer waits
// (a reader that holds on keeps writers out), and its context ends, with a
// cause matching ErrLockLost, when the read lock is released or lost.
func TestRWReadKeep(t *testing.T) {
	t.Parallel() // mostly waits (leases, quarantines, restarts): beside the others that do, once the package's other tests are done
	c, servers := cluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	r, err := c.RLock(ctx, "keep", redlock.WithLockTTL(time.Second))
	require.NoError(t, err)
	kctx, stop := r.Keep(ctx)
	defer stop()
	first := r.Until()
	wctx, cancel := context.WithTimeout(ctx, 3500*time.Millisecond) // over three TTLs
	w, err := c.WLock(wctx, "keep")
	cancel()
	if err == nil {
		// Only once the kept reader's lease ended (its renewals failed on
		// a loaded machine): its context must have ended by then.
		select {
		case <-kctx.Done():
			_ = w.Release(ctx)
			t.Skipf("the machine is too loaded: the kept reader's renewals failed (%v)", context.Cause(kctx))
		case <-time.After(time.Second):
			t.Fatal("a writer got in beside a kept reader whose context had not ended")
		}
	}
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, kctx.Err(), "the kept read lock's context ended")
	assert.True(t, r.Until().After(first.Add(2*time.Second)), "not renewed")
	require.NoError(t, r.Release(ctx))
	<-kctx.Done()
	assert.ErrorIs(t, context.Cause(kctx), redlock.ErrLockLost)

	// Lost: the reader is removed behind its back on every node.
	r, err = c.RLock(ctx, "keep", redlock.WithLockTTL(time.Second))
	require.NoError(t, err)
	kctx, stop2 := r.Keep(ctx)
	defer stop2()
	readers, _ := node.ReaderKeys(redlock.LockKey(redlock.DefaultKeyPrefix, "keep"))
	for _, s := range servers {
		_, err := s.Do("DEL", readers)
		require.NoError(t, err)
	}
	<-kctx.Done()
	assert.ErrorIs(t, context.Cause(kctx), redlock.ErrLockLost)

	// Bad options end the context at once.
	bad, stop3 := r.Keep(ctx, redlock.WithRenewEvery(time.Second))
	defer stop3()
	<-bad.Done()
	assert.ErrorIs(t, context.Cause(bad), redlock.ErrInvalid)
}

// TestRWQuarantineTimeline runs docs/safety.md's P5 timeline for read-write
// locks on real redis-servers, both ways: A holds (a reader, or the writer)
// on n1 and n2, n3 being held against A by someone else and then freed; n2
// restarts empty; B, of the other kind, whose nodes quarantine a restarted
// node for longer than the TTL, tries until A's lease ends and must not be
// granted before then (B waiting already when n2 restarts).
func TestRWQuarantineTimeline(t *testing.T) {
	const (
		ttl        = 2 * time.Second
		quarantine = 3 * time.Second // > ttl, as docs/safety.md asks
		resource   = "p5-rw"
	)
	key := redlock.LockKey(redlock.DefaultKeyPrefix, resource)
	readers, _ := node.ReaderKeys(key)
	for _, tc := range []struct {
		name string
		// block makes n3 refuse A; free undoes it.
		block, free []any
		// holdA takes A's lock, and returns its Until.
		holdA func(ctx context.Context, c *redlock.Client) (time.Time, error)
		// held is the key on which A's hold shows on a node.
		held func(s *redistest.Server) bool
		// lockB tries B's lock until ctx ends.
		lockB func(ctx context.Context, c *redlock.Client) error
	}{
		{
			name:  "reader then writer",
			block: []any{"SET", key, "someone-else", "PX", 60000}, free: []any{"DEL", key},
			holdA: func(ctx context.Context, c *redlock.Client) (time.Time, error) {
				r, err := c.RLock(ctx, resource)
				if err != nil {
					return time.Time{}, err
				}
				return r.Until(), nil
			},
			held: func(s *redistest.Server) bool {
				n, err := redis.Int(s.Do("ZCARD", readers))
				return err == nil && n == 1
			},
			lockB: func(ctx context.Context, c *redlock.Client) error {
				w, err := c.WLock(ctx, resource)
				if err == nil {
					_ = w.Release(context.Background())
				}
				return err
			},
		},
		{
			name:  "writer then reader",
			block: []any{"ZADD", readers, "+inf", "someone-else"}, free: []any{"DEL", readers},
			holdA: func(ctx context.Context, c *redlock.Client) (time.Time, error) {
				w, err := c.WLock(ctx, resource)
				if err != nil {
					return time.Time{}, err
				}
				return w.Until(), nil
			},
			held: func(s *redistest.Server) bool {
				n, err := redis.Int(s.Do("EXISTS", key))
				return err == nil && n == 1
			},
			lockB: func(ctx context.Context, c *redlock.Client) error {
				r, err := c.RLock(ctx, resource)
				if err == nil {
					_ = r.Release(context.Background())
				}
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartN(t, 3)
			// Up longer than the quarantine before anyone connects: only the
			// restart below quarantines n2.
			for _, s := range servers {
				s.WaitUptime(quarantine + time.Second)
			}
			ctx := ctxT(t, 30*time.Second)
			_, err := servers[2].Do(tc.block[0].(string), tc.block[1:]...)
			require.NoError(t, err)
			opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond),
				redlock.WithNodeOptions(node.WithRestartQuarantine(quarantine)), redlock.WithBreaker(0)}
			a := dialed(t, servers, opts...)
			until, err := tc.holdA(ctx, a)
			require.NoError(t, err)
			for _, s := range servers[:2] { // a grant returns at its majority
				require.Eventually(t, func() bool { return tc.held(s) }, 10*time.Second, time.Millisecond)
			}

			attempts := make(chan struct{}, 1)
			b := dialed(t, servers, append(opts, redlock.WithHooks(redlock.Hooks{
				OnAttempt: func(redlock.AttemptEvent) {
					select {
					case attempts <- struct{}{}:
					default:
					}
				},
			}))...)
			bctx, cancel := context.WithDeadline(ctx, until)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				err := tc.lockB(bctx, b)
				switch {
				case err == nil:
					err = fmt.Errorf("B was granted %v before A's lease ended", time.Until(until))
				case bctx.Err() == nil:
					err = fmt.Errorf("B's call ended before A's lease did: %w", err)
				default:
					err = nil
				}
				got <- err
			}()
			<-attempts // B is waiting, its connections to n2 open
			servers[1].Kill()
			servers[1].Restart()
			_, err = servers[2].Do(tc.free[0].(string), tc.free[1:]...) // n3 is free: B needs only n2 besides
			require.NoError(t, err)
			require.NoError(t, <-got)
		})
	}
}

// TestRWCloseEndsWaiters: Close ends the RLock and WLock calls waiting on
// the client, with errors matching ErrNotAcquired and ErrClosed, and
// returns once they are over.
func TestRWCloseEndsWaiters(t *testing.T) {
	holder, servers := cluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	w, err := holder.WLock(ctx, "closing")
	require.NoError(t, err)
	refused := make(chan struct{}, 16)
	c, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(redlock.Hooks{OnAttempt: func(e redlock.AttemptEvent) {
		if e.Refused > 0 {
			refused <- struct{}{}
		}
	}}))
	require.NoError(t, err)
	errs := make(chan error, 2)
	go func() { _, err := c.RLock(ctx, "closing"); errs <- err }()
	go func() { _, err := c.WLock(ctx, "closing"); errs <- err }()
	for range 4 { // both refused twice: listening, and waiting
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatal("the waiters were not refused")
		}
	}
	require.NoError(t, c.Close())
	for range 2 {
		err := <-errs
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.ErrorIs(t, err, redlock.ErrClosed)
	}
	require.NoError(t, w.Release(ctx))
}

// BenchmarkRWLock: an uncontended acquisition and release at N = 3, for a
// plain lock, a read lock and a write lock (one script call per node each
// way), with the server commands they cost per operation.
func BenchmarkRWLock(b *testing.B) {
	c, servers := cluster(b, 3)
	ctx := context.Background()
	for _, kind := range []string{"Lock", "RLock", "WLock"} {
		b.Run(kind, func(b *testing.B) {
			for _, s := range servers {
				if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var release func(context.Context) error
				switch kind {
				case "Lock":
					l, err := c.TryLock(ctx, "rw-bench")
					if err != nil {
						b.Fatal(err)
					}
					release = l.Release
				case "RLock":
					r, err := c.TryRLock(ctx, "rw-bench")
					if err != nil {
						b.Fatal(err)
					}
					release = r.Release
				case "WLock":
					w, err := c.TryWLock(ctx, "rw-bench")
					if err != nil {
						b.Fatal(err)
					}
					release = w.Release
				}
				if err := release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var calls int64
			for _, s := range servers {
				for name, n := range s.Calls() {
					if !strings.HasPrefix(name, "info") && !strings.HasPrefix(name, "config") {
						calls += n
					}
				}
			}
			b.ReportMetric(float64(calls)/float64(b.N), "commands/op")
		})
	}
}

// leaveCounter is a node that counts LeaveWrite calls, and those that
// removed a mark.
type leaveCounter struct {
	*node.Redis
	calls, removed *atomic.Int32
}

func (n leaveCounter) LeaveWrite(ctx context.Context, key, writer string) (bool, error) {
	ok, err := n.Redis.LeaveWrite(ctx, key, writer)
	n.calls.Add(1)
	if ok {
		n.removed.Add(1)
	}
	return ok, err
}

// TestRWWriterGivesUp: a writer that waited for readers and gave up (its
// context ended) removes its mark from the nodes, so that new readers need
// not wait for it to expire (RWWaitMark); one that got the lock leaves
// nothing to remove.
func TestRWWriterGivesUp(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var calls, removed atomic.Int32
	var nodes []node.Node
	for _, s := range servers {
		n, err := node.Dial(s.URL())
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, leaveCounter{n, &calls, &removed})
	}
	c, err := redlock.New(nodes)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 20*time.Second)
	r, err := c.RLock(ctx, "gives-up")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.WLock(wctx, "gives-up")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The marks are removed in the background: every node is asked, and
	// those where the reader refused the writer had its mark (at least 2;
	// 1 is allowed, for an attempt still on its way when the call gave up,
	// whose mark lands after the removal and expires by itself).
	require.Eventually(t, func() bool { return calls.Load() == 3 }, 10*time.Second, time.Millisecond)
	assert.Positive(t, removed.Load(), "the writer's marks were not removed")
	r2, err := c.RLock(ctx, "gives-up")
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx))
	require.NoError(t, r2.Release(ctx))

	w, err := c.WLock(ctx, "gives-up") // granted at once: no mark, nothing to leave
	require.NoError(t, err)
	require.NoError(t, w.Release(ctx))
	assert.Equal(t, int32(3), calls.Load())
}
