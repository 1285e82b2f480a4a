package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ScalingPoint is one cell of the scaling phase (issue 23, "Scales with
// waiters"): Clients separate clients contending for one key at N nodes,
// hold 0, summed up over its runs by their medians (Median).
type ScalingPoint struct {
	N, Clients int
	// Rounds is the number of runs behind the medians.
	Rounds int
	// OpsPerSec is the median rate of acquisitions.
	OpsPerSec float64
	// Fairness is the median of the runs' fewest ÷ most grants of one client.
	Fairness float64
	// CmdsPerNode is the median of the servers' commands per acquisition
	// (script internals included) divided by N: what one node does per
	// acquisition.
	CmdsPerNode float64
	// Overlaps and Errors add up over the runs.
	Overlaps, Errors int
}

// ScalingPoints sums up runs of the scaling phase, one point per N and
// number of clients (the lockers of a run), in N order, then clients order.
func ScalingPoints(runs map[[2]int][]Result) []ScalingPoint {
	var out []ScalingPoint
	for k, rs := range runs {
		if len(rs) == 0 {
			continue
		}
		m := Median(rs...)
		out = append(out, ScalingPoint{N: k[0], Clients: k[1], Rounds: m.Rounds, OpsPerSec: m.OpsPerSec,
			Fairness: m.Fairness, CmdsPerNode: m.CmdsPerOp / float64(k[0]), Overlaps: m.Overlaps, Errors: m.Errors})
	}
	slices.SortFunc(out, func(a, b ScalingPoint) int {
		if a.N != b.N {
			return a.N - b.N
		}
		return a.Clients - b.Clients
	})
	return out
}

// ScalingBase returns, for each N, the rate of its smallest number of
// clients: the reference of the "largest ÷ smallest" ratio.
func ScalingBase(points []ScalingPoint) map[int]ScalingPoint {
	base := map[int]ScalingPoint{}
	for _, p := range points {
		if b, ok := base[p.N]; !ok || p.Clients < b.Clients {
			base[p.N] = p
		}
	}
	return base
}

// WriteScalingTable writes the points as a Markdown table: acquisitions/s,
// the ratio to the smallest number of clients at the same N, fairness,
// server commands per acquisition per node, overlaps and errors.
func WriteScalingTable(w io.Writer, points []ScalingPoint) error {
	base := ScalingBase(points)
	var b strings.Builder
	b.WriteString("| N | clients | acquisitions/s | ÷ fewest clients | fairness (fewest/most) | server commands per acquisition, per node | overlaps | errors |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range points {
		rel := "–"
		if r := base[p.N]; r.OpsPerSec > 0 && r.Clients != p.Clients {
			rel = fmt.Sprintf("%.2f×", p.OpsPerSec/r.OpsPerSec)
		}
		rate := "–"
		if !math.IsNaN(p.OpsPerSec) {
			rate = opsS(p.OpsPerSec)
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %d | %d |\n", p.N, p.Clients, rate, rel,
			num(p.Fairness, "%.2f"), num(p.CmdsPerNode, "%.1f"), p.Overlaps, p.Errors)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// scalingColor is the colour of N's line.
func scalingColor(n int) string {
	switch n {
	case 1:
		return "#1f77b4"
	case 3:
		return "#ff7f0e"
	case 5:
		return "#2ca02c"
	}
	return "#555"
}

// WriteScalingSVG draws the points as a chart: acquisitions/s against the
// number of clients (a log scale), one line per N, and under it the server
// commands per acquisition per node on the same axis.
func WriteScalingSVG(w io.Writer, points []ScalingPoint) error {
	if len(points) == 0 {
		return fmt.Errorf("bench: no scaling points to draw")
	}
	const (
		width, height = 720, 590
		left, right   = 70, 110
		panelH        = 200
		top1, top2    = 40, 330
	)
	var ns []int
	minC, maxC := math.Inf(1), 0.0
	maxRate, maxCmds := 0.0, 0.0
	for _, p := range points {
		if !slices.Contains(ns, p.N) {
			ns = append(ns, p.N)
		}
		minC, maxC = math.Min(minC, float64(p.Clients)), math.Max(maxC, float64(p.Clients))
		if !math.IsNaN(p.OpsPerSec) {
			maxRate = math.Max(maxRate, p.OpsPerSec)
		}
		if !math.IsNaN(p.CmdsPerNode) {
			maxCmds = math.Max(maxCmds, p.CmdsPerNode)
		}
	}
	slices.Sort(ns)
	if maxC <= minC {
		maxC = minC * 2
	}
	plotW := float64(width - left - right)
	x := func(c int) float64 {
		return float64(left) + plotW*(math.Log(float64(c))-math.Log(minC))/(math.Log(maxC)-math.Log(minC))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	panelOf := func(title string, top int, maxV float64, value func(ScalingPoint) float64, label func(float64) string) {
		maxV = niceCeil(maxV)
		if maxV <= 0 {
			maxV = 1
		}
		y := func(v float64) float64 { return float64(top+panelH) - float64(panelH)*v/maxV }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, top-12, esc(title))
		for i := 0; i <= 4; i++ {
			v := maxV * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, y(v), y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, esc(label(v)))
		}
		var clients []int
		for _, p := range points {
			if !slices.Contains(clients, p.Clients) {
				clients = append(clients, p.Clients)
			}
		}
		slices.Sort(clients)
		lastX, low := math.Inf(-1), false
		for _, c := range clients {
			// Close counts (256 and 300) would print over each other: the
			// second goes a line lower.
			low = x(c)-lastX < 30 && !low
			dy := 16
			if low {
				dy = 28
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(c), top+panelH+dy, c)
			lastX = x(c)
		}
		for _, n := range ns {
			var pts [][2]float64
			for _, p := range points {
				if v := value(p); p.N == n && !math.IsNaN(v) {
					pts = append(pts, [2]float64{x(p.Clients), y(v)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line := make([]string, len(pts))
			for i, pt := range pts {
				line[i] = fmt.Sprintf("%.1f,%.1f", pt[0], pt[1])
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>N=%d</title></polyline>`+"\n", scalingColor(n), strings.Join(line, " "), n)
			for _, pt := range pts {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", pt[0], pt[1], scalingColor(n))
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">separate clients contending for one key (log scale)</text>`+"\n", left+int(plotW/2), top+panelH+46)
	}
	panelOf("Acquisitions/s (medians), hold 0", top1, maxRate, func(p ScalingPoint) float64 { return p.OpsPerSec }, opsS)
	panelOf("Server commands per acquisition, per node", top2, maxCmds, func(p ScalingPoint) float64 { return p.CmdsPerNode },
		func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) })
	for i, n := range ns {
		ly := top1 + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", width-right+12, width-right+36, ly, ly, scalingColor(n))
		fmt.Fprintf(&b, `<text x="%d" y="%d">N=%d</text>`+"\n", width-right+42, ly+4, n)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
