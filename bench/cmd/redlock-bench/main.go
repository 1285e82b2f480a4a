// Command redlock-bench runs every benchmark scenario for this library (N=1, 3,
// 5), go-redsync v4 (N=1, 3, 5) and bsm/redislock (N=1) in one run, on the same
// five redis-server processes it starts on loopback, and writes the results as
// docs/benchmarks.md (tables) and docs/benchmarks.svg (chart).
//
// Run it from the bench directory:
//
//	cd bench && go run ./cmd/redlock-bench
//
// Scenarios: sequential Lock+Release latency and allocations; throughput with 32
// goroutines on keys of their own; handoff latency and fairness with 8
// goroutines on one key; sequential latency at N=5 with one node paused
// (SIGSTOP) and with one killed (SIGKILL). Then the section "Beyond a mutex"
// (issue 27): leader election hand-over (Resign → the next Campaign
// returning) at N=1, 3, 5 beside a plain lock's; semaphore acquisitions/s and
// fault tolerance, the shipped slots design against the counting-quorum
// design where it tolerates a failed node (n=2, 8, 64 permits at N=3, 5, 7)
// and against the single-node Redisson-style baseline at N=1 (the cells of
// bench.SemaphoreCells, as cmd/redlock-sem-bench runs them; two more
// redis-server processes are started for N=7); uncontended RLock, WLock and
// Lock at N=1, 3, 5. The defaults take about two and a half minutes on two
// cores, half a minute of it for the new section; -phases
// election,semaphore,rwlock runs that section alone, and -election-duration,
// -sem-duration and -rw-iters shorten it.
//
// The clients-adapters phase, run only when -phases names it, compares redlock
// over its own redigo node with redlock over the goredis and rueidis adapter
// nodes (issue 23): separate clients on one key, medians of -rounds runs of
// -clients-duration each, at every N of -adapters-nodes (default 5):
//
//	cd bench && go run ./cmd/redlock-bench -phases clients-adapters -docs '' -rounds 5
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/bench"
)

type flags struct {
	redisServer     string
	docs            string
	iters           int
	warmup          int
	maxSeq          time.Duration
	duration        time.Duration
	tpWarmup        time.Duration
	goroutines      int
	contended       time.Duration
	contenders      int
	hold            time.Duration
	peerPausedIters int
	cpuProfile      string
	profileLib      string
	profileN        int
	profileOnly     bool
	rounds          int
	clients         int
	clientsDuration time.Duration
	clientsHold     time.Duration
	phases          string
	adapterNodes    string
	adapterNs       []int // adapterNodes, parsed
	// The scaling phase (issue 23): clients per N, each run's length, the chart.
	scaling         string
	scalingCells    map[int][]int // scaling, parsed
	scalingDuration time.Duration
	scalingSVG      string
	// The "Beyond a mutex" phases (election, semaphore, rwlock).
	electionDuration   time.Duration
	electionCandidates int
	semDuration        time.Duration
	semHold            time.Duration
	semPerPermit       int
	rwIters            int
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("redlock-bench: ")
	var f flags
	flag.StringVar(&f.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&f.docs, "docs", "../docs", "directory to write benchmarks.md and benchmarks.svg to (empty: do not write)")
	flag.IntVar(&f.iters, "iters", 2000, "measured Lock+Release pairs per sequential, paused and killed run")
	flag.IntVar(&f.warmup, "warmup", 200, "unmeasured Lock+Release pairs before each sequential run")
	flag.DurationVar(&f.maxSeq, "max-seq", 15*time.Second, "time cap of one sequential run")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "measured time of each throughput run")
	flag.DurationVar(&f.tpWarmup, "tp-warmup", 300*time.Millisecond, "unmeasured time before each throughput run")
	flag.IntVar(&f.goroutines, "goroutines", 32, "goroutines of the throughput scenario")
	flag.DurationVar(&f.contended, "contended", 3*time.Second, "time of each contended run")
	flag.IntVar(&f.contenders, "contenders", 8, "goroutines of the contended scenario")
	flag.DurationVar(&f.hold, "hold", time.Millisecond, "how long a contender holds the lock")
	flag.IntVar(&f.clients, "clients", 8, "separate clients of the separate-clients scenarios")
	flag.DurationVar(&f.clientsDuration, "clients-duration", 3*time.Second, "time of each separate-clients run")
	flag.DurationVar(&f.clientsHold, "clients-hold", 0, "how long a separate client holds the lock")
	flag.StringVar(&f.phases, "phases", "", "comma-separated phases to run (default all but clients-adapters): sequential,throughput,contended,clients,clients-fair,clients-paused,paused,killed,election,semaphore,rwlock,clients-adapters")
	flag.StringVar(&f.adapterNodes, "adapters-nodes", "5", "comma-separated N of the clients-adapters phase (1, 3 or 5; each adds 3 × -rounds × -clients-duration)")
	flag.StringVar(&f.scaling, "scaling", "1:8,64,256,1000 3:8,64,300 5:8,64,300", "the scaling phase's separate clients per N (N:clients,... separated by spaces); each cell adds -rounds × -scaling-duration")
	flag.DurationVar(&f.scalingDuration, "scaling-duration", 10*time.Second, "time of each run of the scaling phase")
	flag.StringVar(&f.scalingSVG, "scaling-svg", "", "file to draw the scaling phase's chart to (empty: none)")
	flag.DurationVar(&f.electionDuration, "election-duration", 1500*time.Millisecond, "time of the election hand-over runs, and of their plain-lock reference, at each N (in all rounds)")
	flag.IntVar(&f.electionCandidates, "election-candidates", 4, "separate clients campaigning in the election phase")
	flag.DurationVar(&f.semDuration, "sem-duration", time.Second, "measured time of each semaphore cell (17 cells run: n=2, 8, 64 at N=1, 3, 5, 7)")
	flag.DurationVar(&f.semHold, "sem-hold", time.Millisecond, "how long a goroutine holds its permit in the semaphore phase")
	flag.IntVar(&f.semPerPermit, "sem-contenders", 2, "goroutines per permit in the semaphore phase (at least 4 in all)")
	flag.IntVar(&f.rwIters, "rw-iters", 600, "measured acquire+release pairs per kind of lock (Lock, RLock, WLock) and N in the rwlock phase (in all rounds)")
	flag.IntVar(&f.peerPausedIters, "peer-paused-iters", 5, "iteration cap of go-redsync with a paused node (each takes about 2s)")
	flag.IntVar(&f.rounds, "rounds", 5, "rounds of the sequential, throughput and contended scenarios, interleaved across libraries")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "after the benchmarks, profile an extra (unreported) throughput run at N=-profile-n and write the CPU profile to this file")
	flag.BoolVar(&f.profileOnly, "profile-only", false, "with -cpuprofile: skip the benchmarks and the report, run only the profiled run")
	flag.IntVar(&f.profileN, "profile-n", 5, "nodes of the -cpuprofile run: 1, 3 or 5")
	flag.StringVar(&f.profileLib, "profile-lib", bench.LibRedlock, "library of the -cpuprofile run: "+bench.LibRedlock+" or "+bench.LibRedsync)
	flag.Parse()
	adapterNs, err := parseNodes(f.adapterNodes)
	if err != nil {
		log.Print(err)
	}
	scalingCells, serr := parseScaling(f.scaling)
	if serr != nil {
		log.Print(serr)
		err = serr
	}
	f.scalingCells = scalingCells
	if flag.NArg() > 0 || err != nil || f.scalingDuration <= 0 || f.rounds < 1 || f.iters < 1 || f.goroutines < 1 || f.contenders < 2 || f.clients < 2 || f.clientsDuration <= 0 || f.duration <= 0 || f.contended <= 0 ||
		f.electionDuration <= 0 || f.electionCandidates < 2 || f.semDuration <= 0 || f.semPerPermit < 1 || f.rwIters < 1 {
		flag.Usage()
		os.Exit(2)
	}
	f.adapterNs = adapterNs
	if err := run(f); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

type config struct {
	lib string
	n   int
}

var configs = []config{
	{bench.LibRedlock, 1}, {bench.LibRedsync, 1}, {bench.LibRedislock, 1},
	{bench.LibRedlock, 3}, {bench.LibRedsync, 3},
	{bench.LibRedlock, 5}, {bench.LibRedsync, 5},
}

// runner holds what every phase of a run shares.
type runner struct {
	f   flags
	ctx context.Context
	cl  *bench.Cluster
	rep *bench.Report
	// seq is a sequential run's configuration, seqRound one round's of it.
	seq, seqRound bench.SequentialConfig
	// adapterNotes are the clients-adapters phase's summary, for the report's
	// notes (its results are not in the tables).
	adapterNotes []string
	// scalingNotes are the scaling phase's summary, likewise.
	scalingNotes []string
}

func run(f flags) error {
	began := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &bench.Report{Date: commandOutput("date"), Command: commandLine(), Core: coreVersion("..")}
	loadBefore := loadAvg()
	cl, err := bench.StartCluster(f.redisServer, 5)
	if err != nil {
		return err
	}
	defer cl.Close()
	rep.Machine = machine(cl)
	log.Printf("5 redis-server %s on %s; %s", rep.Machine.RedisVersion, strings.Join(cl.Addrs(5), " "), rep.Machine.GoVersion)

	if f.profileOnly {
		if f.cpuProfile == "" {
			return errors.New("-profile-only needs -cpuprofile")
		}
		return profiled(ctx, cl, f)
	}
	r := &runner{f: f, ctx: ctx, cl: cl, rep: rep}
	r.seq = bench.SequentialConfig{Warmup: f.warmup, Iterations: f.iters, MaxTime: f.maxSeq, OpTimeout: 10 * time.Second}
	r.seqRound = r.seq
	r.seqRound.Iterations, r.seqRound.MaxTime = ceilDiv(f.iters, f.rounds), f.maxSeq/time.Duration(f.rounds)
	phases := []struct {
		name     string
		run      func() error
		optional bool // run only when -phases names it
	}{{"sequential", r.sequential, false}, {"throughput", r.throughput, false}, {"contended", r.contended, false}, {"clients", r.clients, false},
		{"clients-fair", r.clientsFair, false}, {"clients-paused", r.clientsPaused, false}, {"paused", r.paused, false}, {"killed", r.killed, false},
		{"election", r.election, false}, {"semaphore", r.semaphore, false}, {"rwlock", r.rwlock, false},
		{"clients-adapters", r.clientsAdapters, true}, {"scaling", r.scalingPhase, true}}
	for _, p := range phases {
		if !f.runs(p.name, p.optional) {
			continue
		}
		if err := p.run(); err != nil {
			return err
		}
	}
	if f.cpuProfile != "" {
		if err := profiled(ctx, cl, f); err != nil {
			return err
		}
	}
	rep.Took = time.Since(began)
	if loadBefore != "" {
		rep.Load = fmt.Sprintf("1/5/15-minute load average %s before the run, %s after (%d CPUs; the benchmark itself keeps about 2 busy)",
			loadBefore, loadAvg(), rep.Machine.CPUs)
	}
	rep.Settings = settings(f)
	rep.Notes = append(notes(rep, f), r.adapterNotes...)
	rep.Notes = append(rep.Notes, r.scalingNotes...)
	if rep.Beyond != nil {
		rep.Notes = append(rep.Notes, rep.Beyond.Notes()...)
	}
	for _, t := range rep.Targets() {
		log.Printf("target: %s: %s (met: %v)", t.Name, t.Measured, t.Met)
	}
	return write(rep, f.docs)
}

// runs reports whether phase runs: named by -phases, or by default when it
// is not optional.
func (f flags) runs(phase string, optional bool) bool {
	if f.phases == "" {
		return !optional
	}
	return slices.Contains(strings.Split(f.phases, ","), phase)
}

// lockers returns size fresh lockers of lib over the first n servers, after
// emptying the servers.
func (r *runner) lockers(lib string, n, size int) ([]bench.Locker, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	if err := r.cl.Flush(); err != nil {
		return nil, err
	}
	var ls []bench.Locker
	for range size {
		l, err := bench.NewLocker(lib, r.cl.Addrs(n))
		if err != nil {
			closeAll(ls)
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func closeAll(ls []bench.Locker) {
	for _, l := range ls {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil {
			log.Printf("%s N=%d: close: %v", l.Lib(), l.N(), err)
		}
	}
}

// once runs fn on size fresh lockers of lib over the first n servers.
func (r *runner) once(lib string, n, size int, fn func([]bench.Locker) bench.Result) (bench.Result, error) {
	ls, err := r.lockers(lib, n, size)
	if err != nil {
		return bench.Result{}, err
	}
	defer closeAll(ls)
	runtime.GC()
	return fn(ls), nil
}

// add logs results and adds them to the report.
func (r *runner) add(results ...bench.Result) {
	for _, res := range results {
		logResult(res)
		r.rep.Results = append(r.rep.Results, res)
	}
}

// measure runs fn once on a fresh locker and reports the result.
func (r *runner) measure(lib string, n int, fn func(bench.Locker) bench.Result) error {
	res, err := r.once(lib, n, 1, func(ls []bench.Locker) bench.Result { return fn(ls[0]) })
	if err != nil {
		return err
	}
	r.add(res)
	return nil
}

// interleaved runs fn for every configuration, f.rounds times in turn on the
// same lockers (size of them per configuration), and merges each
// configuration's rounds: a drift of the machine during the run then weighs on
// every library alike.
func (r *runner) interleaved(size int, fn func(ls []bench.Locker) bench.Result) error {
	lockers := make([][]bench.Locker, len(configs))
	defer func() {
		for _, ls := range lockers {
			closeAll(ls)
		}
	}()
	for i, c := range configs {
		for range size {
			l, err := bench.NewLocker(c.lib, r.cl.Addrs(c.n))
			if err != nil {
				return err
			}
			lockers[i] = append(lockers[i], l)
		}
	}
	parts := make([][]bench.Result, len(configs))
	for round := 0; round < r.f.rounds; round++ {
		for i, ls := range lockers {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if err := r.cl.Flush(); err != nil {
				return err
			}
			runtime.GC()
			parts[i] = append(parts[i], fn(ls))
		}
	}
	for i := range configs {
		r.add(bench.Merge(parts[i]...))
	}
	return nil
}

// counter counts the commands of the servers l runs on.
func (r *runner) counter(l bench.Locker) bench.Counter {
	return func() (int64, error) { return r.cl.Commands(l.N()) }
}

// sequentialOn returns a sequential run of scenario with cfg.
func (r *runner) sequentialOn(scenario string, cfg bench.SequentialConfig) func(bench.Locker) bench.Result {
	return func(l bench.Locker) bench.Result {
		cfg.Commands = r.counter(l)
		return bench.Sequential(r.ctx, l, scenario, cfg)
	}
}

func (r *runner) sequential() error {
	run := r.sequentialOn(bench.ScenarioSequential, r.seqRound)
	return r.interleaved(1, func(ls []bench.Locker) bench.Result { return run(ls[0]) })
}

func (r *runner) throughput() error {
	warmed := map[bench.Locker]bool{}
	return r.interleaved(1, func(ls []bench.Locker) bench.Result {
		l := ls[0]
		warmup := r.f.tpWarmup / 4
		if !warmed[l] {
			warmup, warmed[l] = r.f.tpWarmup, true
		}
		return bench.Throughput(r.ctx, l, bench.ThroughputConfig{Goroutines: r.f.goroutines, Warmup: warmup,
			Duration: r.f.duration / time.Duration(r.f.rounds), Commands: r.counter(l),
			ServerCPU: func() (time.Duration, error) { return r.cl.CPUTime(l.N()) }})
	})
}

func (r *runner) contended() error {
	cc := bench.ContendedConfig{Goroutines: r.f.contenders, Duration: r.f.contended / time.Duration(r.f.rounds), Hold: r.f.hold}
	return r.interleaved(1, func(ls []bench.Locker) bench.Result {
		cc.Commands = r.counter(ls[0])
		return bench.Contended(r.ctx, ls[0], cc)
	})
}

// clientsConfig is the configuration of one round of the separate-clients
// scenarios.
func (r *runner) clientsConfig(l bench.Locker) bench.ContendedConfig {
	return bench.ContendedConfig{Duration: r.f.clientsDuration / time.Duration(r.f.rounds), Hold: r.f.clientsHold, Commands: r.counter(l)}
}

// clients runs f.clients separate clients of every library on one key.
func (r *runner) clients() error {
	return r.interleaved(r.f.clients, func(ls []bench.Locker) bench.Result {
		return bench.ContendedClients(r.ctx, bench.ScenarioClients, ls, r.clientsConfig(ls[0]))
	})
}

// clientsFair runs f.clients separate redlock clients with WithFair on one
// key at N=1, 3, 5, in f.rounds rounds.
func (r *runner) clientsFair() error {
	parts := map[int][]bench.Result{}
	for round := 0; round < r.f.rounds; round++ {
		for _, n := range []int{1, 3, 5} {
			res, err := r.once(bench.LibRedlockFair, n, r.f.clients, func(ls []bench.Locker) bench.Result {
				return bench.ContendedClients(r.ctx, bench.ScenarioClients, ls, r.clientsConfig(ls[0]))
			})
			if err != nil {
				return err
			}
			parts[n] = append(parts[n], res)
		}
	}
	for _, n := range []int{1, 3, 5} {
		r.add(bench.Merge(parts[n]...))
	}
	return nil
}

// clientsPaused runs separate redlock clients at N=3 in rounds of: healthy,
// then with the third node paused (SIGSTOP).
func (r *runner) clientsPaused() error {
	victim := r.cl.Servers[2]
	var refs, pauses []bench.Result
	for round := 0; round < r.f.rounds; round++ {
		res, err := r.once(bench.LibRedlock, 3, r.f.clients, func(ls []bench.Locker) bench.Result {
			return bench.ContendedClients(r.ctx, bench.ScenarioClientsHealthy, ls, r.clientsConfig(ls[0]))
		})
		if err != nil {
			return err
		}
		refs = append(refs, res)
		if err := victim.Pause(); err != nil {
			return err
		}
		res, err = r.once(bench.LibRedlock, 3, r.f.clients, func(ls []bench.Locker) bench.Result {
			return bench.ContendedClients(r.ctx, bench.ScenarioClientsPaused, ls, r.clientsConfig(ls[0]))
		})
		if err := errors.Join(err, victim.Resume()); err != nil {
			return err
		}
		pauses = append(pauses, res)
	}
	r.add(bench.Merge(refs...), bench.Merge(pauses...))
	return nil
}

// adapterLibs are the libraries of the clients-adapters phase: the core's
// redigo node first (the reference), then the adapter nodes.
var adapterLibs = []string{bench.LibRedlock, bench.LibRedlockGoredis, bench.LibRedlockRueidis}

// clientsAdapters runs f.clients separate clients of redlock over each kind of
// node (the core's redigo node, the goredis and the rueidis adapters) on one
// key, at every N of -adapters-nodes, in f.rounds rounds: each round runs the
// three in turn (starting with a different one each round), each run lasts
// f.clientsDuration on fresh clients. Every run is logged; each library is
// summed up by the medians of its runs (bench.Median), and every adapter is
// compared with the redigo node (bench.CompareAdapter). Its results stay out
// of the report's tables and targets; the summary goes to its notes.
func (r *runner) clientsAdapters() error {
	parts := map[config][]bench.Result{}
	for round := 0; round < r.f.rounds; round++ {
		for _, n := range r.f.adapterNs {
			for i := range adapterLibs {
				lib := adapterLibs[(i+round)%len(adapterLibs)]
				res, err := r.once(lib, n, r.f.clients, func(ls []bench.Locker) bench.Result {
					cc := r.clientsConfig(ls[0])
					cc.Duration = r.f.clientsDuration
					client0, server0 := processCPU(), r.serverCPU(n)
					res := bench.ContendedClients(r.ctx, bench.ScenarioClientsAdapters, ls, cc)
					client1, server1 := processCPU(), r.serverCPU(n)
					if res.Ops > 0 && client0 >= 0 && client1 >= 0 {
						res.ClientCPUPerOp = (client1 - client0) / time.Duration(res.Ops)
					}
					if res.Ops > 0 && server0 >= 0 && server1 >= 0 {
						res.ServerCPUPerOp = (server1 - server0) / time.Duration(res.Ops)
					}
					return res
				})
				if err != nil {
					return err
				}
				logResult(res)
				parts[config{lib, n}] = append(parts[config{lib, n}], res)
			}
		}
	}
	allMet := true
	for _, n := range r.f.adapterNs {
		core := bench.Median(parts[config{bench.LibRedlock, n}]...)
		for _, lib := range adapterLibs {
			m := bench.Median(parts[config{lib, n}]...)
			line := fmt.Sprintf("%s, %s N=%d, medians of %d runs of %v: %.0f acq/s, handoff p50 %s ms, p99 %s ms, fairness %.2f, sent/op %s, cmds/op %s, CPU µs/op client %s + servers %s",
				bench.ScenarioClientsAdapters, lib, n, m.Rounds, r.f.clientsDuration, m.OpsPerSec,
				msText(m.P50), msText(m.P99), m.Fairness, numText(m.ReqsPerOp), numText(m.CmdsPerOp), usText(m.ClientCPUPerOp), usText(m.ServerCPUPerOp))
			if m.Errors > 0 || m.Overlaps > 0 {
				line += fmt.Sprintf(", %d errors (first: %v), %d overlaps", m.Errors, m.FirstErr, m.Overlaps)
			}
			if lib != bench.LibRedlock && core.OpsPerSec > 0 && core.P50 > 0 {
				line += fmt.Sprintf("; ÷ redigo node: acq/s %.2f×, handoff p50 %.2f×", m.OpsPerSec/core.OpsPerSec, float64(m.P50)/float64(core.P50))
				if m.ClientCPUPerOp > 0 && core.ClientCPUPerOp > 0 && m.ServerCPUPerOp > 0 && core.ServerCPUPerOp > 0 {
					line += fmt.Sprintf(", CPU/op client %.2f×, client + servers %.2f×", float64(m.ClientCPUPerOp)/float64(core.ClientCPUPerOp),
						float64(m.ClientCPUPerOp+m.ServerCPUPerOp)/float64(core.ClientCPUPerOp+core.ServerCPUPerOp))
				}
			}
			log.Print(line)
			r.adapterNotes = append(r.adapterNotes, line)
		}
		for _, lib := range adapterLibs[1:] {
			t := bench.CompareAdapter(core, bench.Median(parts[config{lib, n}]...))
			allMet = allMet && t.Known && t.Met
			log.Printf("target: %s: %s (met: %v)", t.Name, t.Measured, t.Known && t.Met)
		}
	}
	t := fmt.Sprintf("adapters within %.0f %% of the redigo node, N=%s (medians of %d runs)", 100*bench.AdapterTolerance, r.f.adapterNodes, r.f.rounds)
	log.Printf("target: %s (met: %v)", t, allMet)
	r.adapterNotes = append(r.adapterNotes, fmt.Sprintf("%s: met: %v", t, allMet))
	return nil
}

// beyond returns the report's "Beyond a mutex" section, made on first use.
func (r *runner) beyond() *bench.Beyond {
	if r.rep.Beyond == nil {
		r.rep.Beyond = &bench.Beyond{Rounds: r.f.rounds}
	}
	return r.rep.Beyond
}

// election runs f.electionCandidates separate candidates for one election
// (bench.ElectionLocker: Campaign, then Resign at once) at N=1, 3, 5, and the
// same clients contending for a plain lock as its reference, in f.rounds
// rounds of f.electionDuration / f.rounds each.
func (r *runner) election() error {
	b := r.beyond()
	b.ElectionCandidates, b.ElectionDuration = r.f.electionCandidates, r.f.electionDuration
	ns := []int{1, 3, 5}
	candidates := map[int][]bench.Locker{}
	defer func() {
		for _, ls := range candidates {
			closeAll(ls)
		}
	}()
	for _, n := range ns {
		for range r.f.electionCandidates {
			l, err := bench.NewElectionLocker(r.cl.Addrs(n))
			if err != nil {
				return err
			}
			candidates[n] = append(candidates[n], l)
		}
	}
	parts := map[string][]bench.Result{}
	for round := 0; round < r.f.rounds; round++ {
		for _, n := range ns {
			ls := candidates[n]
			plain := make([]bench.Locker, len(ls)) // the same clients, taking a plain lock
			for i, l := range ls {
				plain[i] = l.(*bench.ElectionLocker).RedlockLocker
			}
			for _, run := range []struct {
				scenario string
				ls       []bench.Locker
			}{{bench.ScenarioElection, ls}, {bench.ScenarioElectionRef, plain}} {
				if err := r.ctx.Err(); err != nil {
					return err
				}
				if err := r.cl.Flush(); err != nil {
					return err
				}
				runtime.GC()
				cc := bench.ContendedConfig{Duration: r.f.electionDuration / time.Duration(r.f.rounds), Commands: r.counter(ls[0])}
				key := fmt.Sprintf("%s N=%d", run.scenario, n)
				parts[key] = append(parts[key], bench.ContendedClients(r.ctx, run.scenario, run.ls, cc))
			}
		}
	}
	for _, n := range ns {
		el := bench.Merge(parts[fmt.Sprintf("%s N=%d", bench.ScenarioElection, n)]...)
		ref := bench.Merge(parts[fmt.Sprintf("%s N=%d", bench.ScenarioElectionRef, n)]...)
		logResult(el)
		logResult(ref)
		b.Election, b.ElectionRef = append(b.Election, el), append(b.ElectionRef, ref)
	}
	return nil
}

// semaphore runs the semaphore comparison (bench.SemaphoreCells: n=2, 8, 64
// at N=1, 3, 5, 7), each cell once for f.semDuration, on one client; it
// starts the servers N=7 needs beyond the cluster's five.
func (r *runner) semaphore() error {
	b := r.beyond()
	b.SemRun = bench.SemaphoreRun{Cluster: r.cl, Duration: r.f.semDuration, Hold: r.f.semHold, PerPermit: r.f.semPerPermit, Clients: 1}
	if err := r.cl.Grow(r.f.redisServer, 7); err != nil {
		return err
	}
	for i, cell := range bench.SemaphoreCells([]int{2, 8, 64}, []int{1, 3, 5, 7}) {
		res, err := bench.RunSemaphore(r.ctx, b.SemRun, cell, fmt.Sprintf("sem%d", i))
		if err != nil {
			return err
		}
		if !res.NotRun {
			log.Printf("semaphore      %-13s n=%-2d N=%d q=%d tolerates=%d acq/s=%-7.0f wait p50=%v p99=%v most=%d cpu/acq=%v+%v errors=%d",
				res.Design, res.Permits, res.N, res.Q, res.Tolerance, res.AcqPerSec, res.P50Wait.Round(time.Microsecond), res.P99Wait.Round(time.Microsecond),
				res.MostHolders, res.CPUPerAcq(res.ClientCPU), res.CPUPerAcq(res.ServerCPU), res.Errors)
		}
		b.Semaphore = append(b.Semaphore, res)
	}
	b.SemRun.Cluster = nil // not the report's
	return nil
}

// rwlock measures uncontended Lock, RLock and WLock acquire+release pairs
// (bench.RWLocker over one client per N) at N=1, 3, 5, in f.rounds rounds
// that interleave the kinds and N.
func (r *runner) rwlock() error {
	const warmup = 50 // per run
	b := r.beyond()
	b.RWWarmup, b.RWIters = warmup*r.f.rounds, r.f.rwIters
	ns := []int{1, 3, 5}
	clients := map[int]*bench.RedlockLocker{}
	defer func() {
		for _, l := range clients {
			closeAll([]bench.Locker{l})
		}
	}()
	for _, n := range ns {
		l, err := bench.NewRedlock(r.cl.Addrs(n))
		if err != nil {
			return err
		}
		clients[n] = l
	}
	cfg := bench.SequentialConfig{Warmup: warmup, Iterations: ceilDiv(r.f.rwIters, r.f.rounds), MaxTime: r.f.maxSeq / time.Duration(r.f.rounds), OpTimeout: 10 * time.Second}
	parts := map[string][]bench.Result{}
	for round := 0; round < r.f.rounds; round++ {
		for _, n := range ns {
			for _, kind := range bench.RWKinds {
				if err := r.ctx.Err(); err != nil {
					return err
				}
				if err := r.cl.Flush(); err != nil {
					return err
				}
				runtime.GC()
				key := fmt.Sprintf("%s N=%d", kind, n)
				parts[key] = append(parts[key], r.sequentialOn(kind, cfg)(&bench.RWLocker{RedlockLocker: clients[n], Kind: kind}))
			}
		}
	}
	for _, n := range ns {
		for _, kind := range bench.RWKinds {
			res := bench.Merge(parts[fmt.Sprintf("%s N=%d", kind, n)]...)
			logResult(res)
			b.RW = append(b.RW, res)
		}
	}
	return nil
}

// serverCPU returns the CPU time of the first n servers, or -1.
func (r *runner) serverCPU(n int) time.Duration {
	d, err := r.cl.CPUTime(n)
	if err != nil {
		return -1
	}
	return d
}

// processCPU returns the CPU time (user + system) of this process, or -1.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func usText(d time.Duration) string {
	if d <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}

func msText(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func numText(v float64) string {
	if math.IsNaN(v) {
		return "unknown"
	}
	return fmt.Sprintf("%.1f", v)
}

// parseNodes parses -adapters-nodes: distinct N among 1, 3 and 5.
func parseNodes(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || (n != 1 && n != 3 && n != 5) || slices.Contains(ns, n) {
			return nil, fmt.Errorf("-adapters-nodes %q: want distinct N among 1, 3 and 5, comma-separated", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// paused runs sequential Lock+Release at N=5 with the fifth node paused.
// Only the multi-node libraries apply. redlock's paused runs alternate with
// healthy reference runs, so that the ratio compares like with like.
func (r *runner) paused() error {
	victim := r.cl.Servers[4]
	var refs, pauses []bench.Result
	one := func(scenario string) (bench.Result, error) {
		run := r.sequentialOn(scenario, r.seqRound)
		return r.once(bench.LibRedlock, 5, 1, func(ls []bench.Locker) bench.Result { return run(ls[0]) })
	}
	for round := 0; round < r.f.rounds; round++ {
		res, err := one(bench.ScenarioHealthyRef)
		if err != nil {
			return err
		}
		refs = append(refs, res)
		if err := victim.Pause(); err != nil {
			return err
		}
		res, err = one(bench.ScenarioPaused)
		if err := errors.Join(err, victim.Resume()); err != nil {
			return err
		}
		pauses = append(pauses, res)
	}
	r.add(bench.Merge(refs...), bench.Merge(pauses...))
	peerPaused := r.seq
	peerPaused.Warmup, peerPaused.Iterations = 0, r.f.peerPausedIters
	if err := victim.Pause(); err != nil {
		return err
	}
	err := r.measure(bench.LibRedsync, 5, func(l bench.Locker) bench.Result {
		res := r.sequentialOn(bench.ScenarioPaused, peerPaused)(l)
		res.Capped = true
		return res
	})
	return errors.Join(err, victim.Resume())
}

// killed runs sequential Lock+Release at N=5 with the fifth node killed, and
// restarts it.
func (r *runner) killed() error {
	victim := r.cl.Servers[4]
	victim.Kill()
	for _, lib := range []string{bench.LibRedlock, bench.LibRedsync} {
		if err := r.measure(lib, 5, r.sequentialOn(bench.ScenarioKilled, r.seq)); err != nil {
			return err
		}
	}
	return victim.Restart()
}

// write writes the report as benchmarks.md and benchmarks.svg into docs, and
// the README's table (bench.SpliceReadme) into docs/../README.md
// (nothing when docs is empty), keeping the notes written by hand in the
// previous benchmarks.md (bench.KeepNotes).
func write(rep *bench.Report, docs string) error {
	if docs == "" {
		return nil
	}
	var md, svg bytes.Buffer
	if err := bench.WriteMarkdown(&md, rep); err != nil {
		return err
	}
	if err := bench.WriteSVG(&svg, rep); err != nil {
		return err
	}
	old, err := os.ReadFile(filepath.Join(docs, "benchmarks.md"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(filepath.Join(docs, "benchmarks.md"), bench.KeepNotes(old, md.Bytes()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(docs, "benchmarks.svg"), svg.Bytes(), 0o644); err != nil {
		return err
	}
	log.Printf("wrote %s and %s in %s", filepath.Join(docs, "benchmarks.md"), filepath.Join(docs, "benchmarks.svg"), rep.Took.Round(time.Second))
	// The README's small table, from the same run: only from a run that
	// measured the sequential scenario (not a run of some phases).
	if _, ok := rep.Find(bench.ScenarioSequential, bench.LibRedlock, 1); !ok {
		return nil
	}
	readme := filepath.Join(docs, "..", "README.md")
	old, err = os.ReadFile(readme)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	out, ok := bench.SpliceReadme(old, rep)
	if !ok {
		log.Printf("%s has no %q: its table is not written", readme, bench.ReadmeBegin)
		return nil
	}
	if err := os.WriteFile(readme, out, 0o644); err != nil {
		return err
	}
	log.Printf("wrote the table of %s", readme)
	return nil
}

// profiled runs the throughput scenario of f.profileLib at N=f.profileN under the CPU
// profiler; it is not reported, so that the profile holds nothing else.
func profiled(ctx context.Context, cl *bench.Cluster, f flags) error {
	n := f.profileN
	if n != 1 && n != 3 && n != 5 {
		return fmt.Errorf("-profile-n %d: the cluster has runs of 1, 3 or 5 nodes", n)
	}
	l, err := bench.NewLocker(f.profileLib, cl.Addrs(n))
	if err != nil {
		return err
	}
	defer l.Close()
	if err := cl.Flush(); err != nil {
		return err
	}
	stop, err := startProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	r := bench.Throughput(ctx, l, bench.ThroughputConfig{Goroutines: f.goroutines, Warmup: f.tpWarmup,
		Duration: f.duration, Commands: func() (int64, error) { return cl.Commands(n) },
		ServerCPU: func() (time.Duration, error) { return cl.CPUTime(n) }})
	stop()
	log.Printf("profiled run of %s at N=%d (not in the report): %.0f ops/s, p50 %v, %.1f server commands/op, CPU/op client %v + servers %v; profile in %s",
		f.profileLib, n, r.OpsPerSec, r.P50, r.CmdsPerOp, r.ClientCPUPerOp, r.ServerCPUPerOp, f.cpuProfile)
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func startProfile(path string) (func(), error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}

func logResult(r bench.Result) {
	extra := ""
	if r.Errors > 0 {
		extra = fmt.Sprintf(" errors=%d (first: %v)", r.Errors, r.FirstErr)
	}
	log.Printf("%-14s %-13s N=%d p50=%-9v p99=%-9v ops/s=%-8.0f fair=%.2f allocs/op=%.0f sent/op=%.1f cmds/op=%.1f cpu/op=%v+%v n=%d%s",
		r.Scenario, r.Lib, r.N, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.OpsPerSec,
		r.Fairness, r.AllocsPerOp, r.ReqsPerOp, r.CmdsPerOp, r.ClientCPUPerOp, r.ServerCPUPerOp, r.Samples, extra)
}

// commandOutput runs a command and returns its trimmed output, or "" on error.
func commandOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// commandLine reconstructs the command that is running, from the repository root.
func commandLine() string {
	prog := "go run ./cmd/redlock-bench"
	if exe := os.Args[0]; !strings.Contains(exe, "go-build") {
		prog = exe
	}
	parts := []string{"cd bench &&", prog}
	for _, a := range os.Args[1:] {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func machine(cl *bench.Cluster) bench.Machine {
	m := bench.Machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
	}
	if n := commandOutput("nproc"); n != "" {
		fmt.Sscan(n, &m.CPUs)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += " (Linux " + strings.TrimSpace(string(b)) + ")"
	}
	if v, err := cl.Servers[0].Version(); err == nil {
		m.RedisVersion = v
	}
	return m
}

// coreVersion describes the library's working tree at root: its commit, and
// whether files of the library (outside bench/, docs/ and faults/) differ from it. Both git commands are
// read-only (--no-optional-locks: not even the index is refreshed).
func coreVersion(root string) string {
	commit := commandOutput("git", "--no-optional-locks", "-C", root, "log", "-1", "--format=%h (%cs)")
	if commit == "" {
		return ""
	}
	status := commandOutput("git", "--no-optional-locks", "-C", root, "status", "--porcelain", "--",
		".", ":(exclude)bench", ":(exclude)docs", ":(exclude)faults") // faults and bench are modules of their own
	if status == "" {
		return "commit " + commit
	}
	return fmt.Sprintf("commit %s plus uncommitted changes to %d files (the working tree as it was during the run)",
		commit, len(strings.Split(status, "\n")))
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " / ")
}

// depVersion returns the version of module path in this binary, or "?".
func depVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}

func settings(f flags) []string {
	servers := "Five redis-server processes on 127.0.0.1, started once by the command with `--save \"\" --appendonly no`; a run at N nodes uses the first N. " +
		"Before every run the servers are emptied (FLUSHALL)."
	if f.runs("semaphore", false) {
		servers += " The semaphore phase starts two more, for its cells at N=7."
	}
	return []string{
		servers,
		fmt.Sprintf("`sequential`, `throughput` and `contended` run in %d rounds: each round runs every library × N in turn on the same clients, and a row merges its rounds "+
			"(latencies pooled, operations and time summed), so that a drift of the shared machine weighs on every library alike.", f.rounds),
		"**redlock** (this module, via `replace`): `redlock.Dial` with its defaults (node timeout 500 ms, retry backoff 4–250 ms with full jitter, its own connection handling) and a 10 s TTL.",
		fmt.Sprintf("**go-redsync** %s with its redigo adapter (redigo %s): a `redis.Pool` per node with MaxIdle %d and connect/read/write timeouts of %v (its adapter calls `Do`, not `DoContext`, so without a read timeout a paused node blocks forever); "+
			"`NewMutex` per lock with `WithExpiry(10s)`, default retries (32 tries, 50–250 ms apart), no fail-fast.",
			depVersion("github.com/go-redsync/redsync/v4"), depVersion("github.com/gomodule/redigo"), bench.PoolSize, bench.RedsyncReadTimeout),
		fmt.Sprintf("**bsm/redislock** %s on go-redis %s (PoolSize %d), N=1 only (it is single-node): `Obtain` with a fresh `ExponentialBackoff(16ms, 250ms)` per call and a 10 s TTL.",
			depVersion("github.com/bsm/redislock"), depVersion("github.com/redis/go-redis/v9"), bench.PoolSize),
		fmt.Sprintf("`sequential`: per round, %d unmeasured then %d measured Lock+Release pairs on one key, one at a time (capped at %v per round). "+
			"p50/p99 by nearest rank. allocs/op and B/op are `runtime.MemStats` Mallocs and TotalAlloc deltas around the measured loop divided by its pairs, background goroutines of the libraries included.",
			f.warmup, ceilDiv(f.iters, f.rounds), f.maxSeq/time.Duration(f.rounds)),
		fmt.Sprintf("`throughput`: %d goroutines, each on a key of its own, Lock+Release in a loop for %v in all (%v per round, after %v of warm-up in the first round and %v in the others); ops/s counts completed pairs, p50/p99 their latency. "+
			"CPU µs/op is the CPU time (user + system) of the benchmark process (getrusage) and of the N servers (/proc/<pid>/stat) over the measured time, divided by the pairs: "+
			"on a machine shared with other work it is steadier than ops/s, and on a CPU-bound machine ops/s ≈ CPUs ÷ (client + servers).",
			f.goroutines, f.duration, f.duration/time.Duration(f.rounds), f.tpWarmup, f.tpWarmup/4),
		fmt.Sprintf("`contended`: %d goroutines on one key for %v in all; each calls Lock (the library's own retry policy), holds the lock %v, releases it, "+
			"and waits until another goroutine has taken it before calling Lock again, so every release goes to a contender that was already waiting. "+
			"The latency is the handoff: from the moment a holder starts releasing to the moment the next holder's Lock returns. ops/s counts acquisitions; fairness is the fewest acquisitions of one goroutine divided by the most (1 = perfectly even).",
			f.contenders, f.contended, f.hold),
		fmt.Sprintf("`%s`: %d separate clients of one library (as separate services would be: no in-process queue between them), one goroutine each, on one key for %v in all; "+
			"each calls Lock, holds the lock %v, releases it and waits until another client has taken it, as in `contended`. "+
			"cmds/op is the servers' total_commands_processed delta (INFO stats, script internals included, INFO itself excluded), summed over the N nodes, per acquisition. "+
			"sent/op is the number of commands the clients wrote, per acquisition: every library's connections are dialed through a counting wrapper that parses the RESP stream (an EVALSHA counts once, subscriptions and pings count too).",
			bench.ScenarioClients, f.clients, f.clientsDuration, f.clientsHold),
		fmt.Sprintf("**%s**: the same separate-clients scenario with `redlock.WithFair()` (fresh clients for every round, %d rounds).", bench.LibRedlockFair, f.rounds),
		fmt.Sprintf("`%s` and `%s`: %d separate redlock clients at N=3 as above, in %d rounds of: a healthy run, node 3 paused with SIGSTOP, a paused run, resume (fresh clients for every run).",
			bench.ScenarioClientsHealthy, bench.ScenarioClientsPaused, f.clients, f.rounds),
		fmt.Sprintf("`1 of 5 paused`: node 5 stopped with SIGSTOP (the kernel still accepts its connections, nothing answers), then a sequential run at N=5 on fresh clients. "+
			"For redlock, %d rounds of: a healthy run (`%s`), pause, a paused run (%d warm-up and %d measured pairs each), resume; the paused target compares the two. "+
			"go-redsync makes one paused run capped at %d pairs without warm-up, because each pair takes two of its %v read timeouts (it waits for every node on Lock and on Unlock).",
			f.rounds, bench.ScenarioHealthyRef, f.warmup, ceilDiv(f.iters, f.rounds), f.peerPausedIters, bench.RedsyncReadTimeout),
		fmt.Sprintf("`1 of 5 killed`: node 5 killed with SIGKILL (connections refused), then one sequential run at N=5 (%d warm-up and %d measured pairs, fresh clients).", f.warmup, f.iters),
	}
}

func notes(rep *bench.Report, f flags) []string {
	var out []string
	for _, r := range rep.Results {
		if r.Errors > 0 {
			out = append(out, fmt.Sprintf("%s, %s N=%d: %d errors, first: %v", r.Scenario, r.Lib, r.N, r.Errors, r.FirstErr))
		}
		if r.Overlaps > 0 {
			out = append(out, fmt.Sprintf("%s, %s N=%d: %d acquisitions overlapped another holder", r.Scenario, r.Lib, r.N, r.Overlaps))
		}
	}
	if f.cpuProfile != "" {
		out = append(out, fmt.Sprintf("After the measurements, an extra throughput run of %s at N=%d (not in the tables) was CPU-profiled into %s (`go tool pprof -top %s`).", f.profileLib, f.profileN, f.cpuProfile, f.cpuProfile))
	}
	return out
}
