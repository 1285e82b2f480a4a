package bench_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redlock-go/redlock/bench"
)

// TestAdapterLockers runs redlock over the goredis and rueidis adapter nodes
// through the sequential and separate-clients scenarios: no errors, no
// overlapping holders, and their requests are counted like the core node's.
func TestAdapterLockers(t *testing.T) {
	cl := cluster(t)
	ctx := context.Background()
	for _, lib := range []string{bench.LibRedlockGoredis, bench.LibRedlockRueidis} {
		for _, n := range []int{1, 3} {
			counter := func() (int64, error) { return cl.Commands(n) }
			var ls []bench.Locker
			for range 3 {
				l, err := bench.NewLocker(lib, cl.Addrs(n))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			if ls[0].Lib() != lib || ls[0].N() != n {
				t.Errorf("NewLocker(%q, N=%d): Lib() = %q, N() = %d", lib, n, ls[0].Lib(), ls[0].N())
			}
			r := bench.Sequential(ctx, ls[0], bench.ScenarioSequential, bench.SequentialConfig{Warmup: 5, Iterations: 20, Commands: counter})
			if r.Errors > 0 || r.Ops != 20 || math.IsNaN(r.ReqsPerOp) || r.ReqsPerOp < float64(2*(n/2+1)) {
				t.Errorf("sequential %s N=%d: ops=%d errors=%d (%v) sent/op=%v", lib, n, r.Ops, r.Errors, r.FirstErr, r.ReqsPerOp)
			}
			r = bench.ContendedClients(ctx, bench.ScenarioClientsAdapters, ls,
				bench.ContendedConfig{Duration: 300 * time.Millisecond, Commands: counter})
			if r.Errors > 0 || r.Overlaps > 0 || r.Ops == 0 || math.IsNaN(r.Fairness) || r.Samples == 0 ||
				math.IsNaN(r.CmdsPerOp) || math.IsNaN(r.ReqsPerOp) || r.ReqsPerOp < 1 {
				t.Errorf("clients %s N=%d: ops=%d errors=%d (%v) overlaps=%d fairness=%v handoffs=%d cmds/op=%v sent/op=%v",
					lib, n, r.Ops, r.Errors, r.FirstErr, r.Overlaps, r.Fairness, r.Samples, r.CmdsPerOp, r.ReqsPerOp)
			}
			for _, l := range ls {
				if err := l.Close(); err != nil {
					t.Errorf("%s N=%d: Close: %v", lib, n, err)
				}
			}
			if err := cl.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestMedian(t *testing.T) {
	run := func(ops float64, p50 time.Duration, fair float64) bench.Result {
		return bench.Result{Scenario: "s", Lib: "l", N: 5, Ops: 10, Samples: 9, Rounds: 1, Elapsed: time.Second,
			OpsPerSec: ops, P50: p50, P99: 2 * p50, Fairness: fair, CmdsPerOp: ops / 100, ReqsPerOp: math.NaN(),
			ClientCPUPerOp: time.Duration(ops), ServerCPUPerOp: 0}
	}
	m := bench.Median(run(300, 3, 0.9), run(100, 5, 0.7), run(200, 1, 0.8), run(500, 4, 1), run(400, 2, 0.95))
	if m.OpsPerSec != 300 || m.P50 != 3 || m.P99 != 6 || m.Fairness != 0.9 || m.CmdsPerOp != 3 || !math.IsNaN(m.ReqsPerOp) ||
		m.ClientCPUPerOp != 300 || m.ServerCPUPerOp != 0 || m.Ops != 50 || m.Samples != 45 || m.Rounds != 5 || m.Elapsed != 5*time.Second {
		t.Errorf("Median of 5 = %+v", m)
	}
	if m := bench.Median(run(100, 2, 0.5), run(200, 4, 1)); m.OpsPerSec != 150 || m.P50 != 3 || m.Fairness != 0.75 {
		t.Errorf("Median of 2 = %+v", m)
	}
	if m := bench.Median(); m.Ops != 0 {
		t.Errorf("Median() = %+v", m)
	}
}

func TestCompareAdapter(t *testing.T) {
	core := bench.Result{Lib: bench.LibRedlock, N: 5, Ops: 100, OpsPerSec: 1000, P50: time.Millisecond, Fairness: 0.9}
	for _, c := range []struct {
		ops  float64
		p50  time.Duration
		fair float64
		met  bool
	}{
		{1000, time.Millisecond, 0.9, true},
		{800, 1200 * time.Microsecond, 0.8, true}, // at the limits
		{2000, 500 * time.Microsecond, 0.9, true}, // faster
		{790, time.Millisecond, 0.9, false},
		{1000, 1210 * time.Microsecond, 0.9, false},
		{1000, time.Millisecond, 0.79, false},
	} {
		a := bench.Result{Lib: bench.LibRedlockGoredis, N: 5, Ops: 100, OpsPerSec: c.ops, P50: c.p50, Fairness: c.fair}
		if got := bench.CompareAdapter(core, a); !got.Known || got.Met != c.met {
			t.Errorf("CompareAdapter(%v acq/s, p50 %v, fairness %v) = %+v, want met %v", c.ops, c.p50, c.fair, got, c.met)
		}
	}
	if got := bench.CompareAdapter(bench.Result{}, core); got.Known || got.Met {
		t.Errorf("CompareAdapter without a core result = %+v", got)
	}
}
