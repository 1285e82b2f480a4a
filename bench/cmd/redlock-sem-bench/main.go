// Command redlock-sem-bench measures the two designs of a counting semaphore
// over N nodes (docs/semaphore.md): acquisitions per second with contention
// (twice as many goroutines as permits, each holding its permit -hold), and
// the fault tolerance of each (arithmetic: N − majority for the slots, N − q
// for the counting quorum, q = quorum.Counting(n, N)). The counting design
// runs only where it tolerates a failed node, and at N=1 as the single-node
// Redisson-style baseline (the same scripts). It prints a Markdown table.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/bench"
	"github.com/redlock-go/redlock/quorum"
)

func main() {
	bin := flag.String("redis-server", "redis-server", "redis-server binary")
	duration := flag.Duration("duration", 2*time.Second, "measured time of each run")
	hold := flag.Duration("hold", time.Millisecond, "how long a goroutine holds its permit")
	permitsFlag := flag.String("permits", "2,8,64", "comma-separated numbers of permits")
	nodesFlag := flag.String("nodes", "1,3,5,7", "comma-separated numbers of nodes")
	factor := flag.Int("contenders", 2, "goroutines per permit (at least 4 goroutines)")
	clients := flag.Int("clients", 1, "separate clients (each its own connections and semaphore object) sharing the goroutines")
	flag.Parse()
	permits, err1 := ints(*permitsFlag)
	nodes, err2 := ints(*nodesFlag)
	if err1 != nil || err2 != nil || *duration <= 0 || *factor < 1 || *clients < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*bin, *duration, *hold, permits, nodes, *factor, *clients); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(bin string, d, hold time.Duration, permits, nodes []int, factor, clients int) error {
	most := 0
	for _, n := range nodes {
		most = max(most, n)
	}
	cl, err := bench.StartCluster(bin, most)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("%v per run, hold %v, %d goroutines per permit (at least 4) over %d client(s), GOMAXPROCS %d, %s\n\n",
		d, hold, factor, clients, runtime.GOMAXPROCS(0), time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| permits n | nodes N | design | q | tolerates | goroutines | acquisitions/s | p50 wait | p99 wait | most holders | client CPU/acq | servers CPU/acq | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	run := 0
	for _, n := range permits {
		for _, N := range nodes {
			for _, design := range []string{bench.DesignSlots, bench.DesignCounting} {
				if design == bench.DesignCounting && N > 1 && quorum.CountingTolerance(n, N) == 0 {
					fmt.Printf("| %d | %d | %s | %d | 0 | | not run: no fault tolerance | | | | | | |\n", n, N, design, quorum.Counting(n, N))
					continue
				}
				if err := cl.Flush(); err != nil {
					return err
				}
				run++
				name := fmt.Sprintf("bench%d", run)
				var ss []bench.Semaphorer
				for range clients {
					var s bench.Semaphorer
					if design == bench.DesignSlots {
						s, err = bench.NewSlotSemaphore(cl.URLs(N), name, n)
					} else {
						s, err = bench.NewCountingSemaphore(cl.Addrs(N), name, n, 10*time.Second, true)
					}
					if err != nil {
						return err
					}
					ss = append(ss, s)
				}
				g := max(4, factor*n)
				cpu0, srv0 := processCPU(), serverCPU(cl, N)
				r := bench.SemaphoreScenario(ss, bench.SemaphoreConfig{Goroutines: g, Duration: d, Hold: hold})
				cpu, srv := processCPU()-cpu0, serverCPU(cl, N)-srv0
				for _, s := range ss {
					_ = s.Close()
				}
				errs := strconv.Itoa(r.Errors)
				if r.FirstErr != nil {
					errs += " (" + r.FirstErr.Error() + ")"
				}
				label := design
				if design == bench.DesignCounting && N == 1 {
					label += ", Redisson-style baseline"
				}
				fmt.Printf("| %d | %d | %s | %d | %d | %d | %.0f | %s | %s | %d | %s | %s | %s |\n",
					n, N, label, r.Q, r.Tolerance, g, r.AcqPerSec, ms(r.P50Wait), ms(r.P99Wait), r.MostHolders,
					perAcq(cpu, r.Acquisitions), perAcq(srv, r.Acquisitions), errs)
				if r.MostHolders > n {
					return fmt.Errorf("%s, n=%d, N=%d: %d holders at once", design, n, N, r.MostHolders)
				}
			}
		}
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func perAcq(d time.Duration, acq int) string {
	if acq == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(acq)/float64(time.Microsecond))
}

// processCPU returns the CPU time (user + system) of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time of the first n servers.
func serverCPU(cl *bench.Cluster, n int) time.Duration {
	d, _ := cl.CPUTime(n)
	return d
}
