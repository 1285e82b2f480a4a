package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	CPUs         int
	CPUModel     string
	OS           string
	GoVersion    string
	RedisVersion string
}

// Report is one run of every scenario, ready to be written as markdown and SVG.
type Report struct {
	// Date is the output of date(1) when the run started.
	Date string
	// Command is the command that produced the report.
	Command string
	// Load describes the machine's load average around the run (other work on
	// a shared machine skews absolute figures).
	Load string
	// Core identifies the version of this library that was measured (a commit,
	// and whether the working tree had changes).
	Core string
	// Took is the wall time of the whole run.
	Took    time.Duration
	Machine Machine
	// Settings and Notes are bullet points for the report.
	Settings []string
	Notes    []string
	Results  []Result
	// Beyond, when set, is written as the section "Beyond a mutex" (leader
	// election, semaphore, read-write lock), after the results.
	Beyond *Beyond
}

// Find returns the result of scenario for lib at n nodes.
func (rep *Report) Find(scenario, lib string, n int) (Result, bool) {
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.Lib == lib && r.N == n {
			return r, true
		}
	}
	return Result{}, false
}

// ParTolerance is how much slower than go-redsync a latency may be and still be
// "on a par" in the targets table.
const ParTolerance = 1.10

// Target is one of the targets, evaluated on a report.
type Target struct {
	Name     string
	Measured string
	Met      bool
	Known    bool // false when a result it needs is missing
}

// Targets evaluates the targets: latency on a par with go-redsync or
// better at every N, at least twice its throughput at N=5, and a paused
// minority under 1.5× the healthy latency.
func (rep *Report) Targets() []Target {
	var out []Target
	for _, n := range []int{1, 3, 5} {
		t := Target{Name: fmt.Sprintf("sequential p50 on a par (≤ %.2f×) with go-redsync or better, N=%d", ParTolerance, n)}
		a, ok1 := rep.Find(ScenarioSequential, LibRedlock, n)
		b, ok2 := rep.Find(ScenarioSequential, LibRedsync, n)
		if ok1 && ok2 && b.P50 > 0 {
			ratio := float64(a.P50) / float64(b.P50)
			t.Known, t.Met = true, ratio <= ParTolerance
			t.Measured = fmt.Sprintf("%s vs %s ms (%.2f×)", ms(a.P50), ms(b.P50), ratio)
		}
		out = append(out, t)
	}
	out = append(out, rep.rateTarget("throughput with 32 goroutines ≥ 2× go-redsync, N=5", 2, "ops/s",
		ScenarioThroughput, LibRedlock, ScenarioThroughput, LibRedsync, 5))
	t := Target{Name: "1 of 5 nodes paused: p50 < 1.5× healthy N=5"}
	a, ok1 := rep.Find(ScenarioPaused, LibRedlock, 5)
	b, ok2 := rep.Find(ScenarioHealthyRef, LibRedlock, 5)
	if !ok2 {
		b, ok2 = rep.Find(ScenarioSequential, LibRedlock, 5)
	}
	if ok1 && ok2 && b.P50 > 0 && a.Ops > 0 {
		ratio := float64(a.P50) / float64(b.P50)
		t.Known, t.Met = true, ratio < 1.5
		t.Measured = fmt.Sprintf("%s vs %s ms (%.2f×, healthy: `%s`)", ms(a.P50), ms(b.P50), ratio, b.Scenario)
	}
	out = append(out, t)
	return append(out, rep.clientTargets()...)
}

// commandMetrics are the two counts of commands per operation: what the
// clients sent, and what the servers ran.
var commandMetrics = []struct {
	name  string
	value func(Result) float64
}{
	{"commands sent", func(r Result) float64 { return r.ReqsPerOp }},
	{"server commands (script internals included)", func(r Result) float64 { return r.CmdsPerOp }},
}

// clientTargets evaluates issue 14's targets on the separate-clients
// scenarios: acquisitions/s ≥ 1.5× go-redsync at N=3 and 5, ≤ 3N commands per
// acquisition, fairness ≥ 0.8, handoff p50 ≤ 1 ms at N=5, and with 1 of 3
// nodes paused ≥ 0.7× the healthy acquisitions/s; the same for fair mode,
// where the fairness target is ≥ 0.95.
func (rep *Report) clientTargets() []Target {
	var out []Target
	for _, m := range []struct {
		lib, label string
		fairness   float64
	}{
		{LibRedlock, "separate clients", 0.8},
		{LibRedlockFair, "separate clients, fair mode", 0.95},
	} {
		out = append(out, rep.contentionTargets(m.lib, m.label, m.fairness)...)
	}
	return append(out, rep.rateTarget("separate clients, 1 of 3 nodes paused: acquisitions/s ≥ 0.7× healthy", 0.7, "acq/s",
		ScenarioClientsPaused, LibRedlock, ScenarioClientsHealthy, LibRedlock, 3))
}

// rateTarget compares the rate of libA's scenarioA with libB's scenarioB at
// N=n: the target is met when the ratio is at least least; unit names the
// rate in the measured text.
func (rep *Report) rateTarget(name string, least float64, unit, scenarioA, libA, scenarioB, libB string, n int) Target {
	t := Target{Name: name}
	a, ok1 := rep.Find(scenarioA, libA, n)
	b, ok2 := rep.Find(scenarioB, libB, n)
	if ok1 && ok2 && b.OpsPerSec > 0 {
		r := a.OpsPerSec / b.OpsPerSec
		t.Known, t.Met = true, r >= least
		t.Measured = fmt.Sprintf("%s vs %s %s (%.2f×)", opsS(a.OpsPerSec), opsS(b.OpsPerSec), unit, r)
	}
	return t
}

// contentionTargets evaluates the separate-clients targets on lib's results,
// naming them with label.
func (rep *Report) contentionTargets(lib, label string, fairness float64) []Target {
	var out []Target
	for _, n := range []int{3, 5} {
		out = append(out, rep.rateTarget(fmt.Sprintf("%s: acquisitions/s ≥ 1.5× go-redsync, N=%d", label, n), 1.5, "acq/s",
			ScenarioClients, lib, ScenarioClients, LibRedsync, n))
	}
	for _, n := range []int{1, 3, 5} {
		a, ok := rep.Find(ScenarioClients, lib, n)
		for _, m := range commandMetrics {
			t := Target{Name: fmt.Sprintf("%s: ≤ 3N %s per acquisition, N=%d", label, m.name, n)}
			if ok && !math.IsNaN(m.value(a)) {
				t.Known, t.Met = true, m.value(a) <= float64(3*n)
				t.Measured = fmt.Sprintf("%.1f (3N = %d)", m.value(a), 3*n)
				if b, ok := rep.Find(ScenarioClients, LibRedsync, n); ok && !math.IsNaN(m.value(b)) {
					t.Measured += fmt.Sprintf("; go-redsync %.1f", m.value(b))
				}
			}
			out = append(out, t)
		}
		t := Target{Name: fmt.Sprintf("%s: fairness ≥ %.2g, N=%d", label, fairness, n)}
		if ok && !math.IsNaN(a.Fairness) {
			t.Known, t.Met = true, a.Fairness >= fairness
			t.Measured = fmt.Sprintf("%.2f", a.Fairness)
		}
		out = append(out, t)
	}
	t := Target{Name: label + ": handoff p50 ≤ 1 ms, N=5"}
	if a, ok := rep.Find(ScenarioClients, lib, 5); ok && a.Samples > 0 {
		t.Known, t.Met = true, a.P50 <= time.Millisecond
		t.Measured = ms(a.P50) + " ms"
	}
	return append(out, t)
}

// ms formats a duration in milliseconds with 3 significant-ish digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// opsS formats a rate: 30.1k, 812.
func opsS(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2fk", v/1000)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	case r >= 0.01:
		return fmt.Sprintf("%.2f×", r)
	default:
		return fmt.Sprintf("%.4f×", r)
	}
}

func num(v float64, format string) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// vsRedsync describes r relative to go-redsync's result for the same scenario
// and N (N=1 for bsm/redislock).
func (rep *Report) vsRedsync(r Result) string {
	if r.Lib == LibRedsync {
		return "baseline"
	}
	b, ok := rep.Find(r.Scenario, LibRedsync, r.N)
	if !ok || b.Ops == 0 || r.Ops == 0 {
		return "–"
	}
	lat := fmt.Sprintf("p50 %s, p99 %s", ratio(float64(r.P50), float64(b.P50)), ratio(float64(r.P99), float64(b.P99)))
	switch r.Scenario {
	case ScenarioSequential:
		return lat + ", allocs " + ratio(r.AllocsPerOp, b.AllocsPerOp)
	case ScenarioThroughput:
		return "ops/s " + ratio(r.OpsPerSec, b.OpsPerSec) + ", " + lat
	case ScenarioContended, ScenarioClients:
		return "acq/s " + ratio(r.OpsPerSec, b.OpsPerSec) + ", handoff " + lat
	default:
		return lat
	}
}

var summaryMetrics = []struct {
	name     string
	scenario string
	value    func(Result) float64
}{
	{"sequential Lock+Release p50", ScenarioSequential, func(r Result) float64 { return float64(r.P50) }},
	{"sequential Lock+Release p99", ScenarioSequential, func(r Result) float64 { return float64(r.P99) }},
	{"allocations per Lock+Release", ScenarioSequential, func(r Result) float64 { return r.AllocsPerOp }},
	{"commands sent per Lock+Release", ScenarioSequential, func(r Result) float64 { return r.ReqsPerOp }},
	{"server commands per Lock+Release (script internals included)", ScenarioSequential, func(r Result) float64 { return r.CmdsPerOp }},
	{"throughput, 32 goroutines (ops/s)", ScenarioThroughput, func(r Result) float64 { return r.OpsPerSec }},
	{"CPU per Lock+Release at 32 goroutines: client", ScenarioThroughput, func(r Result) float64 { return cpuValue(r.ClientCPUPerOp) }},
	{"CPU per Lock+Release at 32 goroutines: servers", ScenarioThroughput, func(r Result) float64 { return cpuValue(r.ServerCPUPerOp) }},
	{"CPU per Lock+Release at 32 goroutines: client + servers", ScenarioThroughput, func(r Result) float64 {
		if r.ClientCPUPerOp <= 0 || r.ServerCPUPerOp <= 0 {
			return math.NaN()
		}
		return float64(r.ClientCPUPerOp + r.ServerCPUPerOp)
	}},
	{"contended handoff p50", ScenarioContended, func(r Result) float64 { return float64(r.P50) }},
	{"contended acquisitions/s", ScenarioContended, func(r Result) float64 { return r.OpsPerSec }},
	{"contended fairness (min/max share)", ScenarioContended, func(r Result) float64 { return r.Fairness }},
	{"separate clients: handoff p50", ScenarioClients, func(r Result) float64 { return float64(r.P50) }},
	{"separate clients: acquisitions/s", ScenarioClients, func(r Result) float64 { return r.OpsPerSec }},
	{"separate clients: fairness (min/max share)", ScenarioClients, func(r Result) float64 { return r.Fairness }},
	{"separate clients: commands sent per acquisition", ScenarioClients, func(r Result) float64 { return r.ReqsPerOp }},
	{"separate clients: server commands per acquisition", ScenarioClients, func(r Result) float64 { return r.CmdsPerOp }},
	{"1 of 5 paused, p50", ScenarioPaused, func(r Result) float64 { return float64(r.P50) }},
	{"1 of 5 killed, p50", ScenarioKilled, func(r Result) float64 { return float64(r.P50) }},
}

func cpuValue(d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return float64(d)
}

// cpuCell formats the CPU per operation as "client + servers" microseconds.
func cpuCell(r Result) string {
	if r.ClientCPUPerOp <= 0 && r.ServerCPUPerOp <= 0 {
		return "–"
	}
	us := func(d time.Duration) string {
		if d <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
	}
	return us(r.ClientCPUPerOp) + " + " + us(r.ServerCPUPerOp)
}

// WriteMarkdown writes the report as markdown: provenance, the targets,
// one table of every scenario × library × N, the section "Beyond a mutex"
// when the report has one (Beyond), and how each scenario is measured.
func WriteMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("This library against [go-redsync v4](https://github.com/go-redsync/redsync) (redigo pool) ")
	p("and [bsm/redislock](https://github.com/bsm/redislock) (single node), on real redis-server ")
	p("processes on loopback, all measured in one run on the same servers. ")
	p("Absolute times drift between runs on shared machines: compare libraries within this run, through the ratios.\n\n")
	p("- **Date:** %s\n", rep.Date)
	p("- **Machine:** %d CPUs (`nproc`), %s; %s; %s; redis-server %s\n",
		rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.OS, rep.Machine.GoVersion, rep.Machine.RedisVersion)
	if rep.Load != "" {
		p("- **Load:** %s\n", rep.Load)
	}
	if rep.Core != "" {
		p("- **Library measured:** %s\n", rep.Core)
	}
	p("- **Command** (run from the repository root; the whole run took %s):\n\n  ```sh\n  %s\n  ```\n\n", rep.Took.Round(time.Second), rep.Command)

	p("## Targets (issues 7 and 14)\n\n| target | measured | met |\n|---|---|---|\n")
	for _, t := range rep.Targets() {
		met := "n/a"
		if t.Known {
			met = map[bool]string{true: "yes", false: "**no**"}[t.Met]
		}
		p("| %s | %s | %s |\n", t.Name, t.Measured, met)
	}

	p("\n")
	writeGoals(&b, rep)
	p("## Ratios to the peers\n\n")
	p("redlock's figure ÷ the peer's, at the same N (bsm/redislock is single-node: N=1 only). ")
	p("Below 1 is better for latencies and allocations, above 1 for rates and fairness.\n\n")
	p("| metric | ÷ go-redsync N=1 | ÷ go-redsync N=3 | ÷ go-redsync N=5 | ÷ bsm/redislock N=1 |\n|---|--:|--:|--:|--:|\n")
	for _, m := range summaryMetrics {
		p("| %s |", m.name)
		for _, peer := range []struct {
			lib string
			n   int
		}{{LibRedsync, 1}, {LibRedsync, 3}, {LibRedsync, 5}, {LibRedislock, 1}} {
			cell := "–"
			a, ok1 := rep.Find(m.scenario, LibRedlock, peer.n)
			b, ok2 := rep.Find(m.scenario, peer.lib, peer.n)
			if ok1 && ok2 && a.Ops > 0 && b.Ops > 0 {
				cell = ratio(m.value(a), m.value(b))
			}
			p(" %s |", cell)
		}
		p("\n")
	}

	p("\n## Results\n\n")
	p("Latencies in ms. For `contended` and the separate-clients rows the latency is the handoff (a holder starts releasing → another goroutine's Lock returns), ops/s counts acquisitions, and sent/op and cmds/op are per acquisition. sent/op counts the commands the clients wrote (an EVALSHA is one); cmds/op counts what the servers processed, script internals included. ")
	p("Ratios are this row ÷ go-redsync at the same N (bsm/redislock: N=1): below 1 is better for latency and allocations, above 1 for ops/s.\n\n")
	p("| scenario | library | N | p50 | p99 | ops/s | fairness min/max | allocs/op | B/op | sent/op | cmds/op | CPU µs/op client + servers | samples | errors | vs go-redsync |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range rep.Results {
		lib := r.Lib
		if r.Lib == LibRedlock || r.Lib == LibRedlockFair {
			lib = "**" + r.Lib + "**"
		}
		samples := fmt.Sprint(r.Samples)
		if r.Capped {
			samples += " (capped)"
		}
		errs := fmt.Sprint(r.Errors)
		if r.Overlaps > 0 {
			errs += fmt.Sprintf(", %d overlaps", r.Overlaps)
		}
		p("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario, lib, r.N, ms(r.P50), ms(r.P99), opsS(r.OpsPerSec), num(r.Fairness, "%.2f"),
			num(r.AllocsPerOp, "%.0f"), num(r.BytesPerOp, "%.0f"), num(r.ReqsPerOp, "%.1f"), num(r.CmdsPerOp, "%.1f"), cpuCell(r), samples, errs, rep.vsRedsync(r))
	}
	p("\n![p50 latency and throughput per library and N](benchmarks.svg)\n")
	if rep.Beyond != nil {
		writeBeyond(p, rep.Beyond)
	}
	if len(rep.Settings) > 0 {
		p("\n## How it is measured\n\n")
		for _, s := range rep.Settings {
			p("- %s\n", s)
		}
	}
	if len(rep.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, s := range rep.Notes {
			p("- %s\n", s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Markers around the part of docs/benchmarks.md written by hand (notes on a
// run), which the command keeps when it writes the file again: KeepNotes.
const (
	NotesBegin = "<!-- notes: written by hand, kept by redlock-bench when it rewrites this file -->"
	NotesEnd   = "<!-- end of notes -->"
)

// KeepNotes returns generated with the notes of old appended: the lines from
// NotesBegin to NotesEnd, both included. It returns generated as it is when
// old has no complete notes block.
func KeepNotes(old, generated []byte) []byte {
	s := string(old)
	i := strings.Index(s, NotesBegin)
	if i < 0 {
		return generated
	}
	j := strings.Index(s[i:], NotesEnd)
	if j < 0 {
		return generated
	}
	out := strings.TrimRight(string(generated), "\n") + "\n\n" + s[i:i+j+len(NotesEnd)] + "\n"
	return []byte(out)
}
