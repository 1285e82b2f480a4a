package quorum

import (
	"context"
	"math/rand/v2"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countRunner counts the nodes it ran, and signals each.
type countRunner struct {
	ran  atomic.Int64
	done chan int
}

func (r *countRunner) runNode(i int) {
	r.ran.Add(1)
	r.done <- i
}

// A goroutine that finished an operation runs the next one: one goroutine
// for a hundred operations one after another.
func TestPoolReusesGoroutines(t *testing.T) {
	p := NewPool(time.Minute)
	defer p.Close()
	r := &countRunner{done: make(chan int, 1)}
	for i := range 100 {
		p.run(task{r, i})
		require.Equal(t, i, <-r.done)
		// The goroutine is waiting once it signalled and looped; until then
		// a run may start another. Wait for it to be back.
		require.Eventually(t, func() bool { return p.idleWaiting() }, 5*time.Second, time.Microsecond)
	}
	assert.Equal(t, int64(100), r.ran.Load())
	assert.Equal(t, int64(1), p.started.Load(), "goroutines started for 100 operations in a row")
}

// Operations handed over at once all run, each exactly once, however many
// goroutines that takes; idle goroutines exit after the idle time.
func TestPoolRunsEveryOperation(t *testing.T) {
	p := NewPool(20 * time.Millisecond)
	defer p.Close()
	const n = 500
	r := &countRunner{done: make(chan int, n)}
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 10 {
				p.run(task{r, g*(n/10) + i})
			}
		}()
	}
	wg.Wait()
	seen := make([]bool, n)
	for range n {
		i := <-r.done
		require.False(t, seen[i], "node %d ran twice", i)
		seen[i] = true
	}
	assert.Equal(t, int64(n), r.ran.Load())
	assert.LessOrEqual(t, p.started.Load(), int64(n))
	require.Eventually(t, func() bool { return p.live() == 0 }, 5*time.Second, time.Millisecond,
		"idle goroutines did not exit: %d left", p.live())
}

// Close ends the waiting goroutines at once, and an operation handed over
// still runs.
func TestPoolClose(t *testing.T) {
	p := NewPool(time.Hour)
	r := &countRunner{done: make(chan int, 4)}
	for i := range 4 {
		p.run(task{r, i})
	}
	for range 4 {
		<-r.done
	}
	p.Close()
	p.Close() // idempotent
	require.Eventually(t, func() bool { return p.live() == 0 }, 5*time.Second, time.Millisecond,
		"waiting goroutines did not exit on Close: %d left", p.live())
	p.run(task{r, 9}) // after Close: a goroutine of its own
	assert.Equal(t, 9, <-r.done)
}

// A Call on a Pool counts its goroutines in Group and decides as a plain one.
func TestCallOnPool(t *testing.T) {
	p := NewPool(time.Minute)
	defer p.Close()
	var g sync.WaitGroup
	for range 50 {
		c := Start(context.Background(), 3, func(_ context.Context, i int) (int, bool, error) {
			return i, i != 2, nil
		}, Options[int]{Pool: p, Group: &g})
		o := c.Wait(context.Background())
		require.True(t, o.Success)
		g.Wait() // every node's goroutine counted, and done
		require.Equal(t, 3, o.Yes+o.No+o.Failed+pendingOf(o))
	}
	assert.Less(t, p.started.Load(), int64(150), "no goroutine reused over 50 Calls")
}

// pendingOf counts the nodes that had not answered when o was taken.
func pendingOf(o Outcome[int]) int {
	n := 0
	for _, r := range o.Replies {
		if !r.Done {
			n++
		}
	}
	return n
}

// A pooled operation runs with the labels of its Call's context, whoever
// started the goroutine: a profile by labels still tells callers apart.
func TestPoolLabels(t *testing.T) {
	p := NewPool(time.Minute)
	defer p.Close()
	for _, who := range []string{"first", "second"} {
		ctx := pprof.WithLabels(context.Background(), pprof.Labels("caller", who))
		inside, out := make(chan struct{}), make(chan struct{})
		c := Start(ctx, 1, func(context.Context, int) (int, bool, error) {
			close(inside)
			<-out
			return 0, true, nil
		}, Options[int]{Pool: p})
		<-inside
		var b strings.Builder
		require.NoError(t, pprof.Lookup("goroutine").WriteTo(&b, 1))
		close(out)
		c.Wait(context.Background())
		assert.Contains(t, b.String(), `labels: {"caller":"`+who+`"}`, "the operation of %s's Call", who)
		// The second Call most often runs on the first's goroutine
		// (TestPoolReusesGoroutines), labelled "first" until it runs it.
		require.Eventually(t, p.idleWaiting, 5*time.Second, time.Microsecond)
	}
}

// tallyRunner counts every node's runs, some slow.
type tallyRunner struct {
	ran []atomic.Int32
	wg  *sync.WaitGroup
}

func (r *tallyRunner) runNode(i int) {
	if i%7 == 0 {
		time.Sleep(time.Duration(i%300) * time.Microsecond)
	}
	r.ran[i].Add(1)
	r.wg.Done()
}

// Operations handed over from many goroutines while sweeps end idle
// goroutines every few hundred µs, and Close comes at a random moment (or
// never): each runs exactly once, none waits for good, and every goroutine
// exits (a review's stress test of the second version).
func TestPoolSweepsAndCloseUnderLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 2))
	for round := range 20 {
		p := NewPool(time.Duration(50+rng.IntN(500)) * time.Microsecond)
		const goroutines, each = 8, 300
		var wg sync.WaitGroup
		r := &tallyRunner{ran: make([]atomic.Int32, goroutines*each), wg: &wg}
		wg.Add(goroutines * each)
		closeAt := int64(-1) // every other round: no Close until the end
		if round%2 == 0 {
			closeAt = int64(rng.IntN(goroutines * each))
		}
		var handed atomic.Int64
		var senders sync.WaitGroup
		for g := range goroutines {
			pause := rand.New(rand.NewPCG(uint64(round), uint64(g)))
			senders.Add(1)
			go func() {
				defer senders.Done()
				for i := range each {
					if handed.Add(1) == closeAt {
						p.Close()
					}
					p.run(task{r, g*each + i})
					if pause.IntN(30) == 0 {
						time.Sleep(time.Duration(pause.IntN(600)) * time.Microsecond)
					}
				}
			}()
		}
		senders.Wait()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: operations never ran", round)
		}
		for i := range r.ran {
			require.Equal(t, int32(1), r.ran[i].Load(), "round %d: operation %d", round, i)
		}
		require.Eventually(t, func() bool { return p.live() == 0 }, 5*time.Second, time.Millisecond,
			"round %d: goroutines left", round)
		p.mu.Lock()
		assert.Empty(t, p.idle, "round %d", round)
		if closeAt < 0 {
			assert.Nil(t, p.sweep, "round %d: a sweep pending with nobody idle", round)
		}
		p.mu.Unlock()
		p.Close()
	}
}
