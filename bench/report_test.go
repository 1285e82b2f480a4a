package bench_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
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
