package bench_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/bench"
)

// TestCountingSemaphoreMixedTTLs: in the counting container (design a), a
// later holder with a shorter TTL never shortens the container's life under
// an earlier holder; once the short lease is over, its place is free again
// and the earlier holder's is not.
func TestCountingSemaphoreMixedTTLs(t *testing.T) {
	cl := cluster(t)
	addrs := cl.Addrs(1)
	s, err := bench.NewCountingSemaphore(addrs, "mixed", 2, 5*time.Second, true)
	must(t, err, "new")
	defer s.Close()
	ctx := context.Background()
	long, err := s.TryAcquire(ctx, 5*time.Second)
	must(t, err, "long")
	short, err := s.TryAcquire(ctx, 200*time.Millisecond)
	must(t, err, "short")
	_, err = s.TryAcquire(ctx, time.Second)
	mustNotAcquire(t, err, "two permits are held")
	pttl := func(what string) {
		t.Helper()
		v, err := redis.Int64(cl.Servers[0].Do("PTTL", "csem:{mixed}"))
		must(t, err, "PTTL")
		if v < 4000 {
			t.Errorf("%s: the container's PTTL is %d ms: a shorter lease shortened it under the 5 s holder", what, v)
		}
	}
	pttl("after the short joiner")
	time.Sleep(300 * time.Millisecond)
	pttl("after the short lease")
	again, err := s.TryAcquire(ctx, 100*time.Millisecond)
	must(t, err, "the short lease is over: its place is free")
	_, err = s.TryAcquire(ctx, time.Second)
	mustNotAcquire(t, err, "the long holder still holds")
	pttl("after a second short joiner")
	must(t, long.Extend(ctx), "extend the long permit")
	if err := short.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("an expired permit was extended: %v", err)
	}
	must(t, again.Release(ctx), "release")
	must(t, long.Release(ctx), "release")
}

// TestCountingSemaphoreRefusesNoTolerance: design (a) refuses a combination
// that tolerates no failed node unless asked (N=3 and n=2 needs all 3).
func TestCountingSemaphoreRefusesNoTolerance(t *testing.T) {
	cl := cluster(t)
	_, err := bench.NewCountingSemaphore(cl.Addrs(3), "x", 2, time.Second, false)
	if err == nil || !strings.Contains(err.Error(), "needs 3 of 3 nodes: no fault tolerance") {
		t.Fatalf("N=3, n=2 accepted or refused for another reason: %v", err)
	}
	s, err := bench.NewCountingSemaphore(cl.Addrs(5), "x", 2, time.Second, false)
	must(t, err, "N=5, n=2")
	if s.Q() != 4 || s.Tolerance() != 1 {
		t.Errorf("N=5, n=2: q %d tolerance %d, want 4 and 1", s.Q(), s.Tolerance())
	}
	must(t, s.Close(), "close")
}

// TestSemaphoreScenario runs the semaphore scenario shortly on both designs:
// never more holders than permits, and acquisitions made.
func TestSemaphoreScenario(t *testing.T) {
	cl := cluster(t)
	slots, err := bench.NewSlotSemaphore(cl.URLs(3), "scen-b", 2)
	must(t, err, "slots")
	defer slots.Close()
	counting, err := bench.NewCountingSemaphore(cl.Addrs(5), "scen-a", 2, 10*time.Second, false)
	must(t, err, "counting")
	defer counting.Close()
	for _, s := range []bench.Semaphorer{slots, counting} {
		r := bench.SemaphoreScenario([]bench.Semaphorer{s}, bench.SemaphoreConfig{Goroutines: 6, Duration: 700 * time.Millisecond, Hold: time.Millisecond})
		t.Logf("%s N=%d n=%d: %d acquisitions (%.0f/s), most holders %d, errors %d %v", r.Design, r.N, r.Permits, r.Acquisitions, r.AcqPerSec, r.MostHolders, r.Errors, r.FirstErr)
		if r.Acquisitions == 0 || r.MostHolders > 2 || r.Errors > 0 {
			t.Errorf("%s: want acquisitions, at most 2 holders, no error", r.Design)
		}
	}
}

// TestSemaphoreToleranceMeasured: the fault tolerance of each design,
// measured by killing servers one by one (MeasureTolerance, through
// RunSemaphore), is the one its quorum promises: N − ⌈(N+1)/2⌉ for the slots,
// N − q for the counting design; RunSemaphore fails when they differ.
func TestSemaphoreToleranceMeasured(t *testing.T) {
	cl := cluster(t)
	cfg := bench.SemaphoreRun{Cluster: cl, Duration: 100 * time.Millisecond, Hold: time.Millisecond, PerPermit: 2, Clients: 1, ToleranceWait: time.Second}
	for _, tc := range []struct {
		cell bench.SemaphoreCell
		want int
	}{
		{bench.SemaphoreCell{Design: bench.DesignSlots, Permits: 2, N: 1}, 0},
		{bench.SemaphoreCell{Design: bench.DesignSlots, Permits: 2, N: 3}, 1},
		{bench.SemaphoreCell{Design: bench.DesignSlots, Permits: 8, N: 5}, 2},
		{bench.SemaphoreCell{Design: bench.DesignCounting, Permits: 2, N: 5}, 1}, // q = 4
	} {
		r, err := bench.RunSemaphore(context.Background(), cfg, tc.cell, "tol")
		must(t, err, tc.cell.Design)
		t.Logf("%s n=%d N=%d: q %d, tolerates %d (measured %d)", r.Design, r.Permits, r.N, r.Q, r.Tolerance, r.Measured)
		if r.Measured != tc.want || r.Tolerance != tc.want {
			t.Errorf("%s n=%d N=%d: tolerates %d, measured %d, want %d", r.Design, r.Permits, r.N, r.Tolerance, r.Measured, tc.want)
		}
	}
	// The servers are back: a cell over all of them runs.
	r, err := bench.RunSemaphore(context.Background(), bench.SemaphoreRun{Cluster: cl, Duration: 100 * time.Millisecond, Hold: time.Millisecond, PerPermit: 2, Clients: 1},
		bench.SemaphoreCell{Design: bench.DesignSlots, Permits: 2, N: 5}, "tol-after")
	must(t, err, "after")
	if r.Acquisitions == 0 || r.Measured != -1 {
		t.Errorf("after the measurement: %d acquisitions, measured %d (want some, and -1: not asked)", r.Acquisitions, r.Measured)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustNotAcquire(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("%s: got %v, want ErrNotAcquired", what, err)
	}
}
