package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/quorum"
)

// The semaphore designs the semaphore scenario compares (docs/semaphore.md).
const (
	// DesignSlots is design (b), the one redlock ships: n permit slots, each
	// a lock granted by a majority (redlock.Semaphore).
	DesignSlots = "slots (b)"
	// DesignCounting is design (a): a container of at most n holders on
	// every node, a permit needing quorum.Counting(n, N) of them
	// (CountingSemaphore). At N=1 it is a single-node Redisson-style
	// permit-expirable semaphore.
	DesignCounting = "counting (a)"
)

// Semaphorer is one semaphore design under measurement.
type Semaphorer interface {
	// Acquire waits for a permit until ctx ends.
	Acquire(ctx context.Context) (Held, error)
	Design() string
	N() int
	Permits() int
	// Tolerance is how many nodes may fail while permits are still granted.
	Tolerance() int
	Close() error
}

// SlotSemaphore is redlock.Semaphore (design b) as a Semaphorer.
type SlotSemaphore struct {
	C *redlock.Client
	S *redlock.Semaphore
	n int
}

// NewSlotSemaphore returns a redlock.Semaphore of permits permits called name
// over the servers at urls (any N: AllowNoFaultTolerance is given).
func NewSlotSemaphore(urls []string, name string, permits int) (*SlotSemaphore, error) {
	c, err := redlock.Dial(urls)
	if err != nil {
		return nil, err
	}
	s, err := c.Semaphore(name, permits, redlock.AllowNoFaultTolerance())
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &SlotSemaphore{C: c, S: s, n: len(urls)}, nil
}

func (s *SlotSemaphore) Acquire(ctx context.Context) (Held, error) {
	p, err := s.S.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return p, nil
}
func (s *SlotSemaphore) Design() string { return DesignSlots }
func (s *SlotSemaphore) N() int         { return s.n }
func (s *SlotSemaphore) Permits() int   { return s.S.Permits() }
func (s *SlotSemaphore) Tolerance() int { return s.n - quorum.Majority(s.n) }
func (s *SlotSemaphore) Close() error   { return s.C.Close() }

// The counting container's scripts (design a). KEYS[1] is the container, a
// sorted set of permit tokens scored by their expiry in ms of the node's own
// clock; expired entries are purged on every call. The container's own
// expiry is only ever extended, never shortened: a later holder with a
// shorter TTL must not cut the container's life under earlier holders.
const (
	// ARGV token, TTL ms, permits. Returns 1 when granted (or held already).
	countingAcquireSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if pttl == -2 or (pttl >= 0 and pttl < ttl) then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`
	// ARGV token, "1" to notify waiters. Returns 1 when the token was held.
	countingReleaseSrc = `
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then redis.pcall('PUBLISH', KEYS[1], 'released') end
return n
`
	// ARGV token, TTL ms. Returns 1 when the unexpired token was extended.
	countingExtendSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and pttl < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`
)

var (
	countingAcquire = redis.NewScript(1, countingAcquireSrc)
	countingRelease = redis.NewScript(1, countingReleaseSrc)
	countingExtend  = redis.NewScript(1, countingExtendSrc)
)

// CountingSemaphore is design (a), a prototype for the measurement (not part
// of the library): every node admits at most Permits holders in a container,
// and a permit needs Q = quorum.Counting(permits, N) of them within its
// validity (TTL − elapsed − drift), else its partial grants are released.
// Waiters are woken by the releases' notifications (once Q nodes notified
// one, or 2 ms after the first did) and by this process's releases, and
// make an attempt every 125 to 250 ms in case one was lost, as
// redlock.Semaphore does.
type CountingSemaphore struct {
	pools   []*redis.Pool
	watch   []*node.Redis // release notifications
	key     string
	permits int
	q       int
	ttl     time.Duration
	timeout time.Duration

	wake chan struct{} // a token per release heard (buffered)

	mu    sync.Mutex
	noted uint64 // nodes that notified a release since the last wake-up (N ≤ 64)
	late  *time.Timer
	stops []func()
	done  chan struct{}
}

// NewCountingSemaphore returns a counting semaphore (design a) of permits
// permits called name over the servers at addrs (host:port), with leases of
// ttl. It refuses a combination without fault tolerance unless allowNone.
func NewCountingSemaphore(addrs []string, name string, permits int, ttl time.Duration, allowNone bool) (*CountingSemaphore, error) {
	n := len(addrs)
	if n > 64 {
		return nil, fmt.Errorf("bench: %d nodes: at most 64", n)
	}
	q := quorum.Counting(permits, n)
	if q == 0 {
		return nil, fmt.Errorf("bench: %d permits over %d nodes", permits, n)
	}
	if n-q == 0 && !allowNone {
		return nil, fmt.Errorf("bench: counting semaphore of %d permits over %d nodes needs %d of %d nodes: no fault tolerance", permits, n, q, n)
	}
	s := &CountingSemaphore{key: "csem:{" + name + "}", permits: permits, q: q, ttl: ttl, timeout: 500 * time.Millisecond,
		wake: make(chan struct{}, permits+n), done: make(chan struct{})}
	for _, addr := range addrs {
		s.pools = append(s.pools, &redis.Pool{MaxIdle: 64, DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr)
		}})
		w, err := node.Dial("redis://" + addr)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.watch = append(s.watch, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for j, w := range s.watch {
		ch, stop, err := w.Watch(ctx, s.key)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.stops = append(s.stops, stop)
		go func() {
			for {
				select {
				case <-ch:
					s.heard(j)
				case <-s.done:
					return
				}
			}
		}()
	}
	return s, nil
}

// heard notes node j's release notification.
func (s *CountingSemaphore) heard(j int) {
	s.mu.Lock()
	s.noted |= 1 << j
	if bits.OnesCount64(s.noted) < s.q {
		if s.late == nil {
			s.late = time.AfterFunc(2*time.Millisecond, s.wakeOne)
		} else {
			s.late.Reset(2 * time.Millisecond)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.wakeOne()
}

func (s *CountingSemaphore) wakeOne() {
	s.mu.Lock()
	heard := s.noted != 0
	s.noted = 0
	if s.late != nil {
		s.late.Stop()
	}
	s.mu.Unlock()
	if heard {
		s.poke()
	}
}

func (s *CountingSemaphore) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *CountingSemaphore) Design() string { return DesignCounting }
func (s *CountingSemaphore) N() int         { return len(s.pools) }
func (s *CountingSemaphore) Permits() int   { return s.permits }
func (s *CountingSemaphore) Q() int         { return s.q }
func (s *CountingSemaphore) Tolerance() int { return len(s.pools) - s.q }

// Close stops the notifications and closes the connections.
func (s *CountingSemaphore) Close() error {
	close(s.done)
	for _, stop := range s.stops {
		stop()
	}
	var errs []error
	for _, w := range s.watch {
		errs = append(errs, w.Close())
	}
	for _, p := range s.pools {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// CountingPermit is a permit of a CountingSemaphore.
type CountingPermit struct {
	s     *CountingSemaphore
	token string
	Until time.Time
}

// all runs script on every node in parallel, each bounded by the node
// timeout, and returns how many answered 1.
func (s *CountingSemaphore) all(ctx context.Context, sc *redis.Script, args ...any) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	yes := 0
	for _, p := range s.pools {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			c, err := p.GetContext(cctx)
			if err != nil {
				return
			}
			defer c.Close()
			v, err := redis.Int(sc.DoContext(cctx, c, append([]any{s.key}, args...)...))
			if err == nil && v == 1 {
				mu.Lock()
				yes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return yes
}

// TryAcquire makes one attempt: granted by Q nodes within the validity, or
// released everywhere.
func (s *CountingSemaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*CountingPermit, error) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	start := time.Now()
	yes := s.all(ctx, countingAcquire, token, ttl.Milliseconds(), s.permits)
	if validity := clock.Validity(ttl, time.Since(start), clock.DefaultDriftFactor); yes >= s.q && validity > 0 {
		return &CountingPermit{s: s, token: token, Until: start.Add(ttl - clock.Drift(ttl, clock.DefaultDriftFactor))}, nil
	}
	if yes > 0 {
		// On a context the caller's cancellation cannot cut short.
		s.all(context.WithoutCancel(ctx), countingRelease, token, "0")
	}
	return nil, fmt.Errorf("bench: counting semaphore: %d of %d nodes granted, %d needed: %w", yes, len(s.pools), s.q, redlock.ErrNotAcquired)
}

// Acquire waits for a permit until ctx ends.
func (s *CountingSemaphore) Acquire(ctx context.Context) (Held, error) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		p, err := s.TryAcquire(ctx, s.ttl)
		if err == nil {
			return p, nil
		}
		t.Reset(250*time.Millisecond/2 + mrand.N(250*time.Millisecond/2+1))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		case <-t.C:
		}
	}
}

// Extend renews the permit on the nodes that still hold it: it holds if Q do.
func (p *CountingPermit) Extend(ctx context.Context) error {
	start := time.Now()
	if p.s.all(ctx, countingExtend, p.token, p.s.ttl.Milliseconds()) < p.s.q {
		return redlock.ErrLockLost
	}
	p.Until = start.Add(p.s.ttl - clock.Drift(p.s.ttl, clock.DefaultDriftFactor))
	return nil
}

// Release gives the permit back on every node and wakes a waiter.
func (p *CountingPermit) Release(ctx context.Context) error {
	p.s.all(context.WithoutCancel(ctx), countingRelease, p.token, "1")
	p.s.poke()
	return nil
}

// SemaphoreConfig configures the semaphore scenario.
type SemaphoreConfig struct {
	Goroutines int
	Duration   time.Duration
	Hold       time.Duration
}

// SemaphoreResult is what the semaphore scenario measured.
type SemaphoreResult struct {
	Design            string
	N, Permits, Q     int
	Tolerance         int
	Goroutines        int
	Clients           int
	Acquisitions      int
	Errors            int
	FirstErr          error
	Elapsed           time.Duration
	AcqPerSec         float64
	MostHolders       int // the most holders at once (at most Permits)
	P50Wait, P99Wait  time.Duration
	HolderUtilisation float64 // mean holders / Permits over the run
	// ClientCPU and ServerCPU are the CPU time (user + system) of this
	// process and of the N servers over the run, when RunSemaphore measured
	// them; -1 when unknown, 0 when not measured.
	ClientCPU, ServerCPU time.Duration
	// NotRun reports a cell that RunSemaphore skipped (SemaphoreCell.Runs):
	// only the design, N, permits, Q and Tolerance are filled in.
	NotRun bool
	// Measured is the fault tolerance MeasureTolerance found (the most
	// servers down with which a permit was still granted), or -1 when not
	// measured.
	Measured int
}

// CPUPerAcq returns the CPU time per acquisition of d (ClientCPU or
// ServerCPU), or 0 when unknown.
func (r SemaphoreResult) CPUPerAcq(d time.Duration) time.Duration {
	if d <= 0 || r.Acquisitions == 0 {
		return 0
	}
	return d / time.Duration(r.Acquisitions)
}

// SemaphoreScenario runs cfg.Goroutines goroutines that acquire a permit of
// one semaphore, hold it cfg.Hold and release it, for cfg.Duration, and
// counts the acquisitions and the most holders at once. ss are that
// semaphore as seen by separate clients (one at least, all of one design,
// N and number of permits); goroutine g uses ss[g % len(ss)].
func SemaphoreScenario(ss []Semaphorer, cfg SemaphoreConfig) SemaphoreResult {
	s := ss[0]
	r := SemaphoreResult{Design: s.Design(), N: s.N(), Permits: s.Permits(), Tolerance: s.Tolerance(), Goroutines: cfg.Goroutines, Clients: len(ss), Measured: -1}
	r.Q = s.N() - s.Tolerance()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration)
	defer cancel()
	var mu sync.Mutex
	inside := 0
	var waits []time.Duration
	var held time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		s := ss[g%len(ss)]
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				h, err := s.Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						r.Errors++
						if r.FirstErr == nil {
							r.FirstErr = err
						}
						mu.Unlock()
					}
					continue
				}
				t1 := time.Now()
				mu.Lock()
				inside++
				r.MostHolders = max(r.MostHolders, inside)
				r.Acquisitions++
				waits = append(waits, t1.Sub(t0))
				mu.Unlock()
				time.Sleep(cfg.Hold)
				mu.Lock()
				inside--
				held += time.Since(t1)
				mu.Unlock()
				_ = h.Release(context.Background())
			}
		})
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	r.AcqPerSec = float64(r.Acquisitions) / r.Elapsed.Seconds()
	r.HolderUtilisation = float64(held) / float64(r.Elapsed) / float64(r.Permits)
	if len(waits) > 0 {
		slices.Sort(waits)
		r.P50Wait = waits[len(waits)/2]
		r.P99Wait = waits[len(waits)*99/100]
	}
	return r
}

// SemaphoreCell is one measurement of the semaphore comparison: a design at
// some number of permits over N nodes.
type SemaphoreCell struct {
	Design     string
	Permits, N int
}

// Q returns how many nodes a permit needs: a majority for the slots, or
// quorum.Counting(Permits, N) for the counting design.
func (c SemaphoreCell) Q() int {
	if c.Design == DesignSlots {
		return quorum.Majority(c.N)
	}
	return quorum.Counting(c.Permits, c.N)
}

// Tolerance returns how many nodes may fail while permits are still granted
// (N − Q), as SlotSemaphore.Tolerance and CountingSemaphore.Tolerance do.
func (c SemaphoreCell) Tolerance() int { return c.N - c.Q() }

// Runs reports whether the cell is measured: the slots design always; the
// counting design at N=1, where it is the single-node Redisson-style
// baseline, and where it tolerates a failed node (none at N=3 for n ≥ 2,
// at N=5 for n ≥ 4, at N=7 for n ≥ 6).
func (c SemaphoreCell) Runs() bool {
	return c.Design == DesignSlots || c.N == 1 || c.Tolerance() > 0
}

// SemaphoreCells returns, for every number of permits and then of nodes, the
// slots cell and the counting cell, in that order.
func SemaphoreCells(permits, nodes []int) []SemaphoreCell {
	var out []SemaphoreCell
	for _, n := range permits {
		for _, N := range nodes {
			out = append(out, SemaphoreCell{DesignSlots, n, N}, SemaphoreCell{DesignCounting, n, N})
		}
	}
	return out
}

// SemaphoreRun configures RunSemaphore.
type SemaphoreRun struct {
	// Cluster holds at least N servers; a cell at N uses the first N.
	Cluster *Cluster
	// Duration and Hold are those of SemaphoreConfig.
	Duration, Hold time.Duration
	// PerPermit goroutines contend per permit, at least 4 in all.
	PerPermit int
	// Clients are separate clients (each its own connections and semaphore
	// object) sharing the goroutines; at least 1.
	Clients int
	// ToleranceWait, when positive, has RunSemaphore measure each cell's
	// fault tolerance after its run (MeasureTolerance, waiting this long
	// for a permit with each number of servers down).
	ToleranceWait time.Duration
}

// Goroutines returns the goroutines of a cell of permits permits.
func (cfg SemaphoreRun) Goroutines(permits int) int { return max(4, cfg.PerPermit*permits) }

// RunSemaphore empties the servers, then measures cell on fresh semaphores
// called name (SemaphoreScenario) with the CPU time of this process and of
// the servers; a cell that does not run (SemaphoreCell.Runs) is returned as
// NotRun without touching the servers. Permits of the counting design are
// leased for TTL. A failed Close counts as an error of the result; more
// holders at once than permits is an error of the call.
func RunSemaphore(ctx context.Context, cfg SemaphoreRun, cell SemaphoreCell, name string) (SemaphoreResult, error) {
	if !cell.Runs() {
		return SemaphoreResult{Design: cell.Design, N: cell.N, Permits: cell.Permits, Q: cell.Q(), Tolerance: cell.Tolerance(), NotRun: true, Measured: -1}, nil
	}
	if err := ctx.Err(); err != nil {
		return SemaphoreResult{}, err
	}
	if cell.N > len(cfg.Cluster.Servers) {
		return SemaphoreResult{}, fmt.Errorf("bench: semaphore at N=%d over %d servers", cell.N, len(cfg.Cluster.Servers))
	}
	if err := cfg.Cluster.Flush(); err != nil {
		return SemaphoreResult{}, err
	}
	open := func() (Semaphorer, error) {
		if cell.Design == DesignSlots {
			return NewSlotSemaphore(cfg.Cluster.URLs(cell.N), name, cell.Permits)
		}
		return NewCountingSemaphore(cfg.Cluster.Addrs(cell.N), name, cell.Permits, TTL, true)
	}
	var ss []Semaphorer
	closeAll := func() error {
		var errs []error
		for _, s := range ss {
			errs = append(errs, s.Close())
		}
		return errors.Join(errs...)
	}
	for range max(1, cfg.Clients) {
		s, err := open()
		if err != nil {
			return SemaphoreResult{}, errors.Join(err, closeAll())
		}
		ss = append(ss, s)
	}
	serverCPU := CPUMeter(func() (time.Duration, error) { return cfg.Cluster.CPUTime(cell.N) })
	client0, server0 := processCPU(), serverCPU.read()
	r := SemaphoreScenario(ss, SemaphoreConfig{Goroutines: cfg.Goroutines(cell.Permits), Duration: cfg.Duration, Hold: cfg.Hold})
	r.ClientCPU, r.ServerCPU = deltaKnown(client0, processCPU()), deltaKnown(server0, serverCPU.read())
	if err := closeAll(); err != nil { // counted, as a failed call would be
		r.Errors++
		if r.FirstErr == nil {
			r.FirstErr = fmt.Errorf("close: %w", err)
		}
	}
	if r.MostHolders > cell.Permits {
		return r, fmt.Errorf("bench: %s, n=%d, N=%d: %d holders at once", cell.Design, cell.Permits, cell.N, r.MostHolders)
	}
	if cfg.ToleranceWait > 0 {
		if err := cfg.Cluster.Flush(); err != nil {
			return r, err
		}
		s, err := open()
		if err != nil {
			return r, err
		}
		r.Measured, err = MeasureTolerance(ctx, s, cfg.Cluster.Servers[:cell.N], cfg.ToleranceWait)
		err = errors.Join(err, s.Close())
		if err != nil {
			return r, err
		}
		if r.Measured != r.Tolerance {
			return r, fmt.Errorf("bench: %s, n=%d, N=%d: permits granted with up to %d servers down, N − q = %d", cell.Design, cell.Permits, cell.N, r.Measured, r.Tolerance)
		}
	}
	return r, nil
}

// MeasureTolerance finds by experiment how many of servers (those s runs
// over) may be down while s still grants a permit: for f = 0, 1, … it kills
// one more server and waits up to wait for a permit (released at once); it
// returns the last f with which a permit came. The killed servers are
// restarted, empty, before it returns. For a sound design the result is
// s.Tolerance(): a permit with more servers down would mean its quorum is
// smaller than it claims, none with fewer that it is not available when it
// should be.
func MeasureTolerance(ctx context.Context, s Semaphorer, servers []*Server, wait time.Duration) (tolerates int, err error) {
	killed := 0
	defer func() {
		for _, srv := range servers[:killed] {
			err = errors.Join(err, srv.Restart())
		}
	}()
	tolerates = -1
	for f := 0; f <= len(servers); f++ {
		if f > 0 {
			servers[f-1].Kill()
			killed = f
		}
		actx, cancel := context.WithTimeout(ctx, wait)
		p, aerr := s.Acquire(actx)
		cancel()
		if err := ctx.Err(); err != nil {
			return tolerates, err
		}
		if aerr != nil {
			return tolerates, nil
		}
		tolerates = f
		rctx, cancel := context.WithTimeout(ctx, wait)
		_ = p.Release(rctx) // a release on a majority of the live servers; the rest expires
		cancel()
	}
	return tolerates, nil
}
