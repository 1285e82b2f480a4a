package sim_test

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/sim"
)

// quarantineProfile: held schedules (every fault family of TestSimHeld) plus
// nodes that restart empty at once, often a node holding a fresh grant's key
// that two clients' majorities share; the clients' nodes have a restart guard
// (quarantine TTL + drift allowance) that the simulation feeds at every
// restart; and each session takes the lock by a path drawn from the seed
// (TryLock, Lock, LockMulti, DoMulti), a third of the schedules in fair mode.
// unguardedProfile is the same schedules (same seeds, same draws) without the
// guard: they break P5.
var (
	quarantineProfile = sim.Profile{
		Name:   "restart-quarantine",
		Faults: withWipes(sim.AllFaults),
		Nodes:  []int{3, 3, 3, 5}, Clients: []int{2, 2, 2, 3},
		Quarantine: true, Paths: true,
	}
	unguardedProfile = sim.Profile{
		Name:   "restart-unguarded",
		Faults: withWipes(sim.AllFaults),
		Nodes:  []int{3, 3, 3, 5}, Clients: []int{2, 2, 2, 3},
		Paths: true,
	}
)

func withWipes(f sim.Faults) sim.Faults {
	f.Wipes = true
	return f
}

// TestSimRestartQuarantine: nodes restart without persistence at once (down
// 1–50 ms), on every grant path. With the clients' restart guards
// (node.WithRestartGuard over node.FromPool, told of each restart by the
// simulation) P5 holds by delayed restart, and nothing may break ("guarded":
// 10 000 schedules, 1 000 under -race). Without them the same seeds break P5:
// overlaps must be found, and fencing must still accept no stale write
// ("unguarded": 600 schedules, 200 under -race or -short).
func TestSimRestartQuarantine(t *testing.T) {
	t.Run("guarded", func(t *testing.T) {
		run := "^TestSimRestartQuarantine$/^guarded$"
		if *flagSeed != 0 {
			if res := replay(t, run, quarantineProfile); res.Violations() > 0 {
				t.Errorf("seed %d: %d violations", *flagSeed, res.Violations())
			}
			return
		}
		n := *flagSchedules
		if n <= 0 {
			switch {
			case testing.Short():
				n = 2000
			case raceEnabled:
				// A schedule here costs about 4.5 times one of TestSimHeld
				// (135 node commands instead of 52, most of them Lua
				// scripts): 1 000 added 200 s to the package under -race
				// and made the simulation the slowest lane of CI; the
				// 10 000 run without -race (docs/simulation.md §7).
				n = 400
			default:
				n = 10000
			}
		}
		b := runMany(t, quarantineProfile, n, func(r *sim.Result) bool { return r.Violations() > 0 })
		b.log(t)
		b.logPaths(t)
		resultLine(fmt.Sprintf("sim schedules=%d preconditions=held restarts=empty-quarantined wipes=%d quarantine_refusals=%d %s violations=%d duration_ms=%d",
			b.schedules, b.wipes, b.quarantined, b.pathCounts(), b.violations, b.elapsed.Milliseconds()))
		for i, res := range b.failed {
			if i == 3 {
				t.Logf("... and %d more failing seeds", len(b.failed)-3)
				break
			}
			report(t, run, res)
		}
		if b.violations > 0 {
			t.Errorf("%d violations in %d schedules with quarantined restarts", b.violations, b.schedules)
		}
		b.requireCoverage(t)
		if b.quarantined == 0 {
			t.Errorf("no acquisition was refused by a restart guard in %d schedules: the guard was never exercised", b.schedules)
		}
	})
	t.Run("unguarded", func(t *testing.T) {
		run := "^TestSimRestartQuarantine$/^unguarded$"
		if *flagSeed != 0 {
			replay(t, run, unguardedProfile)
			return
		}
		n := 600
		if testing.Short() || raceEnabled {
			n = 200
		}
		b := runMany(t, unguardedProfile, n, func(r *sim.Result) bool {
			return len(r.Report.StaleAccepted) > 0 || len(r.Report.TokenOrder) > 0 || len(r.Anomalies) > 0
		})
		b.log(t)
		b.logPaths(t)
		resultLine(fmt.Sprintf("sim schedules=%d preconditions=broken restarts=empty-unguarded wipes=%d %s overlaps_found=%d stale_accepted=%d duration_ms=%d",
			b.schedules, b.wipes, b.pathCounts(), b.overlaps, b.stale, b.elapsed.Milliseconds()))
		for i, res := range b.failed {
			if i == 3 {
				t.Logf("... and %d more failing seeds", len(b.failed)-3)
				break
			}
			report(t, run, res)
		}
		if b.overlaps == 0 {
			t.Errorf("no overlap found in %d schedules with unguarded empty restarts", b.schedules)
		}
		if b.stale > 0 || b.tokenOrder > 0 || b.anomalies > 0 {
			t.Errorf("fencing accepted %d stale writes and misordered %d token pairs; %d anomalies", b.stale, b.tokenOrder, b.anomalies)
		}
		if b.quarantined > 0 {
			t.Errorf("%d acquisitions refused by a restart guard, without guards", b.quarantined)
		}
	})
}

// TestSimRestartQuarantineSensitivity shows that the guarded test can fail:
// the same schedules, but the guards quarantine a restarted node for a fifth
// of the TTL only. Leases that relied on the lost keys outlive it, and
// overlaps must be found.
func TestSimRestartQuarantineSensitivity(t *testing.T) {
	p := quarantineProfile
	p.Name, p.QuarantineFor = "restart-quarantine-short", sim.DefaultTTL/5
	if *flagSeed != 0 {
		replay(t, "^TestSimRestartQuarantineSensitivity$", p)
		return
	}
	n := 600
	if testing.Short() || raceEnabled {
		n = 200
	}
	b := runMany(t, p, n, func(r *sim.Result) bool { return len(r.Report.Overlaps) > 0 })
	b.log(t)
	b.logPaths(t)
	var seeds []uint64
	for _, r := range b.failed {
		seeds = append(seeds, r.Schedule.Seed)
	}
	t.Logf("seeds with an overlap: %v", seeds)
	if b.overlaps == 0 {
		t.Errorf("no overlap in %d schedules with a quarantine of %v (TTL %v): the guarded test would miss a short quarantine", b.schedules, p.QuarantineFor, sim.DefaultTTL)
	}
}

// TestSimRestartQuarantineQueues: the guarded schedules reach the nodes'
// waiters' queue (default-mode waiters, queued once refused, and fair mode's),
// besides plain acquisitions, in the first 60 seeds' message logs.
func TestSimRestartQuarantineQueues(t *testing.T) {
	counts := map[string]int{}
	for seed := uint64(1); seed <= 60; seed++ {
		tl := runOne(t, sim.Generate(seed, quarantineProfile), true).History.Timeline()
		for _, name := range []string{"acquire", "fairacquire", "fairrelease"} {
			counts[name] += strings.Count(tl, " "+name+" redlock:{r}")
		}
	}
	t.Logf("scripts run on r's keys in 60 schedules: %v", counts)
	for name, c := range counts {
		if c == 0 {
			t.Errorf("no %s on r's keys in 60 guarded schedules", name)
		}
	}
}

// pathCounts renders the grants by path: "grants_trylock=… grants_lock=…".
func (b *batch) pathCounts() string {
	var parts []string
	for _, p := range []string{sim.PathTryLock, sim.PathLock, sim.PathLockMulti, sim.PathDoMulti} {
		parts = append(parts, fmt.Sprintf("grants_%s=%d", strings.ToLower(p), b.byPath[p]))
	}
	return strings.Join(parts, " ")
}

func (b *batch) logPaths(t *testing.T) {
	t.Helper()
	var keys []string
	for k := range b.byPath {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, b.byPath[k]))
	}
	t.Logf("  grants by path: %s; %d schedules in fair mode; %d node restarts, %d of them empty; %d failed acquisitions with a node quarantined",
		strings.Join(parts, ", "), b.fair, b.restarts, b.wipes, b.quarantined)
}

// requireCoverage fails the test when a grant path, fair mode or empty
// restarts are missing from the batch.
func (b *batch) requireCoverage(t *testing.T) {
	t.Helper()
	for _, p := range []string{sim.PathTryLock, sim.PathLock, sim.PathLockMulti, sim.PathDoMulti} {
		if b.byPath[p] == 0 {
			t.Errorf("no grant by %s in %d schedules", p, b.schedules)
		}
	}
	if b.fair == 0 {
		t.Errorf("no schedule in fair mode")
	}
	if b.wipes == 0 {
		t.Errorf("no empty restart in %d schedules", b.schedules)
	}
}

// TestSimRestartQuarantineReplay: the guard keeps replays exact. With TryLock
// only (Paths off), a seed of the guarded profile replays message for message.
// With every path, the schedule (faults, client decisions, message fates) is
// the seed's, but Lock, LockMulti and DoMulti draw their retry jitter from the
// global math/rand/v2 source, which no test can seed: their replays may differ
// (docs/simulation.md §8).
func TestSimRestartQuarantineReplay(t *testing.T) {
	n := 10
	if testing.Short() {
		n = 4
	}
	p := quarantineProfile
	p.Name, p.Paths = "restart-quarantine-trylock", false
	for i := 0; i < n; i++ {
		seed := *flagBase + uint64(i)
		s := sim.Generate(seed, p)
		a, b, quiet := runOne(t, s, true), runOne(t, s, true), runOne(t, s, false)
		if a.History.Digest() != b.History.Digest() {
			t.Errorf("seed %d (%s): two runs differ", seed, p.Name)
		}
		if a.Report.Summary() != quiet.Report.Summary() {
			t.Errorf("seed %d (%s): verdict with the message log %q, without %q", seed, p.Name, a.Report.Summary(), quiet.Report.Summary())
		}
		if a.Violations() > 0 {
			t.Errorf("seed %d (%s): %d violations", seed, p.Name, a.Violations())
		}
		if x, y := sim.Generate(seed, quarantineProfile).String(), sim.Generate(seed, quarantineProfile).String(); x != y {
			t.Errorf("seed %d: two schedules of one seed differ:\n%s\n%s", seed, x, y)
		}
		// The unguarded schedules are the guarded ones without the guards.
		g, u := sim.Generate(seed, quarantineProfile), sim.Generate(seed, unguardedProfile)
		if g.Quarantine == 0 || u.Quarantine != 0 || u.Break != sim.BreakRestart || g.Break != sim.BreakNone {
			t.Errorf("seed %d: guarded quarantine %v break %q, unguarded quarantine %v break %q", seed, g.Quarantine, g.Break, u.Quarantine, u.Break)
		}
		g.Quarantine, g.Break, g.Profile = 0, u.Break, u.Profile
		if !reflect.DeepEqual(g, u) {
			t.Errorf("seed %d: the unguarded schedule is not the guarded one without guards:\n%s\n%s", seed, g.String(), u.String())
		}
	}
}
