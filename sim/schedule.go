package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redlock-go/redlock/clock"
)

// Break names the precondition of docs/safety.md that a broken schedule
// violates. The empty Break is a schedule within every bound.
type Break string

// The preconditions a schedule can break.
const (
	BreakNone     Break = ""
	BreakRate     Break = "P1-rate"     // a node's clock runs more than the drift factor fast
	BreakStep     Break = "P2-step"     // a node's clock steps forward by more than the margin while a lock is held
	BreakPause    Break = "P3-pause"    // a holder pauses past its validity between the check and the write
	BreakRestart  Break = "P5-restart"  // a node restarts empty at once while a lock is held
	BreakEvict    Break = "P6-evict"    // a node evicts a held lock key
	BreakFailover Break = "P7-failover" // a node is replaced by a replica that missed the lock's writes
)

// Faults selects the fault families a profile draws from, all within the
// bounds of docs/safety.md unless the schedule breaks a precondition.
type Faults struct {
	// Net: message delays, slow messages (late replies beyond the node
	// timeout), request and reply loss, partitions (P4: none of it is a
	// safety precondition).
	Net bool
	// Rate: node clock rates in [0.95, 1 + 0.95·f] (P1).
	Rate bool
	// Steps: node clock steps, backward of any size and forward within what
	// rate drift leaves of the drift allowance (P2).
	Steps bool
	// Pauses: client pauses before the validity check (any length) and after
	// it (shorter than the validity left, minus an action budget) (P3).
	Pauses bool
	// Restarts: a node crash, restarted with its data after any delay, or
	// empty after at least TTL + drift allowance (P5).
	Restarts bool
	// Wipes: nodes restart empty at once (down 1–50 ms): a planned crash,
	// or, in half of the schedules, a crash aimed at a node holding a fresh
	// grant's key, with the clients' majorities sharing one node (as in
	// BreakRestart). P5 then holds only if the clients quarantine restarted
	// nodes (Profile.Quarantine); without, the schedule breaks P5.
	Wipes bool
}

// AllFaults enables every fault family.
var AllFaults = Faults{Net: true, Rate: true, Steps: true, Pauses: true, Restarts: true}

// Profile is a family of random schedules.
type Profile struct {
	Name   string
	Faults Faults
	// Breaks: every schedule breaks one of these preconditions (chosen by the
	// seed); none when empty.
	Breaks []Break
	// Nodes and Clients are drawn from these.
	Nodes   []int
	Clients []int
	// TTL overrides the default lease (1s).
	TTL time.Duration
	// MaxDelay overrides the usual one-way delay bound (2ms); SlowProb and
	// SlowMax the share of slow messages (5%) and their delay bound (3 node
	// timeouts).
	MaxDelay, SlowMax time.Duration
	SlowProb          float64
	// ClientDriftFactor, if set, is the drift factor the clients assume,
	// while the schedule's clocks stay within the default factor (0.01): a
	// mutant deployment, to show that the checker catches a lock that
	// underestimates drift.
	ClientDriftFactor float64
	// Quarantine gives the clients' nodes a restart guard with a quarantine
	// of TTL + drift allowance, fed by the simulation at every restart
	// (WorldConfig.Quarantine): the delayed restart of P5, enforced by the
	// clients.
	Quarantine bool
	// QuarantineFor, if set, overrides that quarantine: a mutant deployment
	// whose quarantine is shorter than the TTL, to show that the checker
	// catches it.
	QuarantineFor time.Duration
	// Paths makes each session take the lock by a path drawn from the seed:
	// TryLock, Lock (waiting, through the nodes' waiters' queue when refused),
	// LockMulti or DoMulti; and a third of the schedules run every client in
	// fair mode (redlock.WithFair). Without it, sessions use TryLock only.
	Paths bool
	// Breaker turns the clients' node circuit breakers on (redlock.WithBreaker).
	// Off by default: a breaker changes only which calls are sent, never a
	// vote, but its state depends on the order of calls that end at one virtual
	// instant, which would make replays differ.
	Breaker bool
}

// Crash is a planned node crash.
type Crash struct {
	Node     int
	At, Down time.Duration
	Empty    bool
}

// Adaptive is a fault aimed at a held lock: when a grant is made, with
// probability Prob, at a random moment of its validity, the fault hits a node
// that holds the grant's key.
type Adaptive struct {
	Kind             Break
	Prob             float64
	Max              int
	StepMin, StepMax time.Duration // BreakStep: size of the forward step
	DownMax          time.Duration // BreakRestart: how long the node stays down
}

// Schedule is one fully determined run: everything random is drawn from Seed.
type Schedule struct {
	Seed    uint64
	Profile string
	Break   Break

	Nodes, Clients int
	TTL            time.Duration
	NodeTimeout    time.Duration
	DriftFactor    float64

	Rates    []float64
	Steps    [][]Step
	Links    [][]LinkFaults // [client][node]
	Crashes  []Crash
	Adaptive *Adaptive
	// Shared is, in a broken schedule with cut links, the one node that the
	// majorities of clients A and B share: faults aim at it when they can.
	Shared int
	// Probe adds the prober P, which tries to take the lock just when a
	// majority of nodes let a grant's key go (at most ProbeMax grants).
	Probe    bool
	ProbeMax int
	// Warmup: before the clients start, a client that reaches every node
	// takes, fences, writes and releases the lock once.
	Warmup bool
	// Quarantine: the clients' restart quarantine (0: none; see
	// Profile.Quarantine).
	Quarantine time.Duration
	// Paths: sessions draw their grant path (see Profile.Paths); Fair: every
	// client is in fair mode.
	Paths, Fair bool

	// Client behaviour.
	Sessions    int           // at most this many lock sessions per client
	Attempts    int           // at most this many TryLock attempts per session
	BackoffMax  time.Duration // between attempts, uniform in (0, BackoffMax]
	Breaker     bool          // node circuit breakers on (Profile.Breaker)
	PrePause    bool          // pauses between the acquisition and the validity check
	PostPause   bool          // pauses between the check and the write, within validity
	BrokenPause float64       // probability that a post-check pause exceeds the TTL
}

// Default timing of the simulated deployment: a 1 s lease (drift allowance
// 12 ms at f = 0.01) and a 50 ms node timeout.
const (
	DefaultTTL         = time.Second
	DefaultNodeTimeout = 50 * time.Millisecond
	// ActionBudget is what a holder keeps in hand after its validity check: a
	// pause after the check is shorter than the validity left minus this.
	ActionBudget = time.Millisecond
)

// StepBudget is the largest forward step a node clock running at rate may take
// during a lease without breaking P2: the key set at t0 must outlive Until =
// t0 + TTL − drift, i.e. (TTL − drift)·rate + step < TTL.
func StepBudget(ttl time.Duration, f, rate float64) time.Duration {
	return ttl - time.Duration(float64(ttl-clock.Drift(ttl, f))*rate)
}

// Generate draws a schedule of profile p from seed.
func Generate(seed uint64, p Profile) Schedule {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x5c4ed)), p: p}
	s := &g.s
	*s = Schedule{
		Seed: seed, Profile: p.Name,
		Nodes: g.pick(p.Nodes, 3), Clients: g.pick(p.Clients, 2),
		TTL: DefaultTTL, NodeTimeout: DefaultNodeTimeout, DriftFactor: clock.DefaultDriftFactor,
		Sessions: 2, Attempts: 4, BackoffMax: 80 * time.Millisecond,
	}
	if p.TTL > 0 {
		s.TTL = p.TTL
	}
	if len(p.Breaks) > 0 {
		s.Break = p.Breaks[g.rng.IntN(len(p.Breaks))]
	}
	g.horizon = 2 * s.TTL // faults fall in the busy part of a run
	g.clocks()
	g.links()
	// Often, each client reaches only a bare majority (a different minority
	// is cut off for each): faults on one node then matter most. An
	// unavailable minority is within P8's budget.
	if p.Faults.Net && s.Break == BreakNone && g.rng.Float64() < 0.3 {
		s.cutMinorities(g.rng)
		g.cut = true
	}
	// The prober aims at the end of leases (see Schedule.Probe).
	if g.rng.Float64() < 0.5 {
		s.Probe, s.ProbeMax = true, 1+g.rng.IntN(2)
	}
	g.crashes()
	s.PrePause = p.Faults.Pauses
	s.Breaker = p.Breaker
	s.PostPause = p.Faults.Pauses
	if p.ClientDriftFactor > 0 {
		s.DriftFactor = p.ClientDriftFactor // the bounds above used the true factor
	}
	g.breakPrecondition()
	// Draws added after the first profiles: only profiles that ask for them
	// draw them, so that the other profiles' seeds keep their schedules.
	if p.Faults.Wipes {
		g.wipes()
	}
	if p.Paths {
		s.Paths = true
		s.Fair = g.rng.IntN(3) == 0
	}
	if p.Quarantine {
		s.Quarantine = s.TTL + clock.Drift(s.TTL, s.DriftFactor)
		if p.QuarantineFor > 0 {
			s.Quarantine = p.QuarantineFor
		}
	}
	return *s
}

// generator draws one schedule; the order of its draws is part of what a seed
// means, so that a seed replays the same schedule.
type generator struct {
	rng     *rand.Rand
	p       Profile
	s       Schedule
	horizon time.Duration
	cut     bool // cutMinorities was applied
}

func (g *generator) pick(xs []int, def int) int {
	if len(xs) == 0 {
		return def
	}
	return xs[g.rng.IntN(len(xs))]
}

func (g *generator) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)))
}

// clocks draws each node's clock rate and steps.
func (g *generator) clocks() {
	s, f, rng := &g.s, g.p.Faults, g.rng
	s.Rates = make([]float64, s.Nodes)
	s.Steps = make([][]Step, s.Nodes)
	for n := range s.Rates {
		s.Rates[n] = 1
		if f.Rate {
			// Slow clocks are harmless; fast ones are kept below 1 + f, and
			// often close to it.
			switch u := rng.Float64(); {
			case u < 0.3:
				s.Rates[n] = 0.95 + rng.Float64()*0.05
			case u < 0.7:
				s.Rates[n] = 1 + (0.5+0.49*rng.Float64())*s.DriftFactor
			}
		}
		if f.Steps {
			if rng.Float64() < 0.25 {
				budget := StepBudget(s.TTL, s.DriftFactor, s.Rates[n])
				s.Steps[n] = append(s.Steps[n], Step{At: g.uniform(0, g.horizon), Delta: time.Duration((0.5 + 0.49*rng.Float64()) * float64(budget))})
			}
			if rng.Float64() < 0.15 {
				s.Steps[n] = append(s.Steps[n], Step{At: g.uniform(0, g.horizon), Delta: -g.uniform(time.Millisecond, 3*s.TTL)})
			}
		}
	}
}

// links draws each client-node link's delays, loss and partitions.
func (g *generator) links() {
	s, p := &g.s, g.p
	s.Links = make([][]LinkFaults, s.Clients)
	for c := range s.Links {
		s.Links[c] = make([]LinkFaults, s.Nodes)
		for n := range s.Links[c] {
			lf := LinkFaults{MinDelay: 20 * time.Microsecond, MaxDelay: 2 * time.Millisecond}
			if p.MaxDelay > 0 {
				lf.MaxDelay = p.MaxDelay
			}
			if p.Faults.Net {
				lf.SlowProb, lf.SlowMax = 0.05, 3*s.NodeTimeout
				if p.SlowProb > 0 {
					lf.SlowProb = p.SlowProb
				}
				if p.SlowMax > 0 {
					lf.SlowMax = p.SlowMax
				}
				lf.ReqLoss, lf.ReplyLoss = 0.02, 0.02
				if g.rng.Float64() < 0.1 {
					from := g.uniform(0, g.horizon)
					lf.Partitions = append(lf.Partitions, Interval{From: from, To: from + g.uniform(20*time.Millisecond, 800*time.Millisecond)})
				}
			}
			s.Links[c][n] = lf
		}
	}
}

// crashes draws crashes within P5: with data after any delay, or empty after
// at least TTL + drift allowance.
func (g *generator) crashes() {
	s, rng := &g.s, g.rng
	if !g.p.Faults.Restarts || rng.Float64() >= 0.3 {
		return
	}
	c := Crash{Node: rng.IntN(s.Nodes), At: g.uniform(0, g.horizon)}
	if rng.Float64() < 0.5 {
		c.Down = g.uniform(time.Millisecond, 500*time.Millisecond)
	} else {
		c.Empty = true
		c.Down = s.TTL + clock.Drift(s.TTL, s.DriftFactor) + g.uniform(time.Millisecond, 400*time.Millisecond)
	}
	s.Crashes = append(s.Crashes, c)
}

// wipes draws empty restarts at once (Faults.Wipes): in half of the
// schedules, aimed at a node holding a fresh grant's key, preferably the one
// node two clients' majorities share (the set-up of BreakRestart); in the
// others, one or two planned crashes. Without a quarantine the schedule breaks
// P5, and says so.
func (g *generator) wipes() {
	s, rng := &g.s, g.rng
	if s.Break == BreakNone && !g.p.Quarantine {
		s.Break = BreakRestart
	}
	if s.Adaptive == nil && rng.IntN(2) == 0 {
		if !g.cut {
			s.cutMinorities(rng)
			g.cut = true
		}
		s.Warmup = true
		s.Sessions, s.Attempts, s.BackoffMax = 2, 20, 60*time.Millisecond
		s.Adaptive = &Adaptive{Kind: BreakRestart, Prob: 0.8, Max: 2, DownMax: 50 * time.Millisecond}
		return
	}
	for k := 1 + rng.IntN(2); k > 0; k-- {
		s.Crashes = append(s.Crashes, Crash{Node: rng.IntN(s.Nodes), At: g.uniform(0, g.horizon), Empty: true,
			Down: g.uniform(time.Millisecond, 50*time.Millisecond)})
	}
}

// breakPrecondition sets up the precondition the profile breaks, if any.
func (g *generator) breakPrecondition() {
	s, rng := &g.s, g.rng
	switch s.Break {
	case BreakNone:
	case BreakPause:
		s.PostPause = true
		s.BrokenPause = 0.6
		s.Sessions, s.Attempts, s.BackoffMax = 2, 20, 60*time.Millisecond
	default:
		// A fault on one node only matters when it is the only node two
		// majorities share: cut each client off from ⌊N/2⌋ nodes, a different
		// set for each client, so that two clients' majorities share a single
		// node. A warm-up grant first gives every node a fence counter, as
		// a resource in use has.
		s.cutMinorities(rng)
		g.cut = true
		s.Warmup = true
		s.Sessions, s.Attempts, s.BackoffMax = 2, 20, 60*time.Millisecond
		switch s.Break {
		case BreakRate:
			s.Rates[s.Shared] = 1.1 + rng.Float64()*0.9
		case BreakStep:
			s.Adaptive = &Adaptive{Kind: s.Break, Prob: 0.8, Max: 2, StepMin: s.TTL, StepMax: s.TTL + 500*time.Millisecond}
		case BreakRestart:
			s.Adaptive = &Adaptive{Kind: s.Break, Prob: 0.8, Max: 2, DownMax: 50 * time.Millisecond}
		case BreakEvict, BreakFailover:
			s.Adaptive = &Adaptive{Kind: s.Break, Prob: 0.8, Max: 2}
		}
	}
}

// cutMinorities cuts each client off from ⌊N/2⌋ nodes for the whole run, a
// different set for each client, so that the majorities of clients A and B
// share a single node (Shared).
func (s *Schedule) cutMinorities(rng *rand.Rand) {
	perm := rng.Perm(s.Nodes)
	k := s.Nodes / 2
	for c := range s.Links {
		for j := 0; j < k; j++ {
			n := perm[(c*k+j)%s.Nodes]
			s.Links[c][n].Partitions = append(s.Links[c][n].Partitions, Interval{From: 0, To: Forever})
		}
	}
	s.Shared = perm[s.Nodes-1] // outside A's and B's cut sets
}

// String summarises the schedule (printed with a failing timeline).
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d profile=%s break=%q nodes=%d clients=%d ttl=%v node-timeout=%v drift-factor=%v (allowance %v)\n",
		s.Seed, s.Profile, s.Break, s.Nodes, s.Clients, s.TTL, s.NodeTimeout, s.DriftFactor, clock.Drift(s.TTL, s.DriftFactor))
	for n := 0; n < s.Nodes; n++ {
		fmt.Fprintf(&b, "  n%d: clock rate %.5f", n+1, s.Rates[n])
		for _, st := range s.Steps[n] {
			fmt.Fprintf(&b, ", step %+v at %s", st.Delta.Round(time.Microsecond), fmtDur(st.At))
		}
		b.WriteString("\n")
	}
	for c := range s.Links {
		for n, lf := range s.Links[c] {
			if len(lf.Partitions) == 0 {
				continue
			}
			fmt.Fprintf(&b, "  link %s→n%d cut:", clientName(c), n+1)
			for _, p := range lf.Partitions {
				if p.To >= Forever {
					fmt.Fprintf(&b, " [%s, ∞)", fmtDur(p.From))
				} else {
					fmt.Fprintf(&b, " [%s, %s)", fmtDur(p.From), fmtDur(p.To))
				}
			}
			b.WriteString("\n")
		}
	}
	if len(s.Links) > 0 && len(s.Links[0]) > 0 {
		lf := s.Links[0][0]
		fmt.Fprintf(&b, "  links: delay %v–%v, slow %.0f%% up to %v, request loss %.0f%%, reply loss %.0f%%\n",
			lf.MinDelay, lf.MaxDelay, lf.SlowProb*100, lf.SlowMax, lf.ReqLoss*100, lf.ReplyLoss*100)
	}
	for _, c := range s.Crashes {
		kind := "with data"
		if c.Empty {
			kind = "EMPTY"
		}
		fmt.Fprintf(&b, "  n%d crashes at %s, restarts %s after %v\n", c.Node+1, fmtDur(c.At), kind, c.Down.Round(time.Microsecond))
	}
	if a := s.Adaptive; a != nil {
		fmt.Fprintf(&b, "  adaptive fault %s on a node holding a granted key (p=%.1f, at most %d)\n", a.Kind, a.Prob, a.Max)
	}
	if s.Quarantine > 0 {
		fmt.Fprintf(&b, "  restart quarantine %v: the clients' nodes refuse every grant script for that long after a restart (node.WithRestartGuard)\n", s.Quarantine)
	}
	if s.Paths {
		fmt.Fprintf(&b, "  grant paths: TryLock, Lock, LockMulti, DoMulti, drawn per session; fair mode %v\n", s.Fair)
	}
	if s.Probe {
		fmt.Fprintf(&b, "  prober P: tries to take the lock when a majority lets a grant's key go (%d grants)\n", s.ProbeMax)
	}
	if s.Warmup {
		b.WriteString("  warm-up: W takes, fences, writes and releases the lock first (every node gets a counter)\n")
	}
	fmt.Fprintf(&b, "  clients: ≤%d sessions, ≤%d attempts, backoff ≤%v, pre-check pauses %v, post-check pauses %v, pauses past TTL p=%.1f\n",
		s.Sessions, s.Attempts, s.BackoffMax, s.PrePause, s.PostPause, s.BrokenPause)
	return b.String()
}

func clientName(c int) string { return string(rune('A' + c)) }

// Forever is the end of a partition that lasts the whole run.
const Forever = time.Duration(1 << 62)
