package redlock_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// BenchmarkLockRelease measures one TryLock plus Release against real
// redis-server nodes on loopback, reporting the median and p99 latency.
func BenchmarkLockRelease(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c, _ := cluster(b, n)
			benchLockRelease(b, c)
		})
	}
	// One of five nodes paused (SIGSTOP): acquisition must not wait for it.
	b.Run("N=5/paused=1", func(b *testing.B) {
		servers := redistest.StartN(b, 5)
		c, err := redlock.Dial(redistest.URLs(servers))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		servers[4].Pause()
		defer servers[4].Resume()
		benchLockRelease(b, c)
	})
}

func benchLockRelease(b *testing.B, c *redlock.Client) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, err := c.TryLock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
