package redlock_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redistest"
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

// BenchmarkFence compares acquisitions that never ask for a token (lazy default,
// no cost), that ask for it after acquiring (lazy, one more round trip), and
// eager fencing (WithFence).
func BenchmarkFence(b *testing.B) {
	c, _ := cluster(b, 3)
	ctx := context.Background()
	for _, mode := range []string{"unused", "lazy", "eager"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var opts []redlock.LockOption
				if mode == "eager" {
					opts = append(opts, redlock.WithFence())
				}
				l, err := c.TryLock(ctx, "fence-bench", opts...)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "unused" {
					if _, err := l.Fence(ctx); err != nil {
						b.Fatal(err)
					}
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHandoff has 8 goroutines contend for one key on 5 nodes. It reports
// the time from a holder's Release call to the next holder's acquisition
// (median), Redis commands per acquisition, and fairness: fewest grants / most
// grants among the goroutines.
func BenchmarkHandoff(b *testing.B) {
	servers := redistest.StartN(b, 5)
	// One client shared by the 8 goroutines (they queue in-process), and one
	// client each (they learn of releases through pub/sub).
	for _, nc := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", nc), func(b *testing.B) {
			for _, s := range servers {
				if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
			}
			benchHandoff(b, servers, nc)
		})
	}
}

func benchHandoff(b *testing.B, servers []*redistest.Server, nc int) {
	clients := make([]*redlock.Client, nc)
	for i := range clients {
		c, err := redlock.Dial(redistest.URLs(servers))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	ctx := context.Background()
	const workers = 8
	// Commands sent by clients: scripts count once, not the commands they run.
	clientCmds := []string{"evalsha", "eval", "subscribe", "unsubscribe", "ping"}
	commands := func() int64 {
		var total int64
		for _, s := range servers {
			calls := s.Calls()
			for _, name := range clientCmds {
				total += calls[name]
			}
		}
		return total
	}
	var (
		mu        sync.Mutex
		released  time.Time
		handoffs  []time.Duration
		grants    [workers]int
		remaining = int64(b.N)
	)
	before := commands()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if remaining <= 0 {
					mu.Unlock()
					return
				}
				remaining--
				mu.Unlock()
				l, err := clients[w%nc].Lock(ctx, "handoff")
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				if !released.IsZero() {
					handoffs = append(handoffs, now.Sub(released))
				}
				grants[w]++
				released = time.Now()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := commands()
	if len(handoffs) == 0 {
		return
	}
	sort.Slice(handoffs, func(i, j int) bool { return handoffs[i] < handoffs[j] })
	lo, hi := grants[0], grants[0]
	for _, g := range grants {
		lo, hi = min(lo, g), max(hi, g)
	}
	b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds())/1000, "handoff-p50-ms")
	b.ReportMetric(float64(after-before)/float64(b.N), "cmds/acq")
	if hi > 0 {
		b.ReportMetric(float64(lo)/float64(hi), "fairness")
	}
}

// BenchmarkThroughput runs Lock+Release from 32 goroutines, each on its own key,
// against real nodes (ops/s is b.N divided by the time).
func BenchmarkThroughput(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c, _ := cluster(b, n)
			ctx := context.Background()
			var id atomic.Int64
			b.SetParallelism(16) // 32 goroutines on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("tp-%d", id.Add(1))
				for pb.Next() {
					l, err := c.TryLock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkCampaignHandoff: 4 candidates, each with a client of its own,
// campaign for one election; each leader resigns at once. It reports the
// time from a leader's Resign call to the next leader's Campaign returning
// (median; a term and a record written on a majority), at N = 1, 3 and 5.
func BenchmarkCampaignHandoff(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			servers := redistest.StartN(b, n)
			const candidates = 4
			clients := make([]*redlock.Client, candidates)
			for i := range clients {
				c, err := redlock.Dial(redistest.URLs(servers))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				clients[i] = c
			}
			ctx := context.Background()
			var (
				mu        sync.Mutex
				resigned  time.Time
				handoffs  []time.Duration
				remaining = int64(b.N)
			)
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Go(func() {
					for {
						mu.Lock()
						if remaining <= 0 {
							mu.Unlock()
							return
						}
						remaining--
						mu.Unlock()
						ld, err := c.Campaign(ctx, "bench-election", "candidate")
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						if !resigned.IsZero() {
							handoffs = append(handoffs, time.Since(resigned))
						}
						resigned = time.Now()
						mu.Unlock()
						if err := ld.Resign(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if len(handoffs) > 0 {
				sort.Slice(handoffs, func(i, j int) bool { return handoffs[i] < handoffs[j] })
				b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds())/1000, "handoff-p50-ms")
			}
		})
	}
}
