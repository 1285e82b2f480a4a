package bench_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/bench"
)

func fakeReport() *bench.Report {
	rep := &bench.Report{
		Date: "Sun Nov 29 18:00:00 UTC 2026", Command: "cd bench && go run ./cmd/redlock-bench",
		Machine:  bench.Machine{CPUs: 2, CPUModel: "AMD EPYC", OS: "linux/amd64", GoVersion: "go1.26.8", RedisVersion: "7.0.15"},
		Settings: []string{"setting <with> & specials"},
	}
	add := func(sc, lib string, n int, p50 time.Duration, ops, fair, allocs float64) {
		rep.Results = append(rep.Results, bench.Result{Scenario: sc, Lib: lib, N: n, Ops: 100, Samples: 100,
			P50: p50, P99: 2 * p50, OpsPerSec: ops, Fairness: fair, AllocsPerOp: allocs, BytesPerOp: allocs * 50})
	}
	nan := math.NaN()
	for _, n := range []int{1, 3, 5} {
		f := time.Duration(n)
		add(bench.ScenarioSequential, bench.LibRedlock, n, 100*time.Microsecond*f, 5000, nan, 80)
		add(bench.ScenarioSequential, bench.LibRedsync, n, 110*time.Microsecond*f, 4000, nan, 40)
		add(bench.ScenarioThroughput, bench.LibRedlock, n, time.Millisecond*f, 30000/float64(n), nan, nan)
		add(bench.ScenarioThroughput, bench.LibRedsync, n, time.Millisecond*f, 20000/float64(n), nan, nan)
		add(bench.ScenarioContended, bench.LibRedlock, n, time.Millisecond, 400, 0.4, nan)
		add(bench.ScenarioContended, bench.LibRedsync, n, 20*time.Millisecond, 40, 0.7, nan)
	}
	add(bench.ScenarioSequential, bench.LibRedislock, 1, 150*time.Microsecond, 4000, nan, 34)
	add(bench.ScenarioPaused, bench.LibRedlock, 5, 600*time.Microsecond, 1500, nan, 300)
	add(bench.ScenarioPaused, bench.LibRedsync, 5, 2*time.Second, 0.5, nan, 200)
	add(bench.ScenarioKilled, bench.LibRedlock, 5, 550*time.Microsecond, 1500, nan, 300)
	return rep
}

// TestClientTargets checks issue 14's targets on separate-clients results.
func TestClientTargets(t *testing.T) {
	rep := &bench.Report{}
	add := func(scenario, lib string, n int, opsPerSec, cmds, fair float64, p50 time.Duration) {
		rep.Results = append(rep.Results, bench.Result{Scenario: scenario, Lib: lib, N: n, Ops: 100, Samples: 99,
			OpsPerSec: opsPerSec, CmdsPerOp: cmds, ReqsPerOp: cmds / 2, Fairness: fair, P50: p50})
	}
	for _, n := range []int{1, 3, 5} {
		add(bench.ScenarioClients, bench.LibRedlock, n, 3000, float64(2*n), 0.9, 800*time.Microsecond)
		add(bench.ScenarioClients, bench.LibRedsync, n, 1000, float64(4*n), 0.5, 2*time.Millisecond)
		add(bench.ScenarioClients, bench.LibRedlockFair, n, 2000, float64(3*n), 0.97, time.Millisecond)
	}
	add(bench.ScenarioClientsHealthy, bench.LibRedlock, 3, 1000, 6, 0.9, time.Millisecond)
	add(bench.ScenarioClientsPaused, bench.LibRedlock, 3, 600, 6, 0.9, time.Millisecond)
	got := rep.Targets()[5:]
	if len(got) != 25 {
		t.Fatalf("%d client targets, want 25", len(got))
	}
	for i, tg := range got {
		want := i != len(got)-1 // all met but the paused one (0.6×)
		if !tg.Known || tg.Met != want {
			t.Errorf("target %q: known=%v met=%v (%s), want met=%v", tg.Name, tg.Known, tg.Met, tg.Measured, want)
		}
	}
}

func TestTargets(t *testing.T) {
	got := fakeReport().Targets()
	want := []bool{true, true, true, false, true} // N=1, 3, 5 latency; N=5 throughput 1.5×; paused 1.2×
	if len(got) != len(want)+25 {
		t.Fatalf("%d targets, want %d", len(got), len(want)+25)
	}
	for _, tg := range got[len(want):] {
		if tg.Known { // the fake report has no separate-clients results
			t.Errorf("target %q known without results: %+v", tg.Name, tg)
		}
	}
	for i, tg := range got[:len(want)] {
		if !tg.Known || tg.Met != want[i] {
			t.Errorf("target %q: known=%v met=%v (%s), want met=%v", tg.Name, tg.Known, tg.Met, tg.Measured, want[i])
		}
	}
	// A healthy reference run, when there is one, is what the paused run is
	// compared with.
	rep := fakeReport()
	rep.Results = append(rep.Results, bench.Result{Scenario: bench.ScenarioHealthyRef, Lib: bench.LibRedlock, N: 5,
		Ops: 10, P50: 300 * time.Microsecond})
	if tg := rep.Targets()[4]; !tg.Known || tg.Met || !strings.Contains(tg.Measured, "2.00×") {
		t.Errorf("paused target against the reference: %+v", tg)
	}
	if tg := (&bench.Report{}).Targets()[0]; tg.Known {
		t.Errorf("target on an empty report is known: %+v", tg)
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := bench.WriteMarkdown(&b, fakeReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"Sun Nov 29 18:00:00 UTC 2026", "cd bench && go run ./cmd/redlock-bench", "AMD EPYC", "7.0.15",
		"| sequential | **redlock** | 5 | 0.500 | 1.000 | 5.00k | – | 80 |",
		"| metric | ÷ go-redsync N=1 |",
		"| throughput with 32 goroutines ≥ 2× go-redsync, N=5 | 6.00k vs 4.00k ops/s (1.50×) | **no** |",
		"ops/s 1.50×", "benchmarks.svg",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := bench.WriteSVG(&b, fakeReport()); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML with an svg root and one bar per (library, N) measured.
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var root string
	rects := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "rect" {
				rects++
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	// 1 background + 3 legend + bars: 7 sequential, 6 throughput, 6 contended,
	// 5 at N=5 healthy/paused/killed (go-redsync killed is missing).
	if want := 1 + 3 + 7 + 6 + 6 + 5; rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
}

// TestKeepNotes: the notes written by hand in the previous file follow the
// generated report; without a complete block, the report is written as it is.
func TestKeepNotes(t *testing.T) {
	notes := bench.NotesBegin + "\n## Notes\n\nBy hand.\n" + bench.NotesEnd
	old := []byte("# Benchmarks\n\nold tables\n\n" + notes + "\n\ntrailing text\n")
	got := string(bench.KeepNotes(old, []byte("# Benchmarks\n\nnew tables\n")))
	if want := "# Benchmarks\n\nnew tables\n\n" + notes + "\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, old := range []string{"", "# Benchmarks\n", bench.NotesBegin + "\nno end\n"} {
		if got := string(bench.KeepNotes([]byte(old), []byte("new\n"))); got != "new\n" {
			t.Errorf("old %q: got %q, want the generated text alone", old, got)
		}
	}
}

// fakeBeyond is a "Beyond a mutex" section with round figures: hand-overs
// twice the plain lock's, the counting design at 0.8× the slots' rate, the
// slots at 1.5× the baseline's at N=1, RLock and WLock at 1.5× Lock's cost.
func fakeBeyond() *bench.Beyond {
	b := &bench.Beyond{ElectionCandidates: 4, ElectionDuration: 1500 * time.Millisecond, Rounds: 5,
		SemRun:   bench.SemaphoreRun{Duration: time.Second, Hold: time.Millisecond, PerPermit: 2, Clients: 1},
		RWWarmup: 250, RWIters: 600}
	nan := math.NaN()
	for _, n := range []int{1, 3, 5} {
		f := time.Duration(n)
		b.Election = append(b.Election, bench.Result{Scenario: bench.ScenarioElection, Lib: bench.LibRedlock, N: n, Ops: 100, Samples: 99,
			P50: 2 * time.Millisecond * f, P99: 4 * time.Millisecond * f, OpsPerSec: 500, Fairness: 0.9, ReqsPerOp: 5, CmdsPerOp: float64(40 * n), AllocsPerOp: nan})
		b.ElectionRef = append(b.ElectionRef, bench.Result{Scenario: bench.ScenarioElectionRef, Lib: bench.LibRedlock, N: n, Ops: 200, Samples: 199,
			P50: time.Millisecond * f, P99: 2 * time.Millisecond * f, OpsPerSec: 1000, Fairness: 0.9, ReqsPerOp: 2, CmdsPerOp: float64(10 * n), AllocsPerOp: nan})
		for i, kind := range bench.RWKinds {
			cost := 1.0
			if i > 0 {
				cost = 1.5
			}
			b.RW = append(b.RW, bench.Result{Scenario: kind, Lib: bench.LibRedlock, N: n, Ops: 600, Samples: 600,
				P50: time.Duration(cost * float64(200*time.Microsecond*f)), P99: time.Millisecond, OpsPerSec: 3000,
				Fairness: nan, ReqsPerOp: float64(2 * n), CmdsPerOp: cost * float64(10*n), AllocsPerOp: 50})
		}
	}
	for _, c := range bench.SemaphoreCells([]int{2, 8, 64}, []int{1, 3, 5, 7}) {
		r := bench.SemaphoreResult{Design: c.Design, N: c.N, Permits: c.Permits, Q: c.Q(), Tolerance: c.Tolerance(), NotRun: !c.Runs()}
		if c.Runs() {
			r.Goroutines, r.Acquisitions, r.AcqPerSec = 2*c.Permits, 1000, 1000
			r.P50Wait, r.P99Wait, r.MostHolders = time.Millisecond, 10*time.Millisecond, c.Permits
			r.ClientCPU, r.ServerCPU = 100*time.Millisecond, 50*time.Millisecond
			switch {
			case c.Design == bench.DesignCounting && c.N == 1:
				r.AcqPerSec = 1000 / 1.5
			case c.Design == bench.DesignCounting:
				r.AcqPerSec = 800
			}
		}
		b.Semaphore = append(b.Semaphore, r)
	}
	return b
}

// markdownTables returns the tables of md under the heading section (up to
// the next heading of its level or above), each as its rows of cells, the
// header first and the alignment row left out.
func markdownTables(md, section string) [][][]string {
	i := strings.Index(md, section)
	if i < 0 {
		return nil
	}
	var tables [][][]string
	var cur [][]string
	level := strings.Count(strings.Fields(section)[0], "#")
	for _, line := range strings.Split(md[i:], "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 && strings.Trim(f[0], "#") == "" && len(f[0]) <= level {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if cur != nil {
				tables, cur = append(tables, cur), nil
			}
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if strings.Trim(strings.Join(cells, ""), "-:") == "" { // the alignment row
			continue
		}
		cur = append(cur, cells)
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	return tables
}

// TestWriteBeyond: the section "Beyond a mutex" follows the results, with
// its four tables (election, semaphore at N > 1, semaphore against the
// baseline at N=1, read-write lock), every row as wide as its header, and
// the ratios computed against the right rows.
func TestWriteBeyond(t *testing.T) {
	var b bytes.Buffer
	rep := fakeReport()
	if err := bench.WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Beyond a mutex") {
		t.Error("a report without the section has it")
	}
	b.Reset()
	rep.Beyond = fakeBeyond()
	if err := bench.WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	const heading = "## Beyond a mutex (issue 27)"
	if i, j, k := strings.Index(md, "benchmarks.svg)"), strings.Index(md, heading), strings.Index(md, "## How it is measured"); i < 0 || j < i || k < j {
		t.Fatalf("the section is not between the results and the settings (at %d, %d, %d):\n%s", i, j, k, md)
	}
	for _, want := range []string{
		"### Leader election: hand-over (4 candidates, 1.5s per N and scenario in 5 rounds)",
		"### Semaphore: acquisitions/s and fault tolerance (1s per cell)", "on one client",
		"### Read-write lock: uncontended acquire+release (600 measured pairs per kind and N in 5 rounds)",
		"250 unmeasured then 600 measured",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
	tables := markdownTables(md, heading)
	if len(tables) != 4 {
		t.Fatalf("%d tables in the section, want 4:\n%s", len(tables), md)
	}
	for i, want := range []struct {
		rows    int // besides the header
		headers []string
	}{
		{3, []string{"N", "hand-over p50", "p99", "elections/s", "fairness min/max", "sent/op", "cmds/op", "lock hand-over p50 (ref)", "÷ ref p50", "ref cmds/op", "÷ ref cmds/op", "samples", "errors"}},
		{18, []string{"permits n", "N", "design", "q", "tolerates", "goroutines", "acquisitions/s", "÷ slots (b)", "wait p50", "wait p99", "most holders", "CPU µs/acq client + servers", "errors"}},
		{3, []string{"permits n", "goroutines", "slots (b) acq/s", "baseline acq/s", "slots ÷ baseline", "wait p50 slots / baseline", "wait p99 slots / baseline", "CPU µs/acq slots", "CPU µs/acq baseline", "errors slots / baseline"}},
		{9, []string{"N", "lock", "p50", "p99", "÷ Lock p50", "sent/op", "cmds/op", "÷ Lock cmds/op", "allocs/op", "samples", "errors"}},
	} {
		tb := tables[i]
		if got := strings.Join(tb[0], " | "); got != strings.Join(want.headers, " | ") {
			t.Errorf("table %d: header %q, want %q", i, got, strings.Join(want.headers, " | "))
		}
		if len(tb)-1 != want.rows {
			t.Errorf("table %d: %d rows, want %d", i, len(tb)-1, want.rows)
		}
		for _, row := range tb[1:] {
			if len(row) != len(tb[0]) {
				t.Errorf("table %d: row %q has %d cells, the header %d", i, row, len(row), len(tb[0]))
			}
		}
	}
	col := func(tb [][]string, name string) int {
		return slices.Index(tb[0], name)
	}
	// Election: every N, twice the reference's p50 and 4× its commands.
	el := tables[0]
	for i, row := range el[1:] {
		if row[0] != []string{"1", "3", "5"}[i] || row[col(el, "÷ ref p50")] != "2.00×" || row[col(el, "÷ ref cmds/op")] != "4.00×" {
			t.Errorf("election row %q: want N=1, 3, 5 in turn, ÷ ref p50 2.00× and cmds/op 4.00×", row)
		}
	}
	// Semaphore at N > 1: the counting design runs where it tolerates a
	// failed node (n=2 at N=5 and 7) at 0.8× the slots; elsewhere not.
	sem := tables[1]
	ran, notRun := 0, 0
	for _, row := range sem[1:] {
		n, N, design, vs := row[0], row[1], row[2], row[col(sem, "÷ slots (b)")]
		switch {
		case design == bench.DesignSlots:
			if vs != "ref" || row[col(sem, "acquisitions/s")] != "1.00k" || row[col(sem, "CPU µs/acq client + servers")] != "100 + 50" {
				t.Errorf("slots row %q", row)
			}
		case n == "2" && (N == "5" || N == "7"):
			ran++
			if vs != "0.80×" || row[col(sem, "tolerates")] == "0" {
				t.Errorf("counting row %q: want 0.80× the slots and some tolerance", row)
			}
		default:
			notRun++
			if row[col(sem, "acquisitions/s")] != "not run: tolerates no failed node" || row[col(sem, "tolerates")] != "0" {
				t.Errorf("counting row %q: want not run, tolerating 0", row)
			}
		}
		if N == "1" {
			t.Errorf("row at N=1 in the N > 1 table: %q", row)
		}
	}
	if ran != 2 || notRun != 7 {
		t.Errorf("%d counting rows run, %d not, want 2 and 7", ran, notRun)
	}
	// At N=1: the slots at 1.5× the baseline.
	base := tables[2]
	for i, row := range base[1:] {
		if row[0] != []string{"2", "8", "64"}[i] || row[col(base, "slots ÷ baseline")] != "1.50×" || row[col(base, "baseline acq/s")] != "667" {
			t.Errorf("baseline row %q: want n=2, 8, 64 in turn, 667 acq/s, slots ÷ baseline 1.50×", row)
		}
	}
	// Read-write lock: Lock is the reference at every N.
	rw := tables[3]
	for _, row := range rw[1:] {
		want := "1.50×"
		if row[1] == "`Lock`" {
			want = "ref"
		}
		if row[col(rw, "÷ Lock p50")] != want || row[col(rw, "÷ Lock cmds/op")] != want {
			t.Errorf("read-write lock row %q: want %s", row, want)
		}
	}
}

// TestBeyondNotes: the section's errors reach the report's notes.
func TestBeyondNotes(t *testing.T) {
	b := fakeBeyond()
	if notes := b.Notes(); len(notes) != 0 {
		t.Errorf("notes without errors: %q", notes)
	}
	b.Election[1].Errors, b.Election[1].FirstErr = 2, errors.New("boom")
	b.Semaphore[0].Errors, b.Semaphore[0].FirstErr = 1, errors.New("bang")
	notes := b.Notes()
	if len(notes) != 2 || !strings.Contains(notes[0], "election hand-over, N=3: 2 errors, first: boom") ||
		!strings.Contains(notes[1], "semaphore slots (b), n=2, N=1: 1 errors, first: bang") {
		t.Errorf("notes %q", notes)
	}
}
