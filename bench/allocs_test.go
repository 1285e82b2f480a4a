package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/bench"
)

// allocRuns is the number of Lock+Release pairs testing.AllocsPerRun
// averages over (after one warm-up pair of its own, and allocWarmup of ours:
// connections dialed, scripts loaded).
const (
	allocRuns   = 2000
	allocWarmup = 200
)

// TestAllocsPerLockRelease measures, side by side, the heap allocations of
// one uncontended Lock+Release on one key, for this library and go-redsync at
// N=1, 3 and 5 (issue 26), with testing.AllocsPerRun: the process' mallocs
// around the loop, background goroutines (the pipelined connections' readers
// and writers, stragglers) included. It prints the table; run it with
//
//	cd bench && go test -run TestAllocsPerLockRelease -v
func TestAllocsPerLockRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-servers and runs thousands of Lock+Release pairs")
	}
	cl := cluster(t)
	ctx := context.Background()
	libs := []string{bench.LibRedlock, bench.LibRedsync}
	got := map[string]map[int]float64{}
	for _, lib := range libs {
		got[lib] = map[int]float64{}
		for _, n := range []int{1, 3, 5} {
			l, err := bench.NewLocker(lib, cl.Addrs(n))
			if err != nil {
				t.Fatal(err)
			}
			pair := func() {
				h, err := l.Lock(ctx, "allocs")
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range allocWarmup {
				pair()
			}
			got[lib][n] = testing.AllocsPerRun(allocRuns, pair)
			_ = l.Close()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "allocations per Lock+Release (testing.AllocsPerRun, %d runs)\n", allocRuns)
	fmt.Fprintf(&b, "%-4s %10s %12s\n", "N", libs[0], libs[1])
	for _, n := range []int{1, 3, 5} {
		fmt.Fprintf(&b, "%-4d %10.0f %12.0f\n", n, got[libs[0]][n], got[libs[1]][n])
	}
	t.Log("\n" + b.String())
}
