package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// Resource is the name of the resource every client of a run locks.
const Resource = "r"

// LockKey is Resource's lock key on the nodes (the default prefix).
var LockKey = redlock.LockKey(redlock.DefaultKeyPrefix, Resource)

// Result is the outcome of one run.
type Result struct {
	Schedule Schedule
	History  *History
	Report   Report
	// Anomalies are unexpected errors of the run itself (not of the lock).
	Anomalies []string
	// Commands is how many commands the nodes executed; Virtual how long the
	// run lasted in virtual time.
	Commands int
	Virtual  time.Duration
	// Restarts and Wipes count the node restarts, and the empty ones;
	// Quarantined the failed acquisitions in which a restart guard refused a
	// node.
	Restarts, Wipes, Quarantined int
}

// Violations counts what must not happen within the preconditions.
func (r *Result) Violations() int { return r.Report.Violations() + len(r.Anomalies) }

// Run executes s and checks its history. Call it inside a synctest bubble.
// With netLog, every message is in the timeline.
func Run(s Schedule, netLog bool) *Result {
	w, prober, warm := scheduleWorld(s, netLog)
	r := &runner{s: s, w: w, grants: make(chan grantEvent, 64), probes: make(chan grantEvent, 64)}
	res := &Result{Schedule: s, History: w.hist}
	r.startFaults()
	if s.Warmup {
		r.warmupWith(warm)
	}
	r.runClients(prober)
	close(r.grants)
	w.Close()
	r.helpers.Wait()

	r.mu.Lock()
	res.Anomalies = append(res.Anomalies, r.anomalies...)
	r.mu.Unlock()
	res.Report = Check(w.hist)
	res.Commands = w.Commands()
	res.Restarts, res.Wipes = w.Restarts()
	res.Quarantined = w.Quarantined()
	res.Virtual = w.since()
	return res
}

// scheduleWorld builds the world of a schedule. Its clients are the
// schedule's, then the prober P (if any, index prober), then the warm-up
// client W (if any, index warm); P and W reach every node over a quiet
// network.
func scheduleWorld(s Schedule, netLog bool) (w *World, prober, warm int) {
	nc := s.Clients
	var names []string
	for c := 0; c < s.Clients; c++ {
		names = append(names, clientName(c))
	}
	prober, warm = -1, -1
	if s.Probe {
		prober = nc
		nc++
		names = append(names, "P")
	}
	if s.Warmup {
		warm = nc
		nc++
		names = append(names, "W")
	}
	w = NewWorld(WorldConfig{
		Seed: s.Seed, Nodes: s.Nodes, Clients: nc,
		TTL: s.TTL, NodeTimeout: s.NodeTimeout, DriftFactor: s.DriftFactor,
		Rates: s.Rates, Steps: s.Steps, Breaker: s.Breaker,
		Links: func(c, n int) LinkFaults {
			if c >= s.Clients {
				return LinkFaults{MinDelay: 20 * time.Microsecond, MaxDelay: 2 * time.Millisecond}
			}
			return s.Links[c][n]
		},
		NetLog:     netLog,
		Names:      names,
		Quarantine: s.Quarantine,
	})
	return w, prober, warm
}

// startFaults starts the schedule's crashes and adaptive faults, and routes
// grants to the adaptive driver and the prober.
func (r *runner) startFaults() {
	s, w := r.s, r.w
	for _, c := range s.Crashes {
		r.helper(func() { r.crash(c) })
	}
	if s.Adaptive != nil {
		if s.Adaptive.Kind == BreakFailover {
			r.helper(r.snapshotter)
		}
		r.helper(r.driver)
	}
	w.onGrant = func(e grantEvent) {
		if s.Adaptive != nil {
			r.grants <- e
		}
		if s.Probe {
			r.probes <- e
		}
	}
}

// crash crashes a node at c.At and restarts it c.Down later.
func (r *runner) crash(c Crash) {
	w := r.w
	n := w.nodes[c.Node]
	if !r.sleepUntil(c.At) {
		return
	}
	n.Crash()
	r.sleepUntil(c.At + c.Down)
	empty := c.Empty
	if empty && !r.wipeDetectable(n) {
		// Losing this counter would break fencing's precondition (F1, and
		// the detection of docs/fencing.md §6): the node comes back from its
		// AOF instead.
		w.record("sim", fmt.Sprintf("%s would restart empty, but fewer than a majority of the other nodes have a fence counter: it restarts with its data instead", n.name))
		empty = false
	}
	n.Restart(empty)
}

// warmupWith runs the warm-up grant with client warm.
func (r *runner) warmupWith(warm int) {
	h, err := r.w.NewHolder(warm, r.clientOptions()...)
	if err == nil {
		h.silent = true // not a target of the adaptive faults
		err = r.warmup(h)
	}
	if err != nil {
		r.anomaly("warm-up: " + err.Error())
	}
}

// runClients runs the schedule's clients, and the prober (client prober, if
// not -1) until they are done.
func (r *runner) runClients(prober int) {
	var wg sync.WaitGroup
	for c := 0; c < r.s.Clients; c++ {
		h, err := r.w.NewHolder(c, r.clientOptions()...)
		if err != nil {
			r.anomaly(fmt.Sprintf("client %s: %v", clientName(c), err))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.client(h); err != nil {
				r.anomaly(fmt.Sprintf("client %s: %v", h.Name, err))
			}
		}()
	}
	var pwg sync.WaitGroup
	if prober >= 0 {
		h, err := r.w.NewHolder(prober, r.clientOptions()...)
		if err != nil {
			r.anomaly(fmt.Sprintf("prober: %v", err))
		} else {
			h.silent = true
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				r.prober(h)
			}()
		}
	}
	wg.Wait()
	close(r.probes)
	pwg.Wait()
}

// clientOptions are the options of every client of the schedule, the
// prober's and the warm-up's included: all clients of a resource must agree
// on fair mode.
func (r *runner) clientOptions() []redlock.Option {
	if r.s.Fair {
		return []redlock.Option{redlock.WithFair()}
	}
	return nil
}

type runner struct {
	s       Schedule
	w       *World
	grants  chan grantEvent // to the adaptive fault driver
	probes  chan grantEvent // to the prober
	helpers sync.WaitGroup

	mu        sync.Mutex
	anomalies []string
	snaps     [][]snapshot // [node], taken periodically for failovers
}

type grantEvent struct {
	id              string
	token           string
	acquired, until time.Duration
}

func (r *runner) anomaly(s string) {
	r.mu.Lock()
	r.anomalies = append(r.anomalies, s)
	r.mu.Unlock()
	r.w.record("sim", "ANOMALY: "+s)
}

func (r *runner) helper(f func()) {
	r.helpers.Add(1)
	go func() {
		defer r.helpers.Done()
		f()
	}()
}

// sleepUntil sleeps until d after the start; false if the world closed first.
func (r *runner) sleepUntil(d time.Duration) bool {
	wait := d - r.w.since()
	if wait <= 0 {
		select {
		case <-r.w.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.w.done:
		return false
	}
}

// client runs client c's sessions: acquire (TryLock, retried with seeded
// backoff), then for each write: maybe extend, fence (lazily if not eager),
// check time.Now().Before(lock.Until()), maybe pause, write; then release or
// walk away. Within the bounds, a pause after the check is shorter than the
// validity left minus ActionBudget; a broken schedule (P3) may pause past it.
func (r *runner) client(h *Holder) error {
	s, w := r.s, r.w
	rng := rand.New(rand.NewPCG(s.Seed, 0xc11e47+uint64(h.c)))
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	sessions := 1 + rng.IntN(s.Sessions)
	for sess := 1; sess <= sessions; sess++ {
		time.Sleep(uniform(time.Microsecond, 400*time.Millisecond))
		eager := rng.IntN(2) == 0
		attempts := 1 + rng.IntN(s.Attempts)
		path := PathTryLock
		if s.Paths {
			path = []string{PathTryLock, PathLock, PathLockMulti, PathDoMulti}[rng.IntN(4)]
		}
		var g *Grant
		switch path {
		case PathTryLock:
			for a := 0; a < attempts; a++ {
				var err error
				g, err = h.TryLock(eager)
				if err == nil {
					break
				}
				if !expected(err) {
					return err
				}
				time.Sleep(uniform(time.Microsecond, s.BackoffMax))
			}
		case PathLock, PathLockMulti:
			// One call, which the library retries; it waits as long as
			// the TryLock loop would at most.
			wait := uniform(time.Millisecond, time.Duration(attempts)*(s.BackoffMax+2*s.NodeTimeout))
			var err error
			if path == PathLock {
				g, err = h.Lock(eager, wait)
			} else {
				g, err = h.LockMulti(eager, wait, otherResources(rng))
			}
			if err != nil && !expected(err) {
				return err
			}
		case PathDoMulti:
			wait := uniform(time.Millisecond, time.Duration(attempts)*(s.BackoffMax+2*s.NodeTimeout))
			others := otherResources(rng)
			// Up to 2/3 of a TTL of work: the library renews the locks
			// (every TTL/3) once, often.
			if err := h.DoMulti(wait, uniform(0, s.TTL*2/3), others); errors.Is(err, redlock.ErrInvalid) {
				return err
			}
			continue
		}
		if g == nil {
			continue
		}
		if s.PrePause && rng.Float64() < 0.2 {
			h.Pause(g, uniform(0, 200*time.Millisecond), "between the reply and its use, before the check")
		}
		writes := 1 + rng.IntN(2)
		for wi := 0; wi < writes; wi++ {
			if rng.Float64() < 0.3 {
				_ = h.Extend(g)
			}
			if h.Fence(g) != nil {
				break
			}
			// The documented check, right before acting.
			left, ok := h.Check(g)
			if !ok {
				break
			}
			checked := w.since()
			if s.PostPause {
				if s.BrokenPause > 0 && rng.Float64() < s.BrokenPause {
					h.Pause(g, s.TTL+uniform(0, 400*time.Millisecond), fmt.Sprintf("after the check, %v left: PAST ITS VALIDITY", left))
				} else if budget := left - ActionBudget; budget > 0 && rng.Float64() < 0.5 {
					h.Pause(g, time.Duration(rng.Float64()*float64(budget)), fmt.Sprintf("after the check, %v left", left))
				}
			}
			h.Write(g, checked)
			time.Sleep(uniform(0, 100*time.Millisecond))
		}
		if rng.Float64() < 0.75 {
			_ = h.Release(g)
		} else {
			h.WalkAway(g)
		}
	}
	return nil
}

// expected reports whether err is an expected failure of an acquisition:
// not acquired, lock lost (fencing refused), unavailable.
func expected(err error) bool {
	return !errors.Is(err, redlock.ErrInvalid) &&
		(errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrLockLost) || errors.Is(err, redlock.ErrUnavailable))
}

// otherResources draws the resources a multi-resource session takes beside
// Resource: one before it in LockMulti's order, or one after, or (less often:
// every resource costs a call per node) both.
func otherResources(rng *rand.Rand) []string {
	return [][]string{{"q"}, {"s"}, {"q"}, {"s"}, {"q", "s"}}[rng.IntN(5)]
}

// warmup takes, fences, writes and releases the lock once, from a client
// that reaches every node.
func (r *runner) warmup(h *Holder) error {
	g, err := h.TryLock(true)
	if err != nil {
		return err
	}
	h.Write(g, r.w.since())
	return h.Release(g)
}

// prober is an adversary that aims at the boundary of the lease: for a grant,
// it computes from the nodes' state (remaining TTL of the grant's key and clock
// rate of each node) the moment a majority of nodes will have let the key go,
// and tries to take the lock just then (up to three attempts, in the first
// millisecond after that moment). Within the preconditions that moment is
// after the grant's validity ends, so the probe never overlaps it; beyond
// them (a fast clock, a clock step, a lost key) it finds the overlap.
func (r *runner) prober(h *Holder) {
	s, w := r.s, r.w
	rng := rand.New(rand.NewPCG(s.Seed, 0x9e0be))
	done := 0
	for e := range r.probes {
		if done >= s.ProbeMax {
			continue
		}
		done++
		if !r.sleepUntil(e.acquired + time.Millisecond) {
			return
		}
		at := r.majorityFree(e.token)
		w.record(h.Name, fmt.Sprintf("probe: %s's key will be gone from a majority at %s", e.id, fmtDur(at)))
		for k := 0; k < 3; k++ {
			// Never two attempts at one instant: the failed attempt's
			// cleanup and the next attempt's SET would tie.
			at = max(at, w.since()) + time.Microsecond + time.Duration(rng.Int64N(int64(400*time.Microsecond)))
			if !r.sleepUntil(at) {
				return
			}
			g, err := h.TryLock(false)
			if err != nil {
				continue
			}
			if _, ok := h.Check(g); ok && h.Fence(g) == nil {
				if _, ok := h.Check(g); ok {
					h.Write(g, w.since())
				}
			}
			_ = h.Release(g)
			break
		}
	}
}

// majorityFree returns when (since the start) a majority of nodes will no
// longer hold token, by their clocks as they run now.
func (r *runner) majorityFree(token string) time.Duration {
	w := r.w
	now := w.since()
	var exp []time.Duration
	for _, n := range w.nodes {
		e := now
		if n.Holds(LockKey, token) {
			e += time.Duration(float64(n.TTL(LockKey)) / n.clk.rate)
		}
		exp = append(exp, e)
	}
	sort.Slice(exp, func(i, j int) bool { return exp[i] < exp[j] })
	return exp[len(exp)/2]
}

// driver aims the schedule's adaptive fault at held locks.
func (r *runner) driver() {
	s, w := r.s, r.w
	a := s.Adaptive
	rng := rand.New(rand.NewPCG(s.Seed, 0xd41e7))
	fired := 0
	for g := range r.grants {
		if fired >= a.Max || rng.Float64() >= a.Prob {
			continue
		}
		life := g.until - g.acquired
		if life <= 0 {
			continue
		}
		fired++
		// Early in the grant: holders often release soon.
		at := g.acquired + time.Duration(rng.Float64()*float64(min(life, 60*time.Millisecond)))
		pick := rng.IntN(1 << 20)
		var delta, down time.Duration
		if a.StepMax > a.StepMin {
			delta = a.StepMin + time.Duration(rng.Int64N(int64(a.StepMax-a.StepMin)))
		}
		if a.DownMax > 0 {
			down = time.Duration(rng.Int64N(int64(a.DownMax)))
		}
		r.helper(func() {
			if !r.sleepUntil(at) {
				return
			}
			var holders []*Node
			for _, n := range w.nodes {
				if n.Holds(LockKey, g.token) {
					holders = append(holders, n)
				}
			}
			if len(holders) == 0 {
				w.record("sim", fmt.Sprintf("%s fault: no node holds %s's key any more", a.Kind, g.id))
				return
			}
			n := holders[pick%len(holders)]
			for _, h := range holders {
				if h.idx == s.Shared && pick%4 != 0 {
					n = h // aim at the node the majorities share, most of the time
				}
			}
			w.record("sim", fmt.Sprintf("%s fault aimed at %s's key on %s", a.Kind, g.id, n.name))
			switch a.Kind {
			case BreakStep:
				n.Step(delta)
			case BreakRestart:
				for _, o := range w.nodes {
					o.mu.Lock()
					down := o.down
					o.mu.Unlock()
					if down {
						w.record("sim", "another node is down: no restart (one node at a time)")
						return
					}
				}
				if !r.wipeDetectable(n) {
					w.record("sim", fmt.Sprintf("no empty restart of %s: fewer than a majority of the other nodes have a fence counter, so fencing could not detect the wipe (docs/fencing.md §6)", n.name))
					return
				}
				n.Crash()
				r.sleepUntil(w.since() + down)
				n.Restart(true)
			case BreakEvict:
				n.Evict(LockKey)
			case BreakFailover:
				r.failOver(n, g.acquired)
			}
		})
	}
}

// FenceKey is Resource's fence counter key.
var FenceKey = redlock.FenceKey(redlock.DefaultKeyPrefix, Resource)

// wipeDetectable reports whether n may lose its fence counter without breaking
// fencing: either no node has a counter yet (nothing to lose), or the other
// nodes that have one are a majority, so that every majority of answers
// includes a counter and the wiped node is distrusted (docs/fencing.md §6).
func (r *runner) wipeDetectable(n *Node) bool {
	with, any := 0, false
	for _, o := range r.w.nodes {
		if _, ok := o.Get(FenceKey); ok {
			any = true
			if o != n {
				with++
			}
		}
	}
	return !any || with >= len(r.w.nodes)/2+1
}

// snapshotter records every node's data every 20ms (what an asynchronous
// replica would have), for failovers.
func (r *runner) snapshotter() {
	r.mu.Lock()
	r.snaps = make([][]snapshot, len(r.w.nodes))
	r.mu.Unlock()
	for i := 0; ; i++ {
		for n, nd := range r.w.nodes {
			sn := nd.snapshot()
			r.mu.Lock()
			r.snaps[n] = append(r.snaps[n], sn)
			r.mu.Unlock()
		}
		if !r.sleepUntil(time.Duration(i+1) * 20 * time.Millisecond) {
			return
		}
	}
}

// failOver replaces n by a replica whose last update predates the grant.
func (r *runner) failOver(n *Node, before time.Duration) {
	r.mu.Lock()
	var pick *snapshot
	for i := range r.snaps[n.idx] {
		if sn := &r.snaps[n.idx][i]; sn.at < before-5*time.Millisecond {
			pick = sn
		}
	}
	r.mu.Unlock()
	if pick == nil {
		r.w.record("sim", "no replica state old enough: no failover")
		return
	}
	elapsed := time.Duration(float64(r.w.since()-pick.at) * n.clk.rate)
	n.failOver(*pick, elapsed)
}
