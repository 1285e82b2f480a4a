package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Scenario names, as they appear in the report.
const (
	ScenarioSequential = "sequential"
	ScenarioThroughput = "throughput"
	ScenarioContended  = "contended"
	ScenarioHealthyRef = "5 of 5 healthy (ref)"
	ScenarioPaused     = "1 of 5 paused"
	ScenarioKilled     = "1 of 5 killed"
	// Separate clients of one library contending for one key.
	ScenarioClients = "contended, separate clients"
	// Separate clients at N=3, healthy and with one node paused.
	ScenarioClientsHealthy = "separate clients, 3 of 3 healthy (ref)"
	ScenarioClientsPaused  = "separate clients, 1 of 3 paused"
)

// Result is what one scenario measured for one library at one N.
type Result struct {
	Scenario string
	Lib      string
	N        int
	// Ops counts successful operations: Lock+Release pairs, or acquisitions
	// in the contended scenario.
	Ops int
	// Errors counts failed Lock or Release calls (a Lock cut short by the end
	// of a timed scenario is not an error).
	Errors int
	// FirstErr is the first error seen, if any.
	FirstErr error
	// Elapsed is the measured wall time.
	Elapsed time.Duration
	// P50 and P99 are latency percentiles: of Lock+Release, or in the contended
	// scenario of the handoff (release started → another goroutine acquired).
	P50, P99 time.Duration
	// Samples is the number of latencies behind P50 and P99.
	Samples int
	// OpsPerSec is Ops / Elapsed.
	OpsPerSec float64
	// Fairness is, in the contended scenario, the smallest number of
	// acquisitions of one goroutine divided by the largest (1 is perfectly
	// fair); NaN elsewhere.
	Fairness float64
	// Overlaps counts, in the contended scenario, acquisitions made while
	// another goroutine believed it held the lock (should be 0).
	Overlaps int
	// AllocsPerOp and BytesPerOp are heap allocations per Lock+Release, from
	// runtime.MemStats deltas around the sequential loop; NaN elsewhere.
	AllocsPerOp, BytesPerOp float64
	// CmdsPerOp is the number of commands the servers processed per operation
	// (INFO stats, total_commands_processed), when a Counter was given; NaN
	// otherwise.
	CmdsPerOp float64
	// ReqsPerOp is the number of commands the clients sent per operation
	// (RESP commands written on their connections: an EVALSHA is one, however
	// many commands its script runs), when every locker counts them (see
	// Requests); NaN otherwise.
	ReqsPerOp float64
	// ClientCPUPerOp and ServerCPUPerOp are the CPU time (user + system) per
	// operation of this process and of the servers, in the throughput
	// scenario; 0 when unknown. On a machine shared with other work they say
	// more than the rates, which depend on what else runs.
	ClientCPUPerOp, ServerCPUPerOp time.Duration
	// Capped reports that the loop stopped at its iteration or time cap.
	Capped bool
	// Rounds is the number of runs merged into this result (see Merge).
	Rounds int
	// Latencies are the sorted samples behind P50 and P99.
	Latencies []time.Duration

	mallocs, bytes       uint64        // heap deltas of a sequential run
	cmds                 int64         // server commands of the measured part, -1 if unknown
	reqs                 int64         // client requests of the measured part, -1 if unknown
	clientCPU, serverCPU time.Duration // CPU times of the measured part, -1 if unknown
	counts               []int         // acquisitions per goroutine of a contended run
}

func newResult(scenario string, l Locker) Result {
	return Result{Scenario: scenario, Lib: l.Lib(), N: l.N(), Rounds: 1, cmds: -1, reqs: -1, clientCPU: -1, serverCPU: -1,
		Fairness: math.NaN(), AllocsPerOp: math.NaN(), BytesPerOp: math.NaN(), CmdsPerOp: math.NaN(), ReqsPerOp: math.NaN()}
}

// Merge combines runs of one scenario for one library and N (rounds
// interleaved with other libraries' runs, so that a machine's drift affects
// every library alike) into one result: operations, errors and time add up,
// latencies are pooled, allocations are averaged over all operations, and
// contended acquisitions are summed per goroutine before fairness is computed.
func Merge(parts ...Result) Result {
	if len(parts) == 0 {
		return Result{}
	}
	r := parts[0]
	r.Latencies = slices.Clone(r.Latencies)
	r.counts = slices.Clone(r.counts)
	for _, p := range parts[1:] {
		r.Ops += p.Ops
		r.Errors += p.Errors
		if r.FirstErr == nil {
			r.FirstErr = p.FirstErr
		}
		r.Elapsed += p.Elapsed
		r.Overlaps += p.Overlaps
		r.Capped = r.Capped || p.Capped
		r.Rounds += p.Rounds
		r.Latencies = append(r.Latencies, p.Latencies...)
		r.mallocs += p.mallocs
		r.bytes += p.bytes
		r.cmds = sumKnown(r.cmds, p.cmds)
		r.reqs = sumKnown(r.reqs, p.reqs)
		r.clientCPU = sumKnown(r.clientCPU, p.clientCPU)
		r.serverCPU = sumKnown(r.serverCPU, p.serverCPU)
		for i, c := range p.counts {
			if i < len(r.counts) {
				r.counts[i] += c
			}
		}
	}
	if r.Elapsed > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Elapsed.Seconds()
	}
	if n := r.Ops + r.Errors; n > 0 && !math.IsNaN(r.AllocsPerOp) {
		r.AllocsPerOp = float64(r.mallocs) / float64(n)
		r.BytesPerOp = float64(r.bytes) / float64(n)
	}
	if len(r.counts) > 0 {
		r.setFairness(r.counts)
	}
	r.setCmds(r.cmds)
	r.setReqs(r.reqs)
	r.setCPU(r.clientCPU, r.serverCPU)
	r.setLatencies(r.Latencies)
	return r
}

// setCPU records the CPU times of the measured part (-1: unknown).
func (r *Result) setCPU(client, server time.Duration) {
	r.clientCPU, r.serverCPU = client, server
	r.ClientCPUPerOp, r.ServerCPUPerOp = 0, 0
	if r.Ops == 0 {
		return
	}
	if client >= 0 {
		r.ClientCPUPerOp = client / time.Duration(r.Ops)
	}
	if server >= 0 {
		r.ServerCPUPerOp = server / time.Duration(r.Ops)
	}
}

// CPUMeter returns CPU time used so far.
type CPUMeter func() (time.Duration, error)

func (m CPUMeter) read() time.Duration {
	if m == nil {
		return -1
	}
	d, err := m()
	if err != nil {
		return -1
	}
	return d
}

// Counter returns the number of commands the servers have processed so far.
type Counter func() (int64, error)

// count reads c, or returns -1 when c is nil or fails.
func (c Counter) count() int64 {
	if c == nil {
		return -1
	}
	n, err := c()
	if err != nil {
		return -1
	}
	return n
}

// settled reads c once the servers are quiet: until two reads 10 ms apart
// agree (at most 1 s), or -1 when c is nil or fails. At N ≥ 3 a Lock+Release
// returns on a majority, and the last node's commands may still be on their
// way: read at once, a count taken after the warm-up would leave its last
// pair's late commands to the measured pairs, and a count after them would
// miss theirs (3 to 8 commands per run of 2,000 pairs at N=3 and 5: the
// "15.0040" of 6 December 2026, docs/benchmarks.md).
func (c Counter) settled() int64 {
	n := c.count()
	for range 100 {
		if n < 0 {
			return n
		}
		time.Sleep(10 * time.Millisecond)
		m := c.count()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// A count or a time of which -1 means unknown (a counter that failed).
type known interface{ int64 | time.Duration }

// sumKnown returns a+b, or -1 when either is unknown.
func sumKnown[T known](a, b T) T {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

// deltaKnown returns after-before, or -1 when either is unknown.
func deltaKnown[T known](before, after T) T {
	if before < 0 || after < 0 {
		return -1
	}
	return after - before
}

// perOp divides total (-1: unknown) by the operations, failed ones included;
// NaN when unknown or when there were none.
func (r *Result) perOp(total int64) float64 {
	if n := r.Ops + r.Errors; total >= 0 && n > 0 {
		return float64(total) / float64(n)
	}
	return math.NaN()
}

// setCmds records the commands counted over the measured part.
func (r *Result) setCmds(cmds int64) { r.cmds, r.CmdsPerOp = cmds, r.perOp(cmds) }

// RequestCounter is a Locker that counts the commands its client sends (see
// Requests).
type RequestCounter interface {
	Requests() int64
}

// requests sums the requests counted by the distinct lockers of ls, or returns
// -1 when one of them does not count.
func requests(ls ...Locker) int64 {
	var n int64
	seen := map[Locker]bool{}
	for _, l := range ls {
		rc, ok := l.(RequestCounter)
		if !ok {
			return -1
		}
		if !seen[l] {
			seen[l] = true
			n += rc.Requests()
		}
	}
	return n
}

// setReqs records the client requests counted over the measured part.
func (r *Result) setReqs(reqs int64) { r.reqs, r.ReqsPerOp = reqs, r.perOp(reqs) }

func (r *Result) setFairness(counts []int) {
	r.counts = counts
	if hi := slices.Max(counts); hi > 0 {
		r.Fairness = float64(slices.Min(counts)) / float64(hi)
	}
}

// Percentile returns the q-quantile (0 < q ≤ 1) of sorted, by the nearest-rank
// method, or 0 if sorted is empty.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (r *Result) setLatencies(lat []time.Duration) {
	slices.Sort(lat)
	r.Latencies = lat
	r.Samples = len(lat)
	r.P50, r.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
}

func (r *Result) fail(err error) {
	r.Errors++
	if r.FirstErr == nil {
		r.FirstErr = err
	}
}

// lockRelease is one Lock+Release on key.
func lockRelease(ctx context.Context, l Locker, key string) error {
	h, err := l.Lock(ctx, key)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// SequentialConfig bounds a sequential run.
type SequentialConfig struct {
	// Warmup Lock+Release pairs are run first and not measured.
	Warmup int
	// Iterations is the number of measured Lock+Release pairs.
	Iterations int
	// MaxTime stops the measured loop early (0 = no limit).
	MaxTime time.Duration
	// OpTimeout bounds each Lock+Release (0 = no limit).
	OpTimeout time.Duration
	// Commands, if set, counts the servers' commands around the measured loop.
	Commands Counter
}

// Sequential measures Lock+Release latency on one key, one call at a time,
// and the heap allocations per pair (runtime.MemStats deltas around the
// measured loop, so allocations of the library's background goroutines
// count too).
func Sequential(ctx context.Context, l Locker, scenario string, cfg SequentialConfig) Result {
	r := newResult(scenario, l)
	key := "seq"
	deadline := time.Time{}
	if cfg.MaxTime > 0 {
		deadline = time.Now().Add(cfg.MaxTime)
	}
	op := func() error {
		if cfg.OpTimeout <= 0 {
			return lockRelease(ctx, l, key)
		}
		octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		defer cancel()
		return lockRelease(octx, l, key)
	}
	for i := 0; i < cfg.Warmup && ctx.Err() == nil; i++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		_ = op()
	}
	lat := make([]time.Duration, 0, cfg.Iterations)
	var before, after runtime.MemStats
	cmds0, reqs0 := cfg.Commands.settled(), requests(l)
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := 0; i < cfg.Iterations && ctx.Err() == nil; i++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			r.Capped = true
			break
		}
		t0 := time.Now()
		err := op()
		d := time.Since(t0)
		if err != nil {
			r.fail(err)
			continue
		}
		lat = append(lat, d)
		r.Ops++
	}
	r.Elapsed = time.Since(start)
	runtime.ReadMemStats(&after)
	r.mallocs, r.bytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	r.setCmds(deltaKnown(cmds0, cfg.Commands.settled()))
	r.setReqs(deltaKnown(reqs0, requests(l)))
	if n := r.Ops + r.Errors; n > 0 {
		r.AllocsPerOp = float64(r.mallocs) / float64(n)
		r.BytesPerOp = float64(r.bytes) / float64(n)
	}
	if r.Elapsed > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Elapsed.Seconds()
	}
	r.setLatencies(lat)
	return r
}

// ThroughputConfig shapes the throughput scenario.
type ThroughputConfig struct {
	// Goroutines each run Lock+Release in a loop on a key of their own.
	Goroutines int
	// Warmup is run first and not measured; Duration is measured.
	Warmup, Duration time.Duration
	// Commands, if set, counts the servers' commands around the measured part.
	Commands Counter
	// ServerCPU, if set, reads the servers' CPU time around the measured part
	// (the process's own is read with getrusage).
	ServerCPU CPUMeter
}

// Throughput runs cfg.Goroutines goroutines, each doing Lock+Release on a key
// of its own in a loop, for cfg.Warmup (not measured) then for cfg.Duration,
// and reports the rate of pairs and their latency.
func Throughput(ctx context.Context, l Locker, cfg ThroughputConfig) Result {
	r := newResult(ScenarioThroughput, l)
	if cfg.Warmup > 0 {
		runLoops(ctx, l, cfg.Goroutines, cfg.Warmup, "tp", nil)
	}
	per := make([][]time.Duration, cfg.Goroutines)
	errs := make([]error, cfg.Goroutines)
	nerr := make([]int, cfg.Goroutines)
	cmds0 := cfg.Commands.count()
	client0, server0 := processCPU(), cfg.ServerCPU.read()
	start := time.Now()
	runLoops(ctx, l, cfg.Goroutines, cfg.Duration, "tp", func(g int, lat time.Duration, err error) {
		if err != nil {
			if errs[g] == nil {
				errs[g] = err
			}
			nerr[g]++
			return
		}
		per[g] = append(per[g], lat)
	})
	r.Elapsed = time.Since(start)
	client1, server1 := processCPU(), cfg.ServerCPU.read()
	cmds1 := cfg.Commands.count()
	var all []time.Duration
	for g := range per {
		all = append(all, per[g]...)
		r.Errors += nerr[g]
		if r.FirstErr == nil && errs[g] != nil {
			r.FirstErr = errs[g]
		}
	}
	r.Ops = len(all)
	r.OpsPerSec = float64(r.Ops) / r.Elapsed.Seconds()
	r.setCmds(deltaKnown(cmds0, cmds1))
	r.setCPU(deltaKnown(client0, client1), deltaKnown(server0, server1))
	r.setLatencies(all)
	return r
}

// runLoops runs goroutines loops of Lock+Release on keys prefix:g for d; each
// loop reports to record (if not nil), which must only touch slot g.
func runLoops(ctx context.Context, l Locker, goroutines int, d time.Duration, prefix string, record func(g int, lat time.Duration, err error)) {
	end := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s:%d", prefix, g)
			for ctx.Err() == nil && time.Now().Before(end) {
				t0 := time.Now()
				err := lockRelease(ctx, l, key)
				if record != nil {
					record(g, time.Since(t0), err)
				}
			}
		}()
	}
	wg.Wait()
}

// ContendedConfig shapes the contended scenarios.
type ContendedConfig struct {
	// Goroutines contend for one key. With several lockers (ContendedClients)
	// each goroutine has a locker of its own and this field is ignored.
	Goroutines int
	// Duration of the run.
	Duration time.Duration
	// Hold is how long a goroutine keeps the lock.
	Hold time.Duration
	// Commands, if set, counts the servers' commands over the run.
	Commands Counter
}

// Contended runs cfg.Goroutines goroutines on one shared key, all through one
// locker. Each, in a loop, calls Lock (retrying with the library's own
// policy), holds the lock for cfg.Hold, releases it, and waits until another
// goroutine has taken it before asking again: every release is thus handed to
// a contender that was already waiting, and the releaser never competes for
// its own lock. It reports the handoff latency (from the moment a holder
// starts releasing to the moment the next holder's Lock returns),
// acquisitions per second, and fairness (fewest acquisitions of one goroutine
// divided by the most).
func Contended(ctx context.Context, l Locker, cfg ContendedConfig) Result {
	lockers := make([]Locker, cfg.Goroutines)
	for g := range lockers {
		lockers[g] = l
	}
	return contend(ctx, ScenarioContended, lockers, cfg)
}

// ContendedClients is Contended with one goroutine per locker: separate
// clients of one library, as separate services would be, contending for one
// key. Their waiters cannot queue in-process; only the library's waking and
// retrying decide who gets the lock next.
func ContendedClients(ctx context.Context, scenario string, lockers []Locker, cfg ContendedConfig) Result {
	return contend(ctx, scenario, lockers, cfg)
}

// handoffs records the acquisitions of a contended run.
type handoffs struct {
	mu       sync.Mutex
	r        *Result
	holders  int
	relStart time.Time
	pending  bool          // a release started and nobody acquired since
	taken    chan struct{} // closed at the next acquisition
	lat      []time.Duration
	counts   []int
}

// acquired records goroutine g's acquisition at now.
func (h *handoffs) acquired(g int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holders++
	if h.holders > 1 {
		h.r.Overlaps++
	}
	if h.pending {
		h.lat = append(h.lat, now.Sub(h.relStart))
	}
	h.pending = false
	h.counts[g]++
	close(h.taken)
	h.taken = make(chan struct{})
}

// releasing records that a holder starts releasing; the returned channel is
// closed at the next acquisition.
func (h *handoffs) releasing() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holders--
	h.relStart, h.pending = time.Now(), true
	return h.taken
}

func (h *handoffs) fail(err error) {
	h.mu.Lock()
	h.r.fail(err)
	h.mu.Unlock()
}

// contend runs one goroutine per entry of lockers on one shared key (see
// Contended).
func contend(ctx context.Context, scenario string, lockers []Locker, cfg ContendedConfig) Result {
	r := newResult(scenario, lockers[0])
	key := "contended"
	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	h := &handoffs{r: &r, taken: make(chan struct{}), counts: make([]int, len(lockers))}
	cmds0, reqs0 := cfg.Commands.count(), requests(lockers...)
	start := time.Now()
	var wg sync.WaitGroup
	for g, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				held, err := l.Lock(lctx, key)
				if err != nil {
					if lctx.Err() == nil {
						h.fail(err)
					}
					continue
				}
				h.acquired(g, time.Now())
				sleep(cfg.Hold)
				next := h.releasing()
				if err := held.Release(ctx); err != nil {
					h.fail(fmt.Errorf("release: %w", err))
				}
				select { // let a waiting contender take it
				case <-next:
				case <-lctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	cmds1, reqs1 := cfg.Commands.count(), requests(lockers...)
	for _, c := range h.counts {
		r.Ops += c
	}
	r.setCmds(deltaKnown(cmds0, cmds1))
	r.setReqs(deltaKnown(reqs0, reqs1))
	r.setFairness(h.counts)
	r.OpsPerSec = float64(r.Ops) / r.Elapsed.Seconds()
	r.setLatencies(h.lat)
	return r
}

// processCPU returns the CPU time (user + system) used by this process, or -1.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}
