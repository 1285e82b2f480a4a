package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/bench"
)

// benchConfigs are the library × N pairs of the benchmarks.
var benchConfigs = []struct {
	lib string
	n   int
}{
	{bench.LibRedlock, 1}, {bench.LibRedsync, 1}, {bench.LibRedislock, 1},
	{bench.LibRedlock, 3}, {bench.LibRedsync, 3},
	{bench.LibRedlock, 5}, {bench.LibRedsync, 5},
}

func newLocker(b *testing.B, cl *bench.Cluster, lib string, n int) bench.Locker {
	b.Helper()
	l, err := bench.NewLocker(lib, cl.Addrs(n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// BenchmarkLockRelease measures one Lock plus Release at a time, on one key,
// for each library and N, reporting allocations and the p50 and p99 latency.
func BenchmarkLockRelease(b *testing.B) {
	for _, c := range benchConfigs {
		b.Run(fmt.Sprintf("%s/N=%d", c.lib, c.n), func(b *testing.B) {
			cl := cluster(b)
			benchSequential(b, newLocker(b, cl, c.lib, c.n))
		})
	}
}

// BenchmarkLockReleasePaused is BenchmarkLockRelease at N=5 with the fifth node
// stopped by SIGSTOP. go-redsync waits for every node, so each of its
// iterations takes two read timeouts (2s): run it with -benchtime=3x or so.
func BenchmarkLockReleasePaused(b *testing.B) {
	for _, lib := range []string{bench.LibRedlock, bench.LibRedsync} {
		b.Run(lib+"/N=5", func(b *testing.B) {
			cl := cluster(b)
			l := newLocker(b, cl, lib, 5)
			if err := cl.Servers[4].Pause(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := cl.Servers[4].Resume(); err != nil {
					b.Fatal(err)
				}
			}()
			benchSequential(b, l)
		})
	}
}

func benchSequential(b *testing.B, l bench.Locker) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		h, err := l.Lock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(bench.Percentile(lat, 0.50))/1e6, "p50-ms")
	b.ReportMetric(float64(bench.Percentile(lat, 0.99))/1e6, "p99-ms")
}

// BenchmarkLockReleaseParallel runs Lock plus Release from 32 goroutines
// (b.SetParallelism), each on a key of its own, for each library and N.
func BenchmarkLockReleaseParallel(b *testing.B) {
	for _, c := range benchConfigs {
		b.Run(fmt.Sprintf("%s/N=%d", c.lib, c.n), func(b *testing.B) {
			cl := cluster(b)
			l := newLocker(b, cl, c.lib, c.n)
			var ids atomic.Int64
			b.SetParallelism((32 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				key := fmt.Sprintf("par:%d", ids.Add(1))
				for pb.Next() {
					h, err := l.Lock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := h.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
