package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/sim"
)

// window is a stretch of virtual time during which a client's fn (or its
// LockMulti holder) had a live lease on a resource.
type window struct {
	client   int
	from, to time.Duration
	how      string
	resource string
	panicked bool
}

// multiRun drives clients through random DoMulti and LockMulti calls on
// overlapping resource sets, over a lossy and sometimes slow network, with fns
// that run past the TTL (renewals), panic, or return at once. It returns the
// windows in which each client believed it held each resource.
func multiRun(t *testing.T, seed uint64, clients int) []window {
	cfg := sim.WorldConfig{
		Seed: seed, Nodes: 3, Clients: clients,
		TTL: 200 * time.Millisecond, NodeTimeout: sim.DefaultNodeTimeout, DriftFactor: 0.01,
		Links: func(c, n int) sim.LinkFaults {
			return sim.LinkFaults{MinDelay: 100 * time.Microsecond, MaxDelay: 2 * time.Millisecond,
				SlowProb: 0.03, SlowMax: 150 * time.Millisecond, ReqLoss: 0.02, ReplyLoss: 0.02}
		},
	}
	var mu sync.Mutex
	var wins []window
	add := func(w window) {
		mu.Lock()
		wins = append(wins, w)
		mu.Unlock()
	}
	synctest.Test(t, func(t *testing.T) {
		w := sim.NewWorld(cfg)
		defer w.Close()
		var wg sync.WaitGroup
		for c := 0; c < clients; c++ {
			cl, err := w.NewClient(c)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := 0; round < 12; round++ {
					res := pickResources(rng)
					if rng.IntN(3) == 0 {
						lockMultiOnce(w, cl, c, res, rng, add)
					} else {
						doMultiOnce(w, cl, c, res, rng, add)
					}
				}
			}()
		}
		wg.Wait()
	})
	return wins
}

func pickResources(rng *rand.Rand) []string {
	all := []string{"a", "b", "c"}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:1+rng.IntN(len(all))]
}

// doMultiOnce runs one DoMulti whose fn records the window in which its
// context was live: from the start of fn to the earlier of its return and the
// end of its context.
func doMultiOnce(w *sim.World, cl *redlock.Client, c int, res []string, rng *rand.Rand, add func(window)) {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	work := time.Duration(rng.IntN(500)) * time.Millisecond // up to 2.5 TTLs: renewals
	panics := rng.IntN(6) == 0
	how := fmt.Sprintf("DoMulti(work %v, panics %v)", work, panics)
	defer func() { _ = recover() }() // a panicking fn: DoMulti releases, then the panic goes on
	_ = cl.DoMulti(ctx, res, func(fctx context.Context) error {
		from := w.Since()
		ended := make(chan time.Duration, 1)
		stop := context.AfterFunc(fctx, func() { ended <- w.Since() })
		defer func() {
			to := w.Since()
			if stop() { // fn returned first
				ended <- to
			}
			end := <-ended
			for _, r := range res {
				add(window{client: c, from: from, to: end, how: how, resource: r, panicked: panics})
			}
		}()
		t := time.NewTimer(work)
		defer t.Stop()
		select {
		case <-t.C:
		case <-fctx.Done():
			return fctx.Err()
		}
		if panics {
			panic("fn panics")
		}
		return nil
	}, redlock.WithRenewEvery(30*time.Millisecond), redlock.WithSafetyMargin(20*time.Millisecond))
}

// lockMultiOnce takes res with LockMulti and holds it, the documented way: it
// acts only while now is before the earliest Until, extends, and releases.
func lockMultiOnce(w *sim.World, cl *redlock.Client, c int, res []string, rng *rand.Rand, add func(window)) {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	m, err := cl.LockMulti(ctx, res)
	if err != nil {
		return
	}
	from := w.Since()
	until := m.Until()
	if !time.Now().Before(until) {
		panic(fmt.Sprintf("LockMulti returned a lock whose validity ended %v ago", time.Since(until)))
	}
	// Hold for a random time, but act only until the earliest Until; the
	// window ends when the holder stops relying on the lock.
	time.Sleep(min(time.Duration(rng.IntN(150))*time.Millisecond, time.Until(until)))
	to := w.Since()
	for _, r := range res {
		add(window{client: c, from: from, to: to, how: "LockMulti", resource: r})
	}
	_ = m.Release(context.Background())
}

// TestSimMultiHolding: DoMulti and LockMulti under lapses (lost and slow
// messages make renewals fail), panics and concurrent renewals. fn never runs
// with an ended context, and no two clients hold one resource at once by the
// (shared, virtual) clock.
func TestSimMultiHolding(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	// The seeds run two at a time (t.Parallel, -test.parallel = GOMAXPROCS):
	// one bubble leaves a core idle while it hands over between goroutines.
	runs := make([][]window, seeds)
	t.Run("seeds", func(t *testing.T) {
		for i := range runs {
			t.Run(fmt.Sprint(i+1), func(t *testing.T) {
				t.Parallel()
				runs[i] = multiRun(t, uint64(i+1), 3)
			})
		}
	})
	total, panicked := 0, 0
	for i, wins := range runs {
		seed := i + 1
		total += len(wins)
		byRes := map[string][]window{}
		for _, w := range wins {
			if w.panicked {
				panicked++
			}
			byRes[w.resource] = append(byRes[w.resource], w)
		}
		for r, ws := range byRes {
			for i, a := range ws {
				for _, b := range ws[i+1:] {
					if a.client != b.client && a.from < b.to && b.from < a.to {
						t.Fatalf("seed %d: %q held by client %d (%s, %v–%v) and client %d (%s, %v–%v) at once",
							seed, r, a.client, a.how, a.from, a.to, b.client, b.how, b.from, b.to)
					}
				}
			}
		}
	}
	if total < seeds*10 {
		t.Fatalf("only %d holding windows in %d runs: the schedule does not exercise holding", total, seeds)
	}
	t.Logf("%d runs, %d holding windows (%d with a panicking fn), no overlap", seeds, total, panicked)
}
