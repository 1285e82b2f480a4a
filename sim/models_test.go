package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/history"
	"github.com/redlock-go/redlock/sim"
)

// The models built on the lock (election, semaphore, read-write lock) run
// in worlds whose faults are those of a held schedule: a schedule of
// modelProfile gives the links (delays, slow messages beyond the node
// timeout, request and reply loss, partitions, often each client cut off
// from a different minority), the node clock rates (within the drift
// factor) and the crashes, which restart with their data. No clock steps:
// the readers' leases are scores in whole milliseconds of the node's clock
// (rwread.lua), and a forward step at the edge of StepBudget (computed for
// nanosecond key TTLs) would leave less than the millisecond they lose to
// rounding. Each client's holder pauses before its validity check (any
// length) and after it (within the validity left minus sim.ActionBudget),
// acts, and records its window by the bubble's clock, which every client
// shares; the history checker judges the windows.
var modelProfile = sim.Profile{
	Name:   "models",
	Faults: sim.Faults{Net: true, Rate: true, Pauses: true, Restarts: true},
	Nodes:  []int{3},
}

// modelSeeds is how many seeds each model test runs: fewer under -race
// (several times slower) and with -short.
func modelSeeds() int {
	switch {
	case raceEnabled:
		return 6
	case testing.Short():
		return 4
	}
	return 48
}

// modelRun is what one seed of a model recorded.
type modelRun struct {
	seed     uint64
	grants   []*history.Grant
	commands int
	virtual  time.Duration
	crashes  int
	failures map[string]int // failed acquisitions by error kind
	// unexpected are the failures that are not a refusal, a lost lock or
	// unavailable nodes.
	unexpected []string
}

// modelHolder is one client of a model run.
type modelHolder struct {
	c   int
	w   *sim.World
	cl  *redlock.Client
	rng *rand.Rand
	ttl time.Duration
	run *modelRun
	mu  *sync.Mutex
}

func (h *modelHolder) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)))
}

// add records a grant (its window is filled in by the holder as it goes).
func (h *modelHolder) add(g *history.Grant) {
	h.mu.Lock()
	h.run.grants = append(h.run.grants, g)
	h.mu.Unlock()
}

// failed counts a failed acquisition by kind: not acquired, lost,
// unavailable, or unexpected (reported by the test).
func (h *modelHolder) failed(call string, err error) {
	kind := "unexpected"
	switch {
	case errors.Is(err, redlock.ErrInvalid):
	case errors.Is(err, redlock.ErrNotAcquired):
		kind = "not-acquired"
	case errors.Is(err, redlock.ErrLockLost):
		kind = "lost"
	case errors.Is(err, redlock.ErrUnavailable):
		kind = "unavailable"
	}
	h.mu.Lock()
	h.run.failures[kind]++
	if kind == "unexpected" {
		h.run.unexpected = append(h.run.unexpected, fmt.Sprintf("client %d: %s: %v", h.c, call, err))
	}
	h.mu.Unlock()
}

// act is the documented use of a lease: maybe a pause before the check (of
// any length), the check (time.Now() before until, and live unless nil),
// maybe a pause after it within what is left minus sim.ActionBudget, and the
// action, recorded as a write of g. It reports whether it acted.
func (h *modelHolder) act(g *history.Grant, until func() time.Time, live context.Context) bool {
	if h.rng.Float64() < 0.2 {
		time.Sleep(h.uniform(0, 200*time.Millisecond))
	}
	now, u := time.Now(), until()
	if !now.Before(u) || live != nil && live.Err() != nil {
		return false
	}
	if left := u.Sub(now) - sim.ActionBudget; left > 0 && h.rng.Float64() < 0.5 {
		time.Sleep(time.Duration(h.rng.Float64() * float64(left)))
	}
	g.Writes = append(g.Writes, history.Write{At: time.Now(), Accepted: true})
	return true
}

// runModel runs one seed: a world of 3 nodes and clients clients with the
// faults of modelProfile's schedule for seed, each client running body.
// With warm, a client W that reaches every node over a quiet network runs
// warm first (a fenced grant gives every node a fence counter, as a
// resource in use has: otherwise a first fence write-back that missed a
// node leaves it suspect, and a client that reaches it and one node with
// the counter is refused every token, an availability cost of fencing).
func runModel(t *testing.T, seed uint64, clients int, warm func(cl *redlock.Client) (stop func(), err error), body func(h *modelHolder)) *modelRun {
	p := modelProfile
	p.Clients = []int{clients}
	s := sim.Generate(seed, p)
	run := &modelRun{seed: seed, failures: map[string]int{}}
	synctest.Test(t, func(t *testing.T) {
		w := sim.NewWorld(sim.WorldConfig{
			Seed: seed, Nodes: s.Nodes, Clients: s.Clients + 1,
			TTL: s.TTL, NodeTimeout: s.NodeTimeout, DriftFactor: s.DriftFactor,
			Rates: s.Rates,
			Links: func(c, n int) sim.LinkFaults {
				if c == s.Clients { // W
					return sim.LinkFaults{MinDelay: 20 * time.Microsecond, MaxDelay: 2 * time.Millisecond}
				}
				return s.Links[c][n]
			},
		})
		defer w.Close()
		stopWarm := func() {}
		if warm != nil {
			cl, err := w.NewClient(s.Clients)
			var stop func()
			if err == nil {
				stop, err = warm(cl)
			}
			if err != nil {
				t.Fatalf("seed %d: warm-up: %v", seed, err)
			}
			if stop != nil {
				stopWarm = stop
			}
		}
		var faults sync.WaitGroup
		for _, c := range s.Crashes {
			run.crashes++
			faults.Go(func() {
				time.Sleep(c.At - w.Since())
				w.Node(c.Node).Crash()
				time.Sleep(c.Down)
				w.Node(c.Node).Restart(false) // with its data: P5 holds
			})
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for c := 0; c < s.Clients; c++ {
			cl, err := w.NewClient(c)
			if err != nil {
				t.Fatal(err)
			}
			h := &modelHolder{c: c, w: w, cl: cl, rng: rand.New(rand.NewPCG(seed, 0x30de1+uint64(c))), ttl: s.TTL, run: run, mu: &mu}
			wg.Go(func() { body(h) })
		}
		wg.Wait()
		stopWarm()
		faults.Wait()
		run.commands = w.Commands()
		run.virtual = w.Since()
	})
	return run
}

// forSeeds runs seeds 1..modelSeeds() of a model on two parallel workers
// (subtests), each seed in its own bubble.
func forSeeds(t *testing.T, one func(t *testing.T, seed uint64) *modelRun) []*modelRun {
	n := modelSeeds()
	runs := make([]*modelRun, n)
	var next atomic.Int64
	t.Run("workers", func(t *testing.T) {
		for wk := 0; wk < 2; wk++ {
			t.Run(fmt.Sprintf("w%d", wk), func(t *testing.T) {
				t.Parallel()
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					runs[i] = one(t, uint64(i+1))
				}
			})
		}
	})
	return runs
}

func logRuns(t *testing.T, model string, runs []*modelRun, start time.Time) {
	t.Helper()
	grants, commands, crashes := 0, 0, 0
	var virtual time.Duration
	failures := map[string]int{}
	for _, r := range runs {
		grants += len(r.grants)
		commands += r.commands
		crashes += r.crashes
		virtual += r.virtual
		for k, v := range r.failures {
			failures[k] += v
		}
		for _, u := range r.unexpected {
			t.Errorf("seed %d: %s", r.seed, u)
		}
	}
	t.Logf("sim model=%s seeds=%d grants=%d commands=%d crashes=%d virtual=%v failed_acquisitions=%v duration_ms=%d",
		model, len(runs), grants, commands, crashes, virtual.Round(time.Millisecond), failures, time.Since(start).Milliseconds())
}

// TestSimElection: three candidates campaign for one election, lead for a
// while (acting only while the leadership's context lives and before Until),
// sometimes with a maximum hold (the renewal stops and the lease lapses),
// and resign, sometimes only after lingering. At most one leader at a time,
// terms strictly increasing in the order the leaders took over, no two
// leaders with one term; and an observer (Observe, on a client whose links
// only delay) is never sent a record older than one it was sent.
func TestSimElection(t *testing.T) {
	start := time.Now()
	var observed atomic.Int64 // leader records Observe sent
	runs := forSeeds(t, func(t *testing.T, seed uint64) *modelRun {
		return runModel(t, seed, 3, func(cl *redlock.Client) (func(), error) {
			ld, err := cl.Campaign(context.Background(), "e", "W")
			if err != nil {
				return nil, err
			}
			if err := ld.Resign(context.Background()); err != nil {
				return nil, err
			}
			// W observes the election while the candidates run: the
			// records it is sent never go back (a term, then a value's
			// revision within a term).
			ctx, cancel := context.WithCancel(context.Background())
			records, err := cl.Observe(ctx, "e")
			if err != nil {
				cancel()
				return nil, err
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				var top redlock.LeaderInfo
				for li := range records {
					if li.Vacant() {
						continue
					}
					observed.Add(1)
					if li.Term < top.Term || li.Term == top.Term && li.Rev < top.Rev {
						t.Errorf("seed %d: Observe went back: term %d rev %d (%q) after term %d rev %d (%q)",
							seed, li.Term, li.Rev, li.Value, top.Term, top.Rev, top.Value)
					}
					top = li
				}
			}()
			return func() { cancel(); <-done }, nil
		}, func(h *modelHolder) {
			for round := 0; round < 4; round++ {
				time.Sleep(h.uniform(time.Microsecond, 300*time.Millisecond))
				var opts []redlock.DoOption
				if h.rng.Float64() < 0.3 {
					opts = append(opts, redlock.WithMaxHold(h.uniform(50*time.Millisecond, h.ttl)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), h.uniform(100*time.Millisecond, 2*h.ttl))
				started := time.Now()
				ld, err := h.cl.Campaign(ctx, "e", fmt.Sprintf("c%d.%d", h.c, round), opts...)
				cancel()
				if err != nil {
					h.failed("Campaign", err)
					continue
				}
				g := &history.Grant{Client: h.c, Resource: "e", Started: started, Acquired: time.Now(), Token: ld.Term()}
				h.add(g)
				work := time.Now().Add(h.uniform(0, 3*h.ttl/2))
				for time.Now().Before(work) && ld.Context().Err() == nil {
					if !h.act(g, ld.Until, ld.Context()) {
						break
					}
					if h.rng.Float64() < 0.3 {
						_ = ld.Proclaim(context.Background(), fmt.Sprintf("c%d.%d+", h.c, round))
					}
					time.Sleep(h.uniform(0, 150*time.Millisecond))
				}
				if h.rng.Float64() < 0.3 {
					time.Sleep(h.uniform(0, h.ttl)) // lingers: renewed if still leading, lapsed if not
				}
				resigned := time.Now()
				_ = ld.Resign(context.Background())
				g.Until, g.Released = ld.Until(), resigned
			}
		})
	})
	leaders := 0
	for _, r := range runs {
		rep := history.CheckElection(r.grants)
		leaders += rep.Leaders
		if rep.Violations() > 0 {
			t.Errorf("seed %d: %d leaders: overlaps %+v, term order %+v, same term %+v", r.seed, rep.Leaders, rep.Overlaps, rep.TermOrder, rep.SameTerm)
		}
	}
	logRuns(t, "election", runs, start)
	if leaders < 2*len(runs) {
		t.Fatalf("only %d leaderships in %d runs: the runs do not exercise the election", leaders, len(runs))
	}
	t.Logf("sim model=election observer: %d leader records sent, none older than one before it", observed.Load())
	if observed.Load() < int64(len(runs)) {
		t.Fatalf("Observe sent %d leader records in %d runs: the observer does not exercise the stream", observed.Load(), len(runs))
	}
}

// TestSimSemaphore: four clients share a semaphore of 2 permits, each
// taking a permit by Acquire (waiting) or TryAcquire, acting on it, maybe
// extending it, and releasing it or walking away (the permit lapses). At
// most 2 holders at any instant (and never two holders of one slot); the
// runs must reach 2.
func TestSimSemaphore(t *testing.T) {
	const permits = 2
	start := time.Now()
	runs := forSeeds(t, func(t *testing.T, seed uint64) *modelRun {
		return runModel(t, seed, 4, nil, func(h *modelHolder) {
			sem, err := h.cl.Semaphore("s", permits)
			if err != nil {
				t.Error(err)
				return
			}
			for round := 0; round < 3; round++ {
				time.Sleep(h.uniform(time.Microsecond, 300*time.Millisecond))
				started := time.Now()
				var p *redlock.Permit
				if h.rng.IntN(2) == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), h.uniform(time.Millisecond, h.ttl))
					p, err = sem.Acquire(ctx)
					cancel()
				} else {
					p, err = sem.TryAcquire(context.Background())
				}
				if err != nil {
					h.failed("Acquire", err)
					continue
				}
				g := &history.Grant{Client: h.c, Resource: redlock.SemaphoreSlot("s", p.Slot()), Started: started, Acquired: time.Now()}
				h.add(g)
				for k := 1 + h.rng.IntN(3); k > 0; k-- {
					if h.rng.Float64() < 0.3 {
						_ = p.Extend(context.Background())
					}
					if !h.act(g, p.Until, nil) {
						break
					}
					time.Sleep(h.uniform(0, 150*time.Millisecond))
				}
				if h.rng.Float64() < 0.75 {
					g.Released = time.Now()
					_ = p.Release(context.Background())
				}
				g.Until = p.Until()
			}
		})
	})
	most := 0
	for _, r := range runs {
		// By slot: a slot is a lock.
		if rep := history.Check(r.grants); len(rep.Overlaps) > 0 {
			t.Errorf("seed %d: two holders of one slot: %+v", r.seed, rep.Overlaps)
		}
		all := make([]*history.Grant, len(r.grants))
		for i, g := range r.grants {
			cp := *g
			cp.Resource = "s"
			all[i] = &cp
		}
		rep := history.CheckSemaphore(all, permits)
		most = max(most, rep.MostHolders)
		if rep.Violations() > 0 {
			t.Errorf("seed %d: more than %d holders: %+v", r.seed, permits, rep.Crowds)
		}
	}
	logRuns(t, "semaphore", runs, start)
	if most < permits {
		t.Fatalf("at most %d holders at once in every run: the runs do not contend for the %d permits", most, permits)
	}
}

// TestSimRWLock: four clients take a read-write lock as readers (RLock or
// TryRLock) or writers (WLock or TryWLock, fenced eagerly or lazily), act,
// maybe extend, and release or walk away. Never a reader while a writer
// holds, never two writers, the writers' tokens in order; readers must have
// shared.
func TestSimRWLock(t *testing.T) {
	start := time.Now()
	runs := forSeeds(t, func(t *testing.T, seed uint64) *modelRun {
		return runModel(t, seed, 4, func(cl *redlock.Client) (func(), error) {
			l, err := cl.TryWLock(context.Background(), "r", redlock.WithFence())
			if err != nil {
				return nil, err
			}
			return nil, l.Release(context.Background())
		}, func(h *modelHolder) {
			for round := 0; round < 3; round++ {
				time.Sleep(h.uniform(time.Microsecond, 300*time.Millisecond))
				read, wait := h.rng.Float64() < 0.5, h.rng.IntN(2) == 0
				ctx, cancel := context.WithTimeout(context.Background(), h.uniform(time.Millisecond, 2*h.ttl))
				started := time.Now()
				var (
					until   func() time.Time
					extend  func(context.Context) error
					release func(context.Context) error
					fence   func(context.Context) (uint64, error)
					err     error
				)
				if read {
					var r *redlock.ReadLock
					if wait {
						r, err = h.cl.RLock(ctx, "r")
					} else {
						r, err = h.cl.TryRLock(ctx, "r")
					}
					if err == nil {
						until, extend, release = r.Until, r.Extend, r.Release
					}
				} else {
					var opts []redlock.LockOption
					if h.rng.IntN(2) == 0 {
						opts = append(opts, redlock.WithFence())
					}
					var l *redlock.Lock
					if wait {
						l, err = h.cl.WLock(ctx, "r", opts...)
					} else {
						l, err = h.cl.TryWLock(ctx, "r", opts...)
					}
					if err == nil {
						until, extend, release, fence = l.Until, l.Extend, l.Release, l.Fence
					}
				}
				cancel()
				if err != nil {
					h.failed(fmt.Sprintf("read %v, wait %v", read, wait), err)
					continue
				}
				g := &history.Grant{Client: h.c, Resource: "r", Started: started, Acquired: time.Now(), Read: read}
				h.add(g)
				for k := 1 + h.rng.IntN(3); k > 0; k-- {
					if h.rng.Float64() < 0.3 {
						_ = extend(context.Background())
					}
					if fence != nil {
						tok, err := fence(context.Background())
						if err != nil {
							break
						}
						g.Token = tok
					}
					if !h.act(g, until, nil) {
						break
					}
					time.Sleep(h.uniform(0, 150*time.Millisecond))
				}
				if h.rng.Float64() < 0.75 {
					g.Released = time.Now()
					_ = release(context.Background())
				}
				g.Until = until()
			}
		})
	})
	reads, writes, shared := 0, 0, 0
	for _, r := range runs {
		rep := history.CheckRW(r.grants)
		reads += rep.Reads
		writes += rep.Writes
		shared += rep.SharedReads
		if rep.Violations() > 0 {
			t.Errorf("seed %d: reader beside a writer %+v, two writers %+v, token order %+v", r.seed, rep.ReaderWriter, rep.Writers, rep.TokenOrder)
		}
	}
	logRuns(t, "rwlock", runs, start)
	t.Logf("read grants %d, write grants %d, pairs of readers that shared %d", reads, writes, shared)
	if writes == 0 || shared == 0 {
		t.Fatalf("writes %d, shared reads %d: the runs do not exercise the read-write lock", writes, shared)
	}
}
