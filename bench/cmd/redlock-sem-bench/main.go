// Command redlock-sem-bench measures the two designs of a counting semaphore
// over N nodes (docs/semaphore.md): acquisitions per second with contention
// (twice as many goroutines as permits, each holding its permit -hold), and
// the fault tolerance of each: N − majority for the slots, N − q for the
// counting quorum (q = quorum.Counting(n, N)), and measured after each run by
// killing the cell's servers one by one until no permit comes within
// -tolerance-wait (bench.MeasureTolerance; the run fails if the two differ).
// The counting design
// runs only where it tolerates a failed node, and at N=1 as the single-node
// Redisson-style baseline (the same scripts). It prints a Markdown table.
//
// The cells and their measurement are the bench package's (SemaphoreCells,
// RunSemaphore), which redlock-bench also runs for the "Beyond a mutex"
// section of docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/bench"
)

func main() {
	bin := flag.String("redis-server", "redis-server", "redis-server binary")
	duration := flag.Duration("duration", 2*time.Second, "measured time of each run")
	hold := flag.Duration("hold", time.Millisecond, "how long a goroutine holds its permit")
	permitsFlag := flag.String("permits", "2,8,64", "comma-separated numbers of permits")
	nodesFlag := flag.String("nodes", "1,3,5,7", "comma-separated numbers of nodes")
	factor := flag.Int("contenders", 2, "goroutines per permit (at least 4 goroutines)")
	clients := flag.Int("clients", 1, "separate clients (each its own connections and semaphore object) sharing the goroutines")
	tolWait := flag.Duration("tolerance-wait", time.Second, "how long to wait for a permit with each number of servers killed when measuring the fault tolerance (0: not measured)")
	flag.Parse()
	permits, err1 := ints(*permitsFlag)
	nodes, err2 := ints(*nodesFlag)
	if err1 != nil || err2 != nil || *duration <= 0 || *factor < 1 || *clients < 1 || *tolWait < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*bin, *duration, *hold, permits, nodes, *factor, *clients, *tolWait); err != nil {
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

func run(bin string, d, hold time.Duration, permits, nodes []int, factor, clients int, tolWait time.Duration) error {
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
	fmt.Println("| permits n | nodes N | design | q | tolerates (N − q) | tolerates, measured | goroutines | acquisitions/s | p50 wait | p99 wait | most holders | client CPU/acq | servers CPU/acq | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	cfg := bench.SemaphoreRun{Cluster: cl, Duration: d, Hold: hold, PerPermit: factor, Clients: clients, ToleranceWait: tolWait}
	for i, cell := range bench.SemaphoreCells(permits, nodes) {
		r, err := bench.RunSemaphore(context.Background(), cfg, cell, fmt.Sprintf("bench%d", i+1))
		if err != nil {
			return err
		}
		if r.NotRun {
			fmt.Printf("| %d | %d | %s | %d | 0 | | | not run: no fault tolerance | | | | | | |\n", r.Permits, r.N, r.Design, r.Q)
			continue
		}
		errs := strconv.Itoa(r.Errors)
		if r.FirstErr != nil {
			errs += " (" + r.FirstErr.Error() + ")"
		}
		label := r.Design
		if r.Design == bench.DesignCounting && r.N == 1 {
			label += ", Redisson-style baseline"
		}
		measured := "not measured"
		if r.Measured >= 0 {
			measured = strconv.Itoa(r.Measured)
		}
		fmt.Printf("| %d | %d | %s | %d | %d | %s | %d | %.0f | %s | %s | %d | %s | %s | %s |\n",
			r.Permits, r.N, label, r.Q, r.Tolerance, measured, r.Goroutines, r.AcqPerSec, ms(r.P50Wait), ms(r.P99Wait), r.MostHolders,
			perAcq(r, r.ClientCPU), perAcq(r, r.ServerCPU), errs)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func perAcq(r bench.SemaphoreResult, d time.Duration) string {
	if r.Acquisitions == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f µs", float64(r.CPUPerAcq(d))/float64(time.Microsecond))
}
