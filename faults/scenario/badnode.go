package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/stall"
)

// BadNodeConfig describes a run of separate clients' workers against nodes of
// which one (or a minority) misbehaves.
type BadNodeConfig struct {
	// Name is the scenario's name in the report line.
	Name string
	// URLs are the nodes, bad ones included.
	URLs []string
	// Options are the clients' options (a node timeout, say).
	Options []redlock.Option
	// Clients is the number of separate Clients; Workers the goroutines per
	// client; each worker locks and releases a resource of its own and one
	// shared by all, in turn.
	Clients, Workers int
	// Duration is how long the workers run.
	Duration time.Duration
	// Deadline bounds each Lock call (its context).
	Deadline time.Duration
	// NodeTimeout is the clients' node timeout (also passed as an option).
	NodeTimeout time.Duration
	// Measure, if set, is called after the run; its result ends the report
	// line (for instance "connections=12").
	Measure func() string
}

// BadNodeResult is what a bad-node run measured.
type BadNodeResult struct {
	Acquisitions int
	// Failed counts Lock calls that returned an error (expected only when the
	// bad nodes are a majority, or for the shared resource under contention).
	Failed int
	// GoroutinesBaseline is the count before the clients; GoroutinesPeak the
	// highest seen while they ran; GoroutinesAfter the count once Close
	// returned and the process settled (at most 5 s).
	GoroutinesBaseline, GoroutinesPeak, GoroutinesAfter int
	// Close is how long closing every client took.
	Close time.Duration
	// LateCalls counts calls (Lock or Release) that returned later than their
	// deadline plus one node timeout plus 100 ms of scheduling slack.
	LateCalls int
	// Slowest is the longest call.
	Slowest time.Duration
}

// RunBadNode runs the workload of cfg and reports the line
//
//	fault scenario=<name> acquisitions=<n> goroutines_peak=<n> close_ms=<n> late_calls=<n> ... duration_ms=<n>
func RunBadNode(tb testing.TB, cfg BadNodeConfig) BadNodeResult {
	tb.Helper()
	began := time.Now()
	var res BadNodeResult
	res.GoroutinesBaseline = runtime.NumGoroutine()
	opts := append([]redlock.Option{redlock.WithNodeTimeout(cfg.NodeTimeout)}, cfg.Options...)
	clients := make([]*redlock.Client, cfg.Clients)
	for i := range clients {
		c, err := redlock.Dial(cfg.URLs, opts...)
		if err != nil {
			tb.Fatalf("%s: %v", cfg.Name, err)
		}
		clients[i] = c
	}

	stop := make(chan struct{})
	peak := sampleGoroutines(stop)
	meter := stall.Start(0)
	defer meter.Stop()
	w := &badNodeWorkers{cfg: cfg, bound: cfg.Deadline + cfg.NodeTimeout + 100*time.Millisecond, meter: meter}
	var wg sync.WaitGroup
	for ci, c := range clients {
		for wi := range cfg.Workers {
			wg.Go(func() { w.run(c, ci, wi, stop) })
		}
	}
	time.Sleep(cfg.Duration)
	close(stop)
	wg.Wait()
	res.GoroutinesPeak = <-peak

	start := time.Now()
	for _, c := range clients {
		if err := c.Close(); err != nil && !errors.Is(err, redlock.ErrClosed) {
			tb.Logf("%s: close: %v", cfg.Name, err)
		}
	}
	res.Close = time.Since(start)
	settle := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > res.GoroutinesBaseline+20 && time.Now().Before(settle) {
		time.Sleep(10 * time.Millisecond)
	}
	res.GoroutinesAfter = runtime.NumGoroutine()
	res.Acquisitions, res.Failed = int(w.acquired.Load()), int(w.failed.Load())
	res.LateCalls, res.Slowest = int(w.late.Load()), time.Duration(w.slowest.Load())

	line := fmt.Sprintf("fault scenario=%s acquisitions=%d failed=%d goroutines_peak=%d goroutines_after_close=%d goroutines_baseline=%d close_ms=%d late_calls=%d slowest_ms=%d stall_max_ms=%d",
		cfg.Name, res.Acquisitions, res.Failed, res.GoroutinesPeak, res.GoroutinesAfter, res.GoroutinesBaseline,
		res.Close.Milliseconds(), res.LateCalls, res.Slowest.Milliseconds(), meter.Max().Milliseconds())
	if cfg.Measure != nil {
		line += " " + cfg.Measure()
	}
	// duration_ms: from the clients' dial to the settled goroutine count.
	line += fmt.Sprintf(" duration_ms=%d", time.Since(began).Milliseconds())
	report(line)
	return res
}

// sampleGoroutines counts goroutines every 5 ms until stop is closed, then
// sends the highest count.
func sampleGoroutines(stop <-chan struct{}) <-chan int {
	peak := make(chan int, 1)
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		highest := 0
		for {
			highest = max(highest, runtime.NumGoroutine())
			select {
			case <-stop:
				peak <- highest
				return
			case <-t.C:
			}
		}
	}()
	return peak
}

// badNodeWorkers counts what the workers of a bad-node run saw.
type badNodeWorkers struct {
	cfg                    BadNodeConfig
	bound                  time.Duration // a call returning later, beyond the process' stalls meanwhile, is late
	meter                  *stall.Meter
	acquired, failed, late atomic.Int64
	slowest                atomic.Int64 // nanoseconds
}

// run locks and releases, in turn, a resource of its own and one shared by
// every worker, until stop is closed.
func (w *badNodeWorkers) run(c *redlock.Client, client, worker int, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		resource := fmt.Sprintf("%s-%d-%d", w.cfg.Name, client, worker)
		if i%2 == 1 {
			resource = w.cfg.Name + "-shared"
		}
		var l *redlock.Lock
		err := w.call(func(ctx context.Context) (err error) {
			l, err = c.Lock(ctx, resource)
			return err
		})
		if err != nil {
			w.failed.Add(1)
			continue
		}
		w.acquired.Add(1)
		_ = w.call(l.Release)
	}
}

// call runs f under the run's deadline and times it.
func (w *badNodeWorkers) call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Deadline)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	d := time.Since(start)
	if d > w.bound+w.meter.Since(start) {
		w.late.Add(1)
	}
	for s := w.slowest.Load(); int64(d) > s && !w.slowest.CompareAndSwap(s, int64(d)); s = w.slowest.Load() {
	}
	return err
}

// report prints a result line and appends it to the file named by ReportEnv.
func report(line string) {
	fmt.Println(line)
	if path := os.Getenv(ReportEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}
