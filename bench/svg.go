package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// Colours of the libraries in the chart.
var libColors = map[string]string{
	LibRedlock:   "#1f77b4",
	LibRedsync:   "#ff7f0e",
	LibRedislock: "#2ca02c",
}

var libs = []string{LibRedlock, LibRedsync, LibRedislock}

type series struct {
	name   string
	values []float64 // NaN or ≤ 0: no bar
}

type panel struct {
	title  string
	groups []string
	series []series
	log    bool
	format func(float64) string
}

func msF(v float64) string { return ms(time.Duration(v * float64(time.Millisecond))) }

// panels builds the four charts of a report.
func (rep *Report) panels() []panel {
	ns := []int{1, 3, 5}
	groups := []string{"N=1", "N=3", "N=5"}
	byN := func(scenario string, f func(Result) float64) []series {
		var out []series
		for _, lib := range libs {
			s := series{name: lib}
			for _, n := range ns {
				v := math.NaN()
				if r, ok := rep.Find(scenario, lib, n); ok && r.Ops > 0 {
					v = f(r)
				}
				s.values = append(s.values, v)
			}
			out = append(out, s)
		}
		return out
	}
	p50 := func(r Result) float64 { return float64(r.P50) / float64(time.Millisecond) }
	ops := func(r Result) float64 { return r.OpsPerSec }

	var faults []series
	for _, lib := range []string{LibRedlock, LibRedsync} {
		s := series{name: lib}
		for _, sc := range []string{ScenarioSequential, ScenarioPaused, ScenarioKilled} {
			v := math.NaN()
			if r, ok := rep.Find(sc, lib, 5); ok && r.Ops > 0 {
				v = p50(r)
			}
			s.values = append(s.values, v)
		}
		faults = append(faults, s)
	}
	return []panel{
		{title: "Sequential Lock+Release, p50 (ms, lower is better)", groups: groups,
			series: byN(ScenarioSequential, p50), format: msF},
		{title: "Throughput, 32 goroutines on own keys (ops/s, higher is better)", groups: groups,
			series: byN(ScenarioThroughput, ops), format: opsS},
		{title: "Contended, 8 goroutines on one key: handoff p50 (ms, log)", groups: groups,
			series: byN(ScenarioContended, p50), format: msF, log: true},
		{title: "N=5 Lock+Release p50: healthy, 1 paused, 1 killed (ms, log)",
			groups: []string{"healthy", "1 paused", "1 killed"},
			series: faults, format: msF, log: true},
	}
}

// WriteSVG writes a hand-made bar chart of the report: sequential p50, 32-goroutine
// throughput, contended handoff p50, and N=5 p50 with a node paused or killed.
func WriteSVG(w io.Writer, rep *Report) error {
	const (
		pw, ph   = 520, 330 // one panel
		cols     = 2
		top      = 70
		width    = pw * cols
		fontFace = "DejaVu Sans, Helvetica, Arial, sans-serif"
	)
	panels := rep.panels()
	rows := (len(panels) + cols - 1) / cols
	height := top + rows*ph + 30
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		width, height, width, height, fontFace)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="24" font-size="18" font-weight="bold" text-anchor="middle">redlock vs go-redsync v4 vs bsm/redislock — real redis-server on loopback</text>`+"\n", width/2)
	p(`<text x="%d" y="44" font-size="12" fill="#444" text-anchor="middle">%s · %d CPUs, %s · %s · redis %s</text>`+"\n",
		width/2, esc(rep.Date), rep.Machine.CPUs, esc(rep.Machine.CPUModel), esc(rep.Machine.GoVersion), esc(rep.Machine.RedisVersion))
	// Legend.
	lx := width/2 - 170
	for i, lib := range libs {
		x := lx + i*130
		p(`<rect x="%d" y="54" width="12" height="12" fill="%s"/><text x="%d" y="65" font-size="12">%s</text>`+"\n",
			x, libColors[lib], x+16, esc(lib))
	}
	for i, pn := range panels {
		x0 := (i % cols) * pw
		y0 := top + (i/cols)*ph
		drawPanel(&b, pn, x0, y0, pw, ph)
	}
	p(`<text x="%d" y="%d" font-size="11" fill="#444" text-anchor="middle">%s</text>`+"\n", width/2, height-10, esc("$ "+rep.Command))
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string { return html.EscapeString(s) }

// drawPanel draws one grouped bar chart in the box (x0, y0, w, h).
func drawPanel(b *strings.Builder, pn panel, x0, y0, w, h int) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	const left, right, titleH, bottom = 60, 15, 34, 30
	px, py := float64(x0+left), float64(y0+titleH)
	pw, ph := float64(w-left-right), float64(h-titleH-bottom)
	p(`<text x="%d" y="%d" font-size="13" font-weight="bold" text-anchor="middle">%s</text>`+"\n",
		x0+w/2, y0+20, esc(pn.title))

	lo, hi := math.Inf(1), 0.0
	for _, s := range pn.series {
		for _, v := range s.values {
			if v > 0 && !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if hi == 0 {
		p(`<text x="%.0f" y="%.0f" font-size="12" text-anchor="middle" fill="#888">no data</text>`+"\n", px+pw/2, py+ph/2)
		return
	}
	// y maps a value to a pixel row; ticks are the gridlines.
	var y func(float64) float64
	var ticks []float64
	if pn.log {
		d0, d1 := math.Floor(math.Log10(lo/2)), math.Ceil(math.Log10(hi)+0.15)
		if d1 <= d0 {
			d1 = d0 + 1
		}
		y = func(v float64) float64 { return py + ph - (math.Log10(v)-d0)/(d1-d0)*ph }
		for d := d0; d <= d1; d++ {
			ticks = append(ticks, math.Pow(10, d))
		}
	} else {
		top := niceCeil(hi * 1.15)
		y = func(v float64) float64 { return py + ph - v/top*ph }
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, top*float64(i)/4)
		}
	}
	for _, t := range ticks {
		ty := y(t)
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, ty, px+pw, ty)
		p(`<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" fill="#555">%s</text>`+"\n", px-5, ty+3, esc(tickLabel(t, pn)))
	}
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", px, py+ph, px+pw, py+ph)
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", px, py, px, py+ph)

	gw := pw / float64(len(pn.groups))
	bw := gw * 0.8 / float64(len(pn.series))
	for gi, g := range pn.groups {
		gx := px + float64(gi)*gw
		p(`<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`+"\n", gx+gw/2, py+ph+18, esc(g))
		var present []series
		for _, s := range pn.series {
			if v := s.values[gi]; !math.IsNaN(v) && v > 0 {
				present = append(present, s)
			}
		}
		// Bars of the group are centred, whatever the number of libraries in it.
		first := gx + gw/2 - float64(len(present))*bw/2
		for si, s := range present {
			v := s.values[gi]
			bx := first + float64(si)*bw
			by := y(v)
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				bx+1, by, bw-2, py+ph-by, libColors[s.name], esc(s.name), esc(g), esc(pn.format(v)))
			p(`<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`+"\n", bx+bw/2, by-3, esc(pn.format(v)))
		}
	}
}

func tickLabel(t float64, pn panel) string {
	if pn.log {
		return fmt.Sprintf("%g", t)
	}
	return pn.format(t)
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}
