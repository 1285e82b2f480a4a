package bench_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/bench"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0.001, 1}} {
		if got := bench.Percentile(d, c.q); got != c.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := bench.Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestMerge(t *testing.T) {
	a := bench.Result{Scenario: "s", Lib: "l", N: 3, Ops: 2, Rounds: 1, Elapsed: time.Second,
		Latencies: []time.Duration{1, 3}, AllocsPerOp: 10, Fairness: math.NaN()}
	b := bench.Result{Scenario: "s", Lib: "l", N: 3, Ops: 3, Errors: 1, Rounds: 1, Elapsed: time.Second,
		Latencies: []time.Duration{2, 4, 5}, AllocsPerOp: 20, Fairness: math.NaN(), FirstErr: errors.New("x")}
	m := bench.Merge(a, b)
	if m.Ops != 5 || m.Errors != 1 || m.Rounds != 2 || m.Elapsed != 2*time.Second || m.OpsPerSec != 2.5 ||
		m.Samples != 5 || m.P50 != 3 || m.P99 != 5 || m.FirstErr == nil {
		t.Errorf("Merge = %+v", m)
	}
	if len(a.Latencies) != 2 {
		t.Errorf("Merge modified its first argument: %v", a.Latencies)
	}
	if got := bench.Merge(); got.Ops != 0 {
		t.Errorf("Merge() = %+v", got)
	}
}

// TestScenarios runs every scenario briefly for every library on real servers:
// no errors, no overlapping holders, and the figures are filled in.
func TestScenarios(t *testing.T) {
	cl := cluster(t)
	ctx := context.Background()
	for _, c := range benchConfigs {
		l, err := bench.NewLocker(c.lib, cl.Addrs(c.n))
		if err != nil {
			t.Fatal(err)
		}
		check := func(r bench.Result) {
			t.Helper()
			if r.Errors > 0 || r.Overlaps > 0 || r.Ops == 0 || r.P50 <= 0 || r.P99 < r.P50 {
				t.Errorf("%s %s N=%d: ops=%d errors=%d (%v) overlaps=%d p50=%v p99=%v",
					r.Scenario, c.lib, c.n, r.Ops, r.Errors, r.FirstErr, r.Overlaps, r.P50, r.P99)
			}
		}
		counter := func() (int64, error) { return cl.Commands(c.n) }
		r := bench.Sequential(ctx, l, bench.ScenarioSequential, bench.SequentialConfig{Warmup: 5, Iterations: 20, Commands: counter})
		check(r)
		if math.IsNaN(r.AllocsPerOp) || r.AllocsPerOp <= 0 {
			t.Errorf("%s N=%d: allocs/op = %v", c.lib, c.n, r.AllocsPerOp)
		}
		// At least one command on a majority for Lock and for Release, and a
		// bounded number a node (commands run inside scripts count too).
		if lo := float64(2 * (c.n/2 + 1)); math.IsNaN(r.CmdsPerOp) || r.CmdsPerOp < lo || r.CmdsPerOp > float64(12*c.n) {
			t.Errorf("%s N=%d: cmds/op = %v, want in [%v, %d]", c.lib, c.n, r.CmdsPerOp, lo, 12*c.n)
		}
		r = bench.Throughput(ctx, l, bench.ThroughputConfig{Goroutines: 4, Duration: 100 * time.Millisecond,
			ServerCPU: func() (time.Duration, error) { return cl.CPUTime(c.n) }})
		check(r)
		if r.ClientCPUPerOp <= 0 {
			t.Errorf("%s N=%d: client CPU/op = %v", c.lib, c.n, r.ClientCPUPerOp)
		}
		r = bench.Contended(ctx, l, bench.ContendedConfig{Goroutines: 3, Duration: 300 * time.Millisecond, Hold: time.Millisecond})
		if r.Errors > 0 || r.Overlaps > 0 || r.Ops == 0 || math.IsNaN(r.Fairness) {
			t.Errorf("contended %s N=%d: ops=%d errors=%d (%v) overlaps=%d fairness=%v",
				c.lib, c.n, r.Ops, r.Errors, r.FirstErr, r.Overlaps, r.Fairness)
		}
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if err := cl.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestContendedClients runs the separate-clients scenario: every client gets
// the lock in turn, nobody overlaps, and the commands are counted.
func TestContendedClients(t *testing.T) {
	cl := cluster(t)
	for _, c := range benchConfigs {
		var ls []bench.Locker
		for range 3 {
			l, err := bench.NewLocker(c.lib, cl.Addrs(c.n))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ls = append(ls, l)
		}
		counter := func() (int64, error) { return cl.Commands(c.n) }
		r := bench.ContendedClients(context.Background(), bench.ScenarioClients, ls,
			bench.ContendedConfig{Duration: 300 * time.Millisecond, Commands: counter})
		if r.Errors > 0 || r.Overlaps > 0 || r.Ops == 0 || math.IsNaN(r.Fairness) || r.Samples == 0 || math.IsNaN(r.CmdsPerOp) || r.CmdsPerOp < 1 {
			t.Errorf("%s N=%d: ops=%d errors=%d (%v) overlaps=%d fairness=%v handoffs=%d cmds/op=%v",
				c.lib, c.n, r.Ops, r.Errors, r.FirstErr, r.Overlaps, r.Fairness, r.Samples, r.CmdsPerOp)
		}
		if err := cl.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func ping(s *bench.Server, timeout time.Duration) error {
	c, err := redis.Dial("tcp", s.Addr(), redis.DialConnectTimeout(timeout),
		redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Do("PING")
	return err
}

func TestServerFaults(t *testing.T) {
	cluster(t) // skips without redis-server
	s, err := bench.StartServer("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.Version(); err != nil || v == "" {
		t.Fatalf("Version() = %q, %v", v, err)
	}
	if d, err := s.CPUTime(); err != nil || d < 0 {
		t.Fatalf("CPUTime() = %v, %v", d, err)
	}
	if err := ping(s, time.Second); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	var ne interface{ Timeout() bool }
	if err := ping(s, 200*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("paused: PING = %v, want a timeout", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s, time.Second); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if err := ping(s, time.Second); err == nil {
		t.Fatal("killed: PING succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s, time.Second); err != nil {
		t.Fatalf("restarted: %v", err)
	}
}
