package sim_test

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/redlock-go/redlock/sim"
)

var (
	flagSeed = flag.Uint64("sim.seed", 0,
		"replay one schedule: the seed printed by a failing run (use it with the -run pattern printed next to it)")
	flagSchedules = flag.Int("sim.schedules", 0,
		"number of random schedules of TestSimHeld (default 10000) and TestSimBroken (default 600)")
	flagBase = flag.Uint64("sim.base", 1,
		"first seed of the random schedules (the default run is the same on every machine; change it to explore new schedules)")
	flagWorkers = flag.Int("sim.workers", 0, "schedules run in parallel (default 4×GOMAXPROCS: a bubble leaves the CPU idle while it hands over between goroutines)")
)

func TestMain(m *testing.M) {
	// Every schedule builds a world of fresh nodes, clients and connections
	// while the live heap stays small (a few MB): collecting less often saved
	// a sixth of the CPU time under -race (when miniredis still built an
	// interpreter for every script call; script.go).
	debug.SetGCPercent(800)
	// Each node's script host builds its interpreter with gopher-lua's
	// defaults: a value stack of 5,120 slots (80 KB) and 256 call frames,
	// where our scripts need a few dozen of each; under -race every byte
	// allocated is also freed through the race detector's shadow memory. An
	// overflow would fail the script, and the schedule, loudly.
	lua.RegistrySize, lua.CallStackSize = 1024, 64
	os.Exit(m.Run())
}

// batch is the outcome of many schedules of one profile.
type batch struct {
	schedules      int
	violations     int
	overlaps       int
	leaseOverlaps  int
	stale          int
	unfencedStale  int
	tokenOrder     int
	refusedValid   int
	lateWrites     int
	grants, writes int
	withOverlap    int
	anomalies      int
	commands       int
	virtual        time.Duration
	byBreak        map[sim.Break]*breakStats
	byPath         map[string]int // grants by path
	restarts       int
	wipes          int
	quarantined    int
	fair           int           // schedules in fair mode
	failed         []*sim.Result // violations (held) or stale accepted (broken)
	elapsed        time.Duration
}

type breakStats struct{ schedules, withOverlap, overlaps, stale int }

// runOne runs a schedule in its own bubble.
func runOne(t *testing.T, s sim.Schedule, netLog bool) *sim.Result {
	var res *sim.Result
	synctest.Test(t, func(t *testing.T) {
		res = sim.Run(s, netLog)
	})
	return res
}

// runMany runs n schedules of profile p (seeds base, base+1, ...) on parallel
// workers, each schedule in its own synctest bubble. isFailure decides which
// results are printed with their timeline.
func runMany(t *testing.T, p sim.Profile, n int, isFailure func(*sim.Result) bool) *batch {
	t.Helper()
	base := *flagBase
	workers := *flagWorkers
	if workers <= 0 {
		workers = 4 * runtime.GOMAXPROCS(0)
	}
	b := &batch{byBreak: map[sim.Break]*breakStats{}, byPath: map[string]int{}}
	var next atomic.Int64
	var mu sync.Mutex
	start := time.Now()
	t.Run("workers", func(t *testing.T) {
		for wk := 0; wk < workers; wk++ {
			t.Run(fmt.Sprintf("w%d", wk), func(t *testing.T) {
				t.Parallel()
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					seed := base + uint64(i)
					res := runOne(t, sim.Generate(seed, p), false)
					rep := res.Report
					mu.Lock()
					b.add(res)
					if isFailure(res) {
						b.failed = append(b.failed, res)
					}
					_ = rep
					mu.Unlock()
				}
			})
		}
	})
	b.elapsed = time.Since(start)
	sort.Slice(b.failed, func(i, j int) bool { return b.failed[i].Schedule.Seed < b.failed[j].Schedule.Seed })
	return b
}

func (b *batch) add(res *sim.Result) {
	r := res.Report
	b.schedules++
	b.violations += res.Violations()
	b.overlaps += len(r.Overlaps)
	for _, o := range r.Overlaps {
		if o.Kind == "lease" {
			b.leaseOverlaps++
		}
	}
	b.stale += len(r.StaleAccepted)
	b.unfencedStale += len(r.UnfencedStale)
	b.tokenOrder += len(r.TokenOrder)
	b.refusedValid += len(r.RefusedValid)
	b.lateWrites += len(r.LateWrites)
	b.grants += r.Grants
	b.writes += r.Writes
	b.anomalies += len(res.Anomalies)
	b.commands += res.Commands
	b.virtual += res.Virtual
	b.restarts += res.Restarts
	b.wipes += res.Wipes
	b.quarantined += res.Quarantined
	if res.Schedule.Fair {
		b.fair++
	}
	for _, g := range res.History.Grants() {
		b.byPath[g.Path]++
	}
	if len(r.Overlaps) > 0 {
		b.withOverlap++
	}
	bs := b.byBreak[res.Schedule.Break]
	if bs == nil {
		bs = &breakStats{}
		b.byBreak[res.Schedule.Break] = bs
	}
	bs.schedules++
	bs.overlaps += len(r.Overlaps)
	bs.stale += len(r.StaleAccepted)
	if len(r.Overlaps) > 0 {
		bs.withOverlap++
	}
}

func (b *batch) log(t *testing.T) {
	t.Helper()
	t.Logf("%d schedules in %v: %d grants, %d writes; overlaps %d (lease %d) in %d schedules; stale accepted %d; "+
		"stale that an unfenced resource would take %d; token order %d; refused valid writes %d; late writes %d; anomalies %d",
		b.schedules, b.elapsed.Round(time.Millisecond), b.grants, b.writes, b.overlaps, b.leaseOverlaps, b.withOverlap,
		b.stale, b.unfencedStale, b.tokenOrder, b.refusedValid, b.lateWrites, b.anomalies)
	t.Logf("  %d commands run by the nodes (%.1f per schedule), %v of virtual time (%v per schedule)",
		b.commands, float64(b.commands)/float64(b.schedules), b.virtual.Round(time.Millisecond), (b.virtual / time.Duration(b.schedules)).Round(time.Millisecond))
	var keys []string
	for k := range b.byBreak {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		bs := b.byBreak[sim.Break(k)]
		name := k
		if name == "" {
			name = "none"
		}
		t.Logf("  break %-12s schedules %5d, with overlap %5d, overlaps %5d, stale accepted %d", name, bs.schedules, bs.withOverlap, bs.overlaps, bs.stale)
	}
}

// replayCommand is the one-line command that replays seed in test (a -run
// pattern, e.g. "^TestSimHeld$").
func replayCommand(run string, seed uint64) string {
	return fmt.Sprintf("go -C sim test . -run '%s' -sim.seed=%d -v", run, seed)
}

// report prints a schedule's seed, summary, findings, full timeline (replayed
// with every message recorded: the run is deterministic) and the replay
// command.
func report(t *testing.T, run string, res *sim.Result) {
	t.Helper()
	full := runOne(t, res.Schedule, true)
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", res.Schedule.Seed, full.Report.Summary())
	b.WriteString(res.Schedule.String())
	b.WriteString(full.Report.Details())
	for _, a := range full.Anomalies {
		fmt.Fprintf(&b, "ANOMALY: %s\n", a)
	}
	b.WriteString("timeline:\n")
	b.WriteString(full.History.Timeline())
	fmt.Fprintf(&b, "replay: %s\n", replayCommand(run, res.Schedule.Seed))
	t.Log(b.String())
}

// replay runs the one seed given with -sim.seed and prints everything.
func replay(t *testing.T, run string, p sim.Profile) *sim.Result {
	t.Helper()
	s := sim.Generate(*flagSeed, p)
	res := runOne(t, s, true)
	report(t, run, res)
	return res
}

// Profiles of the two headline tests.
var (
	heldProfile = sim.Profile{
		Name: "held", Faults: sim.AllFaults,
		Nodes: []int{3, 3, 3, 5}, Clients: []int{2, 2, 2, 3},
	}
	brokenProfile = sim.Profile{
		Name: "broken", Faults: sim.AllFaults,
		Breaks: []sim.Break{sim.BreakRate, sim.BreakStep, sim.BreakPause, sim.BreakRestart, sim.BreakEvict},
		Nodes:  []int{3, 3, 3, 5}, Clients: []int{2, 2, 2, 3},
	}
)

// TestSimHeld runs random schedules within every bound of docs/safety.md
// (P1–P9) and docs/fencing.md (F1, F2): message delays, late replies, loss and
// partitions; node clocks drifting within the drift factor and stepping
// backward any amount and forward within the margin; crashes restarted with
// their data, or empty after TTL + drift allowance; client pauses anywhere,
// but shorter than the validity left after the check. Nothing may break: no
// overlap, no stale write accepted, fencing tokens in grant order, every write
// inside its validity accepted.
func TestSimHeld(t *testing.T) {
	if *flagSeed != 0 {
		if res := replay(t, "^TestSimHeld$", heldProfile); res.Violations() > 0 {
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
			n = 3000 // the README's test command; go -C sim test . runs 10 000
		default:
			n = 10000
		}
	}
	b := runMany(t, heldProfile, n, func(r *sim.Result) bool { return r.Violations() > 0 })
	b.log(t)
	resultLine(fmt.Sprintf("sim schedules=%d preconditions=held violations=%d duration_ms=%d", b.schedules, b.violations, b.elapsed.Milliseconds()))
	for i, res := range b.failed {
		if i == 3 {
			t.Logf("... and %d more failing seeds", len(b.failed)-3)
			break
		}
		report(t, "^TestSimHeld$", res)
	}
	if b.violations > 0 {
		t.Errorf("%d violations in %d schedules within the preconditions", b.violations, b.schedules)
	}
}

// TestSimHeldBreaker runs held schedules with the clients' node circuit
// breakers on: failing fast on a node that timed out, and deferring cleanup
// releases until it answers a probe, keep the lock safe.
func TestSimHeldBreaker(t *testing.T) {
	p := heldProfile
	p.Name, p.Breaker = "held-breaker", true
	if *flagSeed != 0 {
		if res := replay(t, "^TestSimHeldBreaker$", p); res.Violations() > 0 {
			t.Errorf("seed %d: %d violations", *flagSeed, res.Violations())
		}
		return
	}
	n := *flagSchedules
	if n <= 0 {
		n = 500
		if testing.Short() || raceEnabled {
			n = 200
		}
	}
	b := runMany(t, p, n, func(r *sim.Result) bool { return r.Violations() > 0 })
	b.log(t)
	resultLine(fmt.Sprintf("sim schedules=%d preconditions=held breakers=on violations=%d duration_ms=%d", b.schedules, b.violations, b.elapsed.Milliseconds()))
	for i, res := range b.failed {
		if i == 3 {
			break
		}
		report(t, "^TestSimHeldBreaker$", res)
	}
	if b.violations > 0 {
		t.Errorf("%d violations in %d schedules within the preconditions, breakers on", b.violations, b.schedules)
	}
}

// TestSimHeldSensitivity shows that TestSimHeld can fail: the same held
// schedules, but the clients assume a drift factor ten times too small
// (0.001 instead of the 0.01 the node clocks stay within). The lock then
// trusts keys longer than the nodes keep them, and the prober (which aims at
// the moment a majority lets a grant's key go) must find overlaps.
func TestSimHeldSensitivity(t *testing.T) {
	p := heldProfile
	p.Name, p.ClientDriftFactor = "held-mutant", 0.001
	if *flagSeed != 0 {
		replay(t, "^TestSimHeldSensitivity$", p)
		return
	}
	n := 500
	if testing.Short() {
		n = 200
	}
	b := runMany(t, p, n, func(r *sim.Result) bool { return len(r.Report.Overlaps) > 0 })
	b.log(t)
	var seeds []uint64
	for _, r := range b.failed {
		seeds = append(seeds, r.Schedule.Seed)
	}
	t.Logf("seeds with an overlap: %v; the first, as a failing held schedule would print it:", seeds)
	if len(b.failed) > 0 {
		report(t, "^TestSimHeldSensitivity$", b.failed[0])
	}
	if b.leaseOverlaps == 0 {
		t.Errorf("no overlap in %d schedules with an underestimated drift: the held test would miss this bug", b.schedules)
	}
}

// TestSimBroken runs random schedules that each break one precondition of
// docs/safety.md beyond its bound: a node clock running 10–100 % fast (P1); a
// node holding a granted key stepping its clock forward by TTL to TTL + 500ms
// (P2, far more than the 12ms drift allowance); a holder pausing past its
// validity between the check and the write (P3); a node holding a granted key
// restarting empty at once (P5); a node evicting a held key (P6). Overlaps
// must be found, for every kind of break. Fencing must still accept no stale
// write and order every pair of tokens: no counter is lost beyond what
// docs/fencing.md tolerates (one wiped node at a time, and only while the
// other nodes that have a counter are a majority, so that the wipe is
// detected).
func TestSimBroken(t *testing.T) {
	if *flagSeed != 0 {
		replay(t, "^TestSimBroken$", brokenProfile)
		return
	}
	n := *flagSchedules
	if n <= 0 {
		n = 600
		if testing.Short() {
			n = 200
		}
	}
	b := runMany(t, brokenProfile, n, func(r *sim.Result) bool {
		return len(r.Report.StaleAccepted) > 0 || len(r.Report.TokenOrder) > 0 || len(r.Anomalies) > 0
	})
	b.log(t)
	resultLine(fmt.Sprintf("sim schedules=%d preconditions=broken overlaps_found=%d stale_accepted=%d duration_ms=%d", b.schedules, b.overlaps, b.stale, b.elapsed.Milliseconds()))
	for i, res := range b.failed {
		if i == 3 {
			t.Logf("... and %d more failing seeds", len(b.failed)-3)
			break
		}
		report(t, "^TestSimBroken$", res)
	}
	if b.overlaps == 0 {
		t.Errorf("no overlap found in %d schedules beyond the bounds", b.schedules)
	}
	for br, bs := range b.byBreak {
		if bs.withOverlap == 0 {
			t.Errorf("break %s: no overlap in %d schedules", br, bs.schedules)
		}
	}
	if b.stale > 0 || b.tokenOrder > 0 {
		t.Errorf("fencing accepted %d stale writes and misordered %d token pairs", b.stale, b.tokenOrder)
	}
}

// reportEnv names an environment variable: when set to a file name, the sim lines
// are also appended to it (go test shows a passing package's output only with -v;
// CI collects the lines from the file).
const reportEnv = "REDLOCK_SIM_REPORT"

// resultLine prints a result line, and appends it to $REDLOCK_SIM_REPORT if set.
func resultLine(line string) {
	fmt.Println(line)
	if path := os.Getenv(reportEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}
