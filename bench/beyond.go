package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

// The "Beyond a mutex" section (issue 27): leader election, the semaphore
// and the read-write lock, measured by redlock-bench with the scenarios of
// the mutex (ContendedClients, Sequential) over the lockers of this file,
// and the semaphore comparison of semaphore.go (RunSemaphore).

// Scenario names of the section's results.
const (
	// ScenarioElection: separate candidates campaign for one election
	// (ElectionLocker), each leader resigning at once.
	ScenarioElection = "election hand-over"
	// ScenarioElectionRef: the same clients contending for a plain lock, the
	// reference of ScenarioElection.
	ScenarioElectionRef = "lock hand-over (ref)"
)

// Kinds of lock of the read-write lock rows (RWLocker); a row's Scenario is
// its kind.
const (
	KindLock  = "Lock"
	KindRLock = "RLock"
	KindWLock = "WLock"
)

// RWKinds are the kinds of lock of the read-write lock rows, in order.
var RWKinds = []string{KindLock, KindRLock, KindWLock}

// ElectionLocker campaigns for an election as Lock (Client.Campaign, the
// election's name being the key) and resigns as Release (Leadership.Resign):
// the contended scenarios then measure the hand-over, from a leader's Resign
// call to the next leader's Campaign returning (the grant, the term written
// by the fence round, the leader's record written).
type ElectionLocker struct {
	*RedlockLocker
}

// NewElectionLocker returns a candidate over the servers at addrs, with the
// client of NewRedlock.
func NewElectionLocker(addrs []string) (*ElectionLocker, error) {
	l, err := NewRedlock(addrs)
	if err != nil {
		return nil, err
	}
	return &ElectionLocker{l}, nil
}

// Lock implements Locker: Campaign.
func (l *ElectionLocker) Lock(ctx context.Context, key string) (Held, error) {
	ld, err := l.C.Campaign(ctx, key, "candidate")
	if err != nil {
		return nil, err
	}
	return resigner{ld}, nil
}

type resigner struct{ ld *redlock.Leadership }

func (r resigner) Release(ctx context.Context) error { return r.ld.Resign(ctx) }

// RWLocker takes, as Lock, a lock of its Kind: a plain lock (KindLock,
// Client.Lock), a read lock (KindRLock, Client.RLock) or the write lock
// (KindWLock, Client.WLock).
type RWLocker struct {
	*RedlockLocker
	Kind string
}

// Lock implements Locker.
func (l *RWLocker) Lock(ctx context.Context, key string) (Held, error) {
	switch l.Kind {
	case KindLock:
		return l.RedlockLocker.Lock(ctx, key)
	case KindRLock:
		r, err := l.C.RLock(ctx, key)
		if err != nil {
			return nil, err
		}
		return r, nil
	case KindWLock:
		w, err := l.C.WLock(ctx, key)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	return nil, fmt.Errorf("bench: unknown kind of lock %q", l.Kind)
}

// Beyond is what the "Beyond a mutex" section reports, with the settings its
// tables state.
type Beyond struct {
	// Election holds ScenarioElection results, and ElectionRef the
	// ScenarioElectionRef results of the same clients, at N=1, 3, 5.
	Election, ElectionRef []Result
	// ElectionCandidates separate clients ran for ElectionDuration at every
	// N, in each scenario, in Rounds rounds.
	ElectionCandidates int
	ElectionDuration   time.Duration

	// Semaphore holds RunSemaphore results, NotRun cells included, in the
	// order of SemaphoreCells; the N=1 cells make the baseline table.
	Semaphore []SemaphoreResult
	// SemRun is the configuration of their runs (its Cluster is not used).
	SemRun SemaphoreRun

	// RW holds Sequential results, one per kind (Scenario: one of RWKinds)
	// and N: RWWarmup unmeasured then RWIters measured acquire+release pairs
	// per kind and N, in all, in Rounds rounds.
	RW                []Result
	RWWarmup, RWIters int

	// Rounds is the number of rounds of the election and read-write lock
	// runs (each semaphore cell runs once).
	Rounds int
}

// find returns the result of scenario at N=n among rs.
func find(rs []Result, scenario string, n int) (Result, bool) {
	for _, r := range rs {
		if r.Scenario == scenario && r.N == n {
			return r, true
		}
	}
	return Result{}, false
}

// semaphore returns the result of design with permits permits over n nodes.
func (b *Beyond) semaphore(design string, permits, n int) (SemaphoreResult, bool) {
	for _, r := range b.Semaphore {
		if r.Design == design && r.Permits == permits && r.N == n {
			return r, true
		}
	}
	return SemaphoreResult{}, false
}

// errorsCell formats a count of errors with overlaps, if any.
func errorsCell(errs, overlaps int) string {
	s := fmt.Sprint(errs)
	if overlaps > 0 {
		s += fmt.Sprintf(", %d overlaps", overlaps)
	}
	return s
}

// semCPU formats a semaphore result's CPU per acquisition as "client +
// servers" microseconds.
func semCPU(r SemaphoreResult) string {
	c, s := r.CPUPerAcq(r.ClientCPU), r.CPUPerAcq(r.ServerCPU)
	return cpuCell(Result{ClientCPUPerOp: c, ServerCPUPerOp: s})
}

// writeBeyond writes the "Beyond a mutex" section.
func writeBeyond(p func(string, ...any), b *Beyond) {
	p("\n## Beyond a mutex (issue 27)\n\n")
	p("Leader election, the semaphore and the read-write lock, in the same run on the same servers (phases `election`, `semaphore`, `rwlock`). ")
	p("Latencies in ms, p50/p99 by nearest rank; sent/op and cmds/op as in the results above.\n")
	if len(b.Election) > 0 {
		p("\n### Leader election: hand-over (%d candidates, %v per N and scenario in %d rounds)\n\n", b.ElectionCandidates, b.ElectionDuration, b.Rounds)
		p("%d candidates, each a client of its own, campaign for one election; a leader resigns at once (`Resign`) and campaigns again once another candidate leads. ", b.ElectionCandidates)
		p("The hand-over is the time from a leader's `Resign` call to the next leader's `Campaign` returning: its grant, its term (the fence round) and its record written on a majority. ")
		p("The reference is the same clients contending for a plain lock in the same way (`Lock`, then `Release` at once, as in `contended, separate clients`).\n\n")
		p("| N | hand-over p50 | p99 | elections/s | fairness min/max | sent/op | cmds/op | lock hand-over p50 (ref) | ÷ ref p50 | ref cmds/op | ÷ ref cmds/op | samples | errors |\n")
		p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range b.Election {
			refP50, vsP50, refCmds, vsCmds := "–", "–", "–", "–"
			if ref, ok := find(b.ElectionRef, ScenarioElectionRef, r.N); ok && ref.Samples > 0 && r.Samples > 0 {
				refP50, vsP50 = ms(ref.P50), ratio(float64(r.P50), float64(ref.P50))
				refCmds, vsCmds = num(ref.CmdsPerOp, "%.1f"), ratio(r.CmdsPerOp, ref.CmdsPerOp)
			}
			p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", r.N, ms(r.P50), ms(r.P99), opsS(r.OpsPerSec), num(r.Fairness, "%.2f"),
				num(r.ReqsPerOp, "%.1f"), num(r.CmdsPerOp, "%.1f"), refP50, vsP50, refCmds, vsCmds, r.Samples, errorsCell(r.Errors, r.Overlaps))
		}
	}
	if len(b.Semaphore) > 0 {
		writeSemaphore(p, b)
	}
	if len(b.RW) > 0 {
		p("\n### Read-write lock: uncontended acquire+release (%d measured pairs per kind and N in %d rounds)\n\n", b.RWIters, b.Rounds)
		p("One client, one key, nobody else: per kind and N, %d unmeasured then %d measured `Lock`+`Release`, `RLock`+`Release` or `WLock`+`Release` pairs in all, one at a time, the kinds interleaved round by round. ", b.RWWarmup, b.RWIters)
		p("÷ Lock compares with the plain lock at the same N.\n\n")
		p("| N | lock | p50 | p99 | ÷ Lock p50 | sent/op | cmds/op | ÷ Lock cmds/op | allocs/op | samples | errors |\n")
		p("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range b.RW {
			vsP50, vsCmds := "ref", "ref"
			if r.Scenario != KindLock {
				vsP50, vsCmds = "–", "–"
				if l, ok := find(b.RW, KindLock, r.N); ok && l.Ops > 0 && r.Ops > 0 {
					vsP50, vsCmds = ratio(float64(r.P50), float64(l.P50)), ratio(r.CmdsPerOp, l.CmdsPerOp)
				}
			}
			p("| %d | `%s` | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", r.N, r.Scenario, ms(r.P50), ms(r.P99), vsP50,
				num(r.ReqsPerOp, "%.1f"), num(r.CmdsPerOp, "%.1f"), vsCmds, num(r.AllocsPerOp, "%.0f"), r.Samples, errorsCell(r.Errors, r.Overlaps))
		}
	}
}

// writeSemaphore writes the semaphore's two tables: the designs over N > 1
// nodes, then the shipped design against the baseline at N=1.
func writeSemaphore(p func(string, ...any), b *Beyond) {
	cfg := b.SemRun
	p("\n### Semaphore: acquisitions/s and fault tolerance (%v per cell)\n\n", cfg.Duration)
	clients := "one client"
	if cfg.Clients > 1 {
		clients = fmt.Sprintf("%d separate clients", cfg.Clients)
	}
	p("Per cell, %d goroutines per permit (at least 4) on %s acquire a permit, hold it %v, release it and acquire again, for %v. ", cfg.PerPermit, clients, cfg.Hold, cfg.Duration)
	p("acquisitions/s counts grants, the wait is `Acquire`'s latency, most holders the most permits held at once (never above n). ")
	p("The shipped design is the slots (b) (`redlock.Semaphore`: n permit slots, each a lock on a majority); the counting design (a) is the prototype of `bench/semaphore.go` (on every node a container of at most n holders, a permit needing q = `quorum.Counting(n, N)` of them; [semaphore.md](semaphore.md) compares the two). ")
	p("tolerates is how many nodes may fail while permits are still granted, N − q (arithmetic, not measured); the counting design runs only where it tolerates one. ")
	p("CPU µs/acq is this process's and the N servers' CPU time over the run per acquisition; a cell at N uses the first N servers (the command starts the two more that N=7 needs).\n\n")
	p("| permits n | N | design | q | tolerates | goroutines | acquisitions/s | ÷ slots (b) | wait p50 | wait p99 | most holders | CPU µs/acq client + servers | errors |\n")
	p("|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var baseline []int // permits with a cell at N=1
	for _, r := range b.Semaphore {
		if r.N == 1 {
			if r.Design == DesignSlots {
				baseline = append(baseline, r.Permits)
			}
			continue
		}
		if r.NotRun {
			p("| %d | %d | %s | %d | %d | – | not run: tolerates no failed node | – | – | – | – | – | – |\n", r.Permits, r.N, r.Design, r.Q, r.Tolerance)
			continue
		}
		vs := "ref"
		if r.Design != DesignSlots {
			vs = "–"
			if s, ok := b.semaphore(DesignSlots, r.Permits, r.N); ok && !s.NotRun {
				vs = ratio(r.AcqPerSec, s.AcqPerSec)
			}
		}
		p("| %d | %d | %s | %d | %d | %d | %s | %s | %s | %s | %d | %s | %d |\n", r.Permits, r.N, r.Design, r.Q, r.Tolerance, r.Goroutines,
			opsS(r.AcqPerSec), vs, ms(r.P50Wait), ms(r.P99Wait), r.MostHolders, semCPU(r), r.Errors)
	}
	if len(baseline) == 0 {
		return
	}
	p("\nAt N=1 neither design tolerates a failed node, and the counting design is a single-node Redisson-style permit-expirable semaphore written with the same scripts: the baseline of the shipped slots design. ")
	p("slots ÷ baseline above 1 means the shipped semaphore grants more permits per second.\n\n")
	p("| permits n | goroutines | slots (b) acq/s | baseline acq/s | slots ÷ baseline | wait p50 slots / baseline | wait p99 slots / baseline | CPU µs/acq slots | CPU µs/acq baseline | errors slots / baseline |\n")
	p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, n := range baseline {
		s, _ := b.semaphore(DesignSlots, n, 1)
		c, ok := b.semaphore(DesignCounting, n, 1)
		if !ok || c.NotRun {
			p("| %d | %d | %s | – | – | %s / – | %s / – | %s | – | %d / – |\n", n, s.Goroutines, opsS(s.AcqPerSec), ms(s.P50Wait), ms(s.P99Wait), semCPU(s), s.Errors)
			continue
		}
		p("| %d | %d | %s | %s | %s | %s / %s | %s / %s | %s | %s | %d / %d |\n", n, s.Goroutines, opsS(s.AcqPerSec), opsS(c.AcqPerSec), ratio(s.AcqPerSec, c.AcqPerSec),
			ms(s.P50Wait), ms(c.P50Wait), ms(s.P99Wait), ms(c.P99Wait), semCPU(s), semCPU(c), s.Errors, c.Errors)
	}
}

// Notes returns a line for every result of the section with errors or
// overlapping holders, for the report's notes.
func (b *Beyond) Notes() []string {
	var out []string
	for _, rs := range [][]Result{b.Election, b.ElectionRef, b.RW} {
		for _, r := range rs {
			if r.Errors > 0 {
				out = append(out, fmt.Sprintf("%s, N=%d: %d errors, first: %v", r.Scenario, r.N, r.Errors, r.FirstErr))
			}
			if r.Overlaps > 0 {
				out = append(out, fmt.Sprintf("%s, N=%d: %d acquisitions overlapped another holder", r.Scenario, r.N, r.Overlaps))
			}
		}
	}
	for _, r := range b.Semaphore {
		if r.Errors > 0 {
			out = append(out, fmt.Sprintf("semaphore %s, n=%d, N=%d: %d errors, first: %v", r.Design, r.Permits, r.N, r.Errors, r.FirstErr))
		}
	}
	return out
}
