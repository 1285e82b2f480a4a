package bench_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redlock-go/redlock/bench"
)

// TestSemaphoreCells: the comparison's cells, and which of them run: every
// slots cell; the counting design at N=1 (the baseline) and where it
// tolerates a failed node, which at n=2, 8, 64 and N=3, 5, 7 is n=2 at N=5
// and N=7 only (issue 27).
func TestSemaphoreCells(t *testing.T) {
	cells := bench.SemaphoreCells([]int{2, 8, 64}, []int{1, 3, 5, 7})
	if len(cells) != 24 {
		t.Fatalf("%d cells, want 24", len(cells))
	}
	var counting []bench.SemaphoreCell
	for _, c := range cells {
		switch {
		case c.Design == bench.DesignSlots:
			if !c.Runs() || c.Tolerance() != c.N-(c.N/2+1) {
				t.Errorf("%+v: runs %v, tolerates %d", c, c.Runs(), c.Tolerance())
			}
		case c.Runs() && c.N > 1:
			counting = append(counting, c)
		}
	}
	want := []bench.SemaphoreCell{{bench.DesignCounting, 2, 5}, {bench.DesignCounting, 2, 7}}
	if len(counting) != len(want) || counting[0] != want[0] || counting[1] != want[1] {
		t.Errorf("counting cells run at N > 1: %+v, want %+v", counting, want)
	}
	for _, c := range want {
		if c.Q() != 4+(c.N-5)/2 || c.Tolerance() != 1+(c.N-5)/2 {
			t.Errorf("%+v: q %d, tolerates %d", c, c.Q(), c.Tolerance())
		}
	}
}

// TestBeyondScenarios runs the section's scenarios briefly on real servers:
// candidates hand the leadership over, read and write locks are taken and
// released, and a semaphore cell of each design is measured, without errors.
func TestBeyondScenarios(t *testing.T) {
	cl := cluster(t)
	ctx := context.Background()
	counter := func() (int64, error) { return cl.Commands(3) }
	var candidates []bench.Locker
	for range 3 {
		l, err := bench.NewElectionLocker(cl.Addrs(3))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		candidates = append(candidates, l)
	}
	r := bench.ContendedClients(ctx, bench.ScenarioElection, candidates, bench.ContendedConfig{Duration: 300 * time.Millisecond, Commands: counter})
	if r.Errors > 0 || r.Overlaps > 0 || r.Ops == 0 || r.Samples == 0 || math.IsNaN(r.CmdsPerOp) {
		t.Errorf("election: ops=%d errors=%d (%v) overlaps=%d hand-overs=%d cmds/op=%v", r.Ops, r.Errors, r.FirstErr, r.Overlaps, r.Samples, r.CmdsPerOp)
	}

	must(t, cl.Flush(), "flush")
	c, err := bench.NewRedlock(cl.Addrs(3))
	must(t, err, "client")
	defer c.Close()
	for _, kind := range append(bench.RWKinds, "bogus") {
		r := bench.Sequential(ctx, &bench.RWLocker{RedlockLocker: c, Kind: kind}, kind, bench.SequentialConfig{Warmup: 2, Iterations: 10, Commands: counter})
		if kind == "bogus" {
			if r.Errors != 10 || r.Ops != 0 {
				t.Errorf("an unknown kind of lock: ops=%d errors=%d", r.Ops, r.Errors)
			}
			continue
		}
		if r.Errors > 0 || r.Ops != 10 || r.Scenario != kind || math.IsNaN(r.CmdsPerOp) || math.IsNaN(r.ReqsPerOp) {
			t.Errorf("%s: ops=%d errors=%d (%v) cmds/op=%v sent/op=%v", kind, r.Ops, r.Errors, r.FirstErr, r.CmdsPerOp, r.ReqsPerOp)
		}
	}

	cfg := bench.SemaphoreRun{Cluster: cl, Duration: 200 * time.Millisecond, Hold: time.Millisecond, PerPermit: 2, Clients: 2}
	for _, cell := range []bench.SemaphoreCell{{bench.DesignSlots, 2, 1}, {bench.DesignCounting, 2, 1}, {bench.DesignCounting, 2, 3}} {
		r, err := bench.RunSemaphore(ctx, cfg, cell, "beyond")
		must(t, err, cell.Design)
		if !cell.Runs() {
			if !r.NotRun || r.Acquisitions != 0 || r.Q != 3 {
				t.Errorf("%+v: not run, want NotRun, q 3: %+v", cell, r)
			}
			continue
		}
		if r.NotRun || r.Acquisitions == 0 || r.Errors > 0 || r.Clients != 2 || r.Goroutines != 4 || r.MostHolders > 2 || r.ClientCPU < 0 {
			t.Errorf("%+v: %+v", cell, r)
		}
	}
	if _, err := bench.RunSemaphore(ctx, cfg, bench.SemaphoreCell{Design: bench.DesignSlots, Permits: 2, N: 7}, "too-many"); err == nil {
		t.Error("a cell at N=7 ran on five servers")
	}
}

// TestClusterGrow: Grow starts servers up to the number asked, and keeps
// those it had.
func TestClusterGrow(t *testing.T) {
	cluster(t) // skips without redis-server
	cl, err := bench.StartCluster("redis-server", 1)
	must(t, err, "start")
	defer cl.Close()
	first := cl.Servers[0]
	must(t, cl.Grow("redis-server", 2), "grow")
	must(t, cl.Grow("redis-server", 1), "grow to fewer")
	if len(cl.Servers) != 2 || cl.Servers[0] != first {
		t.Fatalf("%d servers after Grow(2), Grow(1); first kept: %v", len(cl.Servers), cl.Servers[0] == first)
	}
	if err := ping(cl.Servers[1], time.Second); err != nil {
		t.Errorf("the server Grow started: %v", err)
	}
}
