package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Goal is one row of issue 26's goals ("the cheapest correct Redlock in Go"),
// evaluated on a report: a figure of this library beside go-redsync's at one
// N, their ratio, and the goal.
type Goal struct {
	Figure string
	N      int
	// Redlock and Redsync are the two figures as written in the table;
	// Redsync is "–" where the goal does not compare with go-redsync.
	Redlock, Redsync string
	// Ratio is Redlock ÷ Redsync, or ÷ this library's own reference where
	// the goal says so ("–" when unknown).
	Ratio string
	Goal  string
	Met   bool
	Known bool // false when a result it needs is missing
}

// Goals evaluates issue 26's goals on the report, at N=1, 3 and 5: the
// sequential Lock+Release p50 ≤ 0.9× go-redsync's; allocations per
// Lock+Release ≤ 1×; 32 goroutines on their own keys ≥ 1.2× (N=1) and 2×
// (N=3, 5) go-redsync's ops/s; separate clients on one key ≥ 1× go-redsync's
// acquisitions/s with fairness ≥ 0.8 (default mode) and ≥ 0.95 (fair mode);
// the hand-over to another client within this library's own sequential p50;
// server commands per uncontended Lock+Release ≤ 1.25× go-redsync's, and per
// contended acquisition ≤ 8 per node (default mode) and ≤ 12 (fair mode).
func (rep *Report) Goals() []Goal {
	var out []Goal
	for _, n := range []int{1, 3, 5} {
		seq, seqOK := rep.Find(ScenarioSequential, LibRedlock, n)
		peerSeq, peerSeqOK := rep.Find(ScenarioSequential, LibRedsync, n)
		both := seqOK && peerSeqOK
		out = append(out, compare("sequential Lock+Release p50 (ms)", n, both && seq.Samples > 0 && peerSeq.Samples > 0,
			float64(seq.P50), float64(peerSeq.P50), msFloat, 0.9, true))
		out = append(out, compare("allocations per Lock+Release", n, both,
			seq.AllocsPerOp, peerSeq.AllocsPerOp, oneDecimal, 1, true))
		out = append(out, compare("server commands per uncontended Lock+Release", n, both,
			seq.CmdsPerOp, peerSeq.CmdsPerOp, oneDecimal, 1.25, true))
		par, ok1 := rep.Find(ScenarioThroughput, LibRedlock, n)
		peerPar, ok2 := rep.Find(ScenarioThroughput, LibRedsync, n)
		least := 2.0
		if n == 1 {
			least = 1.2
		}
		out = append(out, compare("32 goroutines, own keys: ops/s", n, ok1 && ok2, par.OpsPerSec, peerPar.OpsPerSec, opsS, least, false))

		peerCl, peerClOK := rep.Find(ScenarioClients, LibRedsync, n)
		for _, m := range []struct {
			lib, label string
			fairness   float64
			perNode    float64
		}{{LibRedlock, "", 0.8, 8}, {LibRedlockFair, ", fair mode", 0.95, 12}} {
			cl, ok := rep.Find(ScenarioClients, m.lib, n)
			out = append(out, compare("separate clients, one key: acquisitions/s"+m.label, n, ok && peerClOK,
				cl.OpsPerSec, peerCl.OpsPerSec, opsS, 1, false))
			g := Goal{Figure: "separate clients: fairness (fewest/most grants)" + m.label, N: n,
				Redlock: num(cl.Fairness, "%.2f"), Redsync: num(peerCl.Fairness, "%.2f"), Ratio: "–",
				Goal: fmt.Sprintf("≥ %.2g", m.fairness)}
			if ok && !math.IsNaN(cl.Fairness) {
				g.Known, g.Met = true, cl.Fairness >= m.fairness
			}
			out = append(out, g)
			g = Goal{Figure: "server commands per contended acquisition, per node" + m.label, N: n, Ratio: "–",
				Redsync: "–", Goal: fmt.Sprintf("≤ %.0f", m.perNode)}
			if ok && !math.IsNaN(cl.CmdsPerOp) {
				per := cl.CmdsPerOp / float64(n)
				g.Redlock, g.Known, g.Met = oneDecimal(per), true, per <= m.perNode
				if peerClOK && !math.IsNaN(peerCl.CmdsPerOp) {
					g.Redsync = oneDecimal(peerCl.CmdsPerOp / float64(n))
				}
			} else {
				g.Redlock = "–"
			}
			out = append(out, g)
		}
		cl, ok := rep.Find(ScenarioClients, LibRedlock, n)
		g := Goal{Figure: "release → another client acquires, p50 (ms), ÷ own sequential p50", N: n,
			Redlock: "–", Redsync: "–", Ratio: "–", Goal: "≤ 1×"}
		if ok && seqOK && cl.Samples > 0 && seq.Samples > 0 && seq.P50 > 0 {
			r := float64(cl.P50) / float64(seq.P50)
			g.Redlock, g.Ratio, g.Known, g.Met = ms(cl.P50)+" (own seq "+ms(seq.P50)+")", ratio(float64(cl.P50), float64(seq.P50)), true, r <= 1
			if peerClOK && peerCl.Samples > 0 {
				g.Redsync = ms(peerCl.P50)
			}
		}
		out = append(out, g)
	}
	return out
}

// compare is a goal on the ratio of two figures: at most bound when lower is
// better, at least bound otherwise.
func compare(figure string, n int, known bool, a, b float64, format func(float64) string, bound float64, lower bool) Goal {
	g := Goal{Figure: figure, N: n, Redlock: "–", Redsync: "–", Ratio: "–"}
	if lower {
		g.Goal = fmt.Sprintf("≤ %g×", bound)
	} else {
		g.Goal = fmt.Sprintf("≥ %g×", bound)
	}
	if !known || math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return g
	}
	g.Redlock, g.Redsync, g.Ratio = format(a), format(b), ratio(a, b)
	r := a / b
	g.Known = true
	if lower {
		g.Met = r <= bound
	} else {
		g.Met = r >= bound
	}
	return g
}

func msFloat(v float64) string { return ms(time.Duration(v)) }

func oneDecimal(v float64) string { return fmt.Sprintf("%.1f", v) }

// writeGoals writes the goals table.
func writeGoals(b *strings.Builder, rep *Report) {
	fmt.Fprintf(b, "## Goals (issue 26)\n\n")
	fmt.Fprintf(b, "The cheapest correct Redlock in Go: this library (default mode unless the row says fair mode) beside go-redsync at the same N, from this run's results below. ")
	fmt.Fprintf(b, "The ratio is this library ÷ go-redsync, except in the hand-over row (÷ this library's own sequential p50).\n\n")
	fmt.Fprintf(b, "| figure | N | this library | go-redsync | ratio | goal | met |\n|---|--:|--:|--:|--:|--:|---|\n")
	for _, g := range rep.Goals() {
		met := "n/a"
		if g.Known {
			met = map[bool]string{true: "yes", false: "**no**"}[g.Met]
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", g.Figure, g.N, g.Redlock, g.Redsync, g.Ratio, g.Goal, met)
	}
	b.WriteString("\n")
}

// Markers around the table that redlock-bench writes into the README
// (SpliceReadme); the lines between them are replaced by every run.
const (
	ReadmeBegin = "<!-- bench table: written by redlock-bench from the run of docs/benchmarks.md -->"
	ReadmeEnd   = "<!-- end of bench table -->"
)

// WriteReadmeTable writes the README's small table: per N, this library's
// figure with go-redsync's in brackets, for the sequential p50, 32
// goroutines' ops/s, allocations per Lock+Release and the separate clients'
// acquisitions/s and fairness.
func WriteReadmeTable(b *strings.Builder, rep *Report) {
	ns := []int{1, 3, 5}
	fmt.Fprintf(b, "| (go-redsync in brackets) | N=1 | N=3 | N=5 |\n|---|--:|--:|--:|\n")
	row := func(name, scenario string, cell func(Result) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, n := range ns {
			a, ok1 := rep.Find(scenario, LibRedlock, n)
			c, ok2 := rep.Find(scenario, LibRedsync, n)
			switch {
			case ok1 && ok2:
				fmt.Fprintf(b, " %s (%s) |", cell(a), cell(c))
			case ok1:
				fmt.Fprintf(b, " %s |", cell(a))
			default:
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	row("Lock+Release p50, ms", ScenarioSequential, func(r Result) string { return ms(r.P50) })
	row("allocations per Lock+Release", ScenarioSequential, func(r Result) string { return num(r.AllocsPerOp, "%.0f") })
	row("32 goroutines, own keys, ops/s", ScenarioThroughput, func(r Result) string { return opsS(r.OpsPerSec) })
	row("separate clients on one key: acquisitions/s", ScenarioClients, func(r Result) string { return opsS(r.OpsPerSec) })
	row("separate clients on one key: fairness", ScenarioClients, func(r Result) string { return num(r.Fairness, "%.2f") })
	row("release → another client acquires, p50 ms", ScenarioClients, func(r Result) string { return ms(r.P50) })
}

// SpliceReadme returns readme with the lines between ReadmeBegin and
// ReadmeEnd replaced by the report's table, and false when readme lacks the
// markers (it is then returned as it is).
func SpliceReadme(readme []byte, rep *Report) ([]byte, bool) {
	s := string(readme)
	i := strings.Index(s, ReadmeBegin)
	if i < 0 {
		return readme, false
	}
	j := strings.Index(s[i:], ReadmeEnd)
	if j < 0 {
		return readme, false
	}
	var b strings.Builder
	b.WriteString(s[:i+len(ReadmeBegin)])
	b.WriteString("\n")
	WriteReadmeTable(&b, rep)
	b.WriteString(s[i+j:])
	return []byte(b.String()), true
}
