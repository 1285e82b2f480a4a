package redlock_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
)

// A split vote with a paused node is decided without waiting for that node:
// one node refuses (another client holds it there), one grants, the third
// never answers. The attempt gives up at once, well before the node timeout or
// the lease, and releases what it took.
func TestSplitVoteDecidedEarly(t *testing.T) {
	c, servers := cluster(t, 3, redlock.WithNodeTimeout(time.Minute), redlock.WithTTL(time.Minute))
	_, err := servers[0].Do("SET", "redlock:{split}", "foreign", "PX", 60000)
	require.NoError(t, err)
	servers[2].Pause()
	ctx := ctxT(t, 30*time.Second)
	_, err = c.TryLock(ctx, "split")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, ctx.Err(), "the attempt waited for the paused node")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Agreed)
	assert.Equal(t, 1, qe.Refused)
	assert.Contains(t, err.Error(), "split")
	servers[2].Resume()
	require.NoError(t, c.Close()) // waits for the releases of the partial acquisition
	for _, s := range servers[1:] {
		assert.Empty(t, s.Keys("redlock:*"), "partial acquisition left behind on %s", s.Addr())
	}
	v, err := redis.String(servers[0].Do("GET", "redlock:{split}"))
	require.NoError(t, err)
	assert.Equal(t, "foreign", v)
}

// Separate clients contending with one node of three paused keep mutual
// exclusion and keep going: a split vote never waits for the paused node
// (its timeout and the lease are longer than the test).
func TestSeparateClientsPausedMinority(t *testing.T) {
	servers := redistest.StartN(t, 3)
	servers[2].Pause()
	ctx := ctxT(t, 40*time.Second)
	var inside, maxInside, total atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		c, err := redlock.Dial(redistest.URLs(servers), redlock.WithNodeTimeout(time.Minute), redlock.WithTTL(time.Minute))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				l, err := c.Lock(ctx, "hot")
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				total.Add(1)
				inside.Add(-1)
				assert.NoError(t, l.Release(ctx))
			}
		}()
		defer func() { assert.NoError(t, c.Close()) }() // after Resume below: stragglers land
	}
	wg.Wait()
	servers[2].Resume()
	assert.Equal(t, int64(1), maxInside.Load())
	assert.Equal(t, int64(100), total.Load())
}

// evalshas returns the number of EVALSHA calls each server has run.
func evalshas(t *testing.T, servers []*redistest.Server) []int64 {
	t.Helper()
	out := make([]int64, len(servers))
	for i, s := range servers {
		info, err := redis.String(s.Do("INFO", "commandstats"))
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				out[i], err = strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				require.NoError(t, err)
			}
		}
	}
	return out
}

// A waiter woken by another client's release asks one node, the gate, first;
// while the lock is still held there, it asks no other node. Then the holder
// releases and the waiter gets the lock.
func TestWokenWaiterAsksTheGateOnly(t *testing.T) {
	servers := redistest.StartN(t, 3)
	attempts := make(chan redlock.AttemptEvent, 100)
	holder, err := redlock.Dial(redistest.URLs(servers))
	require.NoError(t, err)
	defer holder.Close()
	waiter, err := redlock.Dial(redistest.URLs(servers), redlock.WithHooks(redlock.Hooks{
		OnAttempt: func(e redlock.AttemptEvent) { attempts <- e },
	}))
	require.NoError(t, err)
	defer waiter.Close()
	ctx := ctxT(t, 30*time.Second)

	held, err := holder.Lock(ctx, "gate")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, "gate", redlock.WithLockRetryBackoff(time.Minute, time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// The first attempt asks every node; the retry once subscribed goes
	// through the gate.
	for range 2 {
		e := <-attempts
		require.False(t, e.Acquired)
	}
	before := evalshas(t, servers)
	// A notification that frees nothing. The waiter listens on one node
	// only, the gate: one wake.
	listeners := 0
	for _, s := range servers {
		n, err := redis.Int(s.Do("PUBLISH", "redlock:{gate}", "released"))
		require.NoError(t, err)
		listeners += n
	}
	require.Equal(t, 1, listeners, "the waiter listens on one node")
	e := <-attempts
	require.False(t, e.Acquired)
	after := evalshas(t, servers)
	asked := 0
	for i := range servers {
		asked += int(after[i] - before[i])
	}
	assert.Equal(t, 1, asked, "EVALSHA calls per node before %v, after %v", before, after)

	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
}
