package bench_test

import (
	"bytes"
	"encoding/xml"
	"math"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/bench"
)

// eq fails the test unless got == want.
func eq[T comparable](t *testing.T, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func scalingRun(rate, fairness, cmds float64, overlaps int) bench.Result {
	return bench.Result{OpsPerSec: rate, Fairness: fairness, CmdsPerOp: cmds, Overlaps: overlaps, Rounds: 1}
}

// TestScalingPoints: one point per N and number of clients, in that order,
// medians of the runs, commands divided by N, overlaps added up.
func TestScalingPoints(t *testing.T) {
	runs := map[[2]int][]bench.Result{
		{5, 8}:  {scalingRun(700, 0.9, 180, 0), scalingRun(800, 1, 185, 0), scalingRun(600, 0.8, 190, 0)},
		{1, 64}: {scalingRun(1500, 0.9, 36, 0), scalingRun(1700, 0.95, 37, 1)},
		{1, 8}:  {scalingRun(2000, 1, 35, 0)},
		{3, 8}:  {},
	}
	got := bench.ScalingPoints(runs)
	if len(got) != 3 {
		t.Fatalf("got %d points, want 3 (a cell without runs has no point): %+v", len(got), got)
	}
	for i, want := range [][2]int{{1, 8}, {1, 64}, {5, 8}} {
		eq(t, [2]int{got[i].N, got[i].Clients}, want, "order")
	}
	eq(t, got[2].OpsPerSec, 700.0, "the median of three")
	eq(t, got[2].Fairness, 0.9, "fairness")
	eq(t, got[2].CmdsPerNode, 185.0/5, "commands per node")
	eq(t, got[2].Rounds, 3, "rounds")
	eq(t, got[1].OpsPerSec, 1600.0, "an even count takes the mean of the middle two")
	eq(t, got[1].Overlaps, 1, "overlaps add up")

	base := bench.ScalingBase(got)
	eq(t, base[1].Clients, 8, "the reference is the fewest clients")
	eq(t, base[1].OpsPerSec, 2000.0, "the reference's rate")
}

// TestWriteScalingTable: a row per point, with the ratio to the fewest
// clients at the same N.
func TestWriteScalingTable(t *testing.T) {
	points := []bench.ScalingPoint{
		{N: 1, Clients: 8, Rounds: 3, OpsPerSec: 2000, Fairness: 0.99, CmdsPerNode: 34},
		{N: 1, Clients: 1000, Rounds: 3, OpsPerSec: 1000, Fairness: 0.5, CmdsPerNode: 50.25, Overlaps: 2, Errors: 1},
		{N: 3, Clients: 8, Rounds: 3, OpsPerSec: math.NaN(), Fairness: math.NaN(), CmdsPerNode: math.NaN()},
	}
	var b strings.Builder
	if err := bench.WriteScalingTable(&b, points); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(points) {
		t.Fatalf("got %d lines, want a header, a rule and a row per point:\n%s", len(lines), b.String())
	}
	for _, c := range []struct {
		line int
		want string
	}{{0, "acquisitions/s"}, {2, "| 1 | 8 |"}, {2, "| – |"}, {3, "0.50×"}, {3, "| 50.2 | 2 | 1 |"}} {
		if !strings.Contains(lines[c.line], c.want) {
			t.Errorf("line %d lacks %q: %s", c.line, c.want, lines[c.line])
		}
	}
	if strings.Contains(b.String(), "NaN") {
		t.Errorf("unknown values must not print as NaN:\n%s", b.String())
	}
}

// TestWriteScalingSVG: well-formed SVG, one line per N in each of the two
// panels, and every number of clients labelled.
func TestWriteScalingSVG(t *testing.T) {
	var points []bench.ScalingPoint
	for _, n := range []int{1, 3, 5} {
		for i, c := range []int{8, 64, 300} {
			points = append(points, bench.ScalingPoint{N: n, Clients: c, Rounds: 3, OpsPerSec: float64(2000 / n / (i + 1)), Fairness: 1, CmdsPerNode: 35})
		}
	}
	var b bytes.Buffer
	if err := bench.WriteScalingSVG(&b, points); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	lines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the SVG does not parse: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	eq(t, lines, 2*3, "a line per N in each panel")
	for _, label := range []string{">8<", ">64<", ">300<", ">N=1<", ">N=3<", ">N=5<"} {
		if !strings.Contains(b.String(), label) {
			t.Errorf("the chart lacks the label %s", label)
		}
	}
	if err := bench.WriteScalingSVG(&b, nil); err == nil {
		t.Error("no points: want an error")
	}
}
