package main

import (
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-go/redlock/bench"
)

// parseScaling parses -scaling: cells "N:clients,clients,..." separated by
// spaces, N among 1, 3 and 5, at least 2 clients each.
func parseScaling(s string) (map[int][]int, error) {
	bad := func(why string) error {
		return fmt.Errorf("-scaling %q: %s (want N:clients,... separated by spaces, N among 1, 3 and 5, at least 2 clients)", s, why)
	}
	cells := map[int][]int{}
	for _, cell := range strings.Fields(s) {
		nStr, list, ok := strings.Cut(cell, ":")
		if !ok {
			return nil, bad("no colon in " + cell)
		}
		n, err := strconv.Atoi(nStr)
		if err != nil || (n != 1 && n != 3 && n != 5) {
			return nil, bad("bad N " + nStr)
		}
		if _, dup := cells[n]; dup {
			return nil, bad("N=" + nStr + " twice")
		}
		for _, c := range strings.Split(list, ",") {
			k, err := strconv.Atoi(c)
			if err != nil || k < 2 || slices.Contains(cells[n], k) {
				return nil, bad("bad clients " + c)
			}
			cells[n] = append(cells[n], k)
		}
	}
	if len(cells) == 0 {
		return nil, bad("no cell")
	}
	return cells, nil
}

// scalingPhase runs separate redlock clients contending for one key, hold 0,
// for every cell of -scaling, in f.rounds rounds (each round runs every cell
// once, on fresh clients, for f.scalingDuration), and sums each cell up by its
// medians. Its results stay out of the report's tables; the table goes to the
// log and the notes, the chart to -scaling-svg.
func (r *runner) scalingPhase() error {
	var ns []int
	for n := range r.f.scalingCells {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	runs := map[[2]int][]bench.Result{}
	for round := 0; round < r.f.rounds; round++ {
		for _, n := range ns {
			for _, c := range r.f.scalingCells[n] {
				res, err := r.once(bench.LibRedlock, n, c, func(ls []bench.Locker) bench.Result {
					cc := r.clientsConfig(ls[0])
					cc.Duration, cc.Hold = r.f.scalingDuration, 0
					return bench.ContendedClients(r.ctx, fmt.Sprintf("scaling, %d separate clients", c), ls, cc)
				})
				if err != nil {
					return err
				}
				logResult(res)
				runs[[2]int{n, c}] = append(runs[[2]int{n, c}], res)
			}
		}
	}
	points := bench.ScalingPoints(runs)
	var table strings.Builder
	if err := bench.WriteScalingTable(&table, points); err != nil {
		return err
	}
	log.Printf("scaling with waiters, medians of %d runs of %v:\n%s", r.f.rounds, r.f.scalingDuration, table.String())
	r.scalingNotes = append(r.scalingNotes, fmt.Sprintf("Scaling with waiters (medians of %d runs of %v, hold 0):", r.f.rounds, r.f.scalingDuration))
	r.scalingNotes = append(r.scalingNotes, strings.Split(strings.TrimSpace(table.String()), "\n")...)
	if r.f.scalingSVG == "" {
		return nil
	}
	f, err := os.Create(r.f.scalingSVG)
	if err != nil {
		return err
	}
	if err := bench.WriteScalingSVG(f, points); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
