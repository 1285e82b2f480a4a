package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redlock-go/redlock"
	goredisnode "github.com/redlock-go/redlock/goredis"
	"github.com/redlock-go/redlock/node"
	rueidisnode "github.com/redlock-go/redlock/rueidis"
)

// Library names of this library over the adapter nodes of its goredis and
// rueidis modules, as they appear in the report.
const (
	LibRedlockGoredis = "redlock (goredis)"
	LibRedlockRueidis = "redlock (rueidis)"
)

// NewRedlockGoredis returns this library's client, made with redlock.New over
// one goredis node per address, each over a go-redis client of its own (with
// its default pool, ContextTimeoutEnabled as the adapter requires, and a
// counting dialer), with the same TTL and defaults as NewRedlock.
func NewRedlockGoredis(addrs []string) (*RedlockLocker, error) {
	l := &RedlockLocker{n: len(addrs), lib: LibRedlockGoredis}
	nodes := make([]node.Node, 0, len(addrs))
	for _, a := range addrs {
		rdb := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, Dialer: l.req.DialContext})
		l.closers = append(l.closers, rdb.Close)
		n, err := goredisnode.New(rdb)
		if err != nil {
			return nil, errors.Join(err, l.closeClients())
		}
		nodes = append(nodes, n)
	}
	return l.start(nodes)
}

// NewRedlockRueidis returns this library's client, made with redlock.New over
// one rueidis node per address, each over a rueidis client of its own (its
// default options, a counting DialCtxFn), with the same TTL and defaults as
// NewRedlock.
func NewRedlockRueidis(addrs []string) (*RedlockLocker, error) {
	l := &RedlockLocker{n: len(addrs), lib: LibRedlockRueidis}
	nodes := make([]node.Node, 0, len(addrs))
	for _, a := range addrs {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a},
			DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return l.req.dial(ctx, d, "tcp", addr)
			}})
		if err != nil {
			for _, n := range nodes {
				_ = n.Close()
			}
			return nil, errors.Join(err, l.closeClients())
		}
		l.closers = append(l.closers, func() error { rc.Close(); return nil })
		n, err := rueidisnode.New(rc)
		if err != nil {
			return nil, errors.Join(err, l.closeClients())
		}
		nodes = append(nodes, n)
	}
	return l.start(nodes)
}

// start makes the client over nodes; on failure it closes them and the
// clients below.
func (l *RedlockLocker) start(nodes []node.Node) (*RedlockLocker, error) {
	c, err := redlock.New(nodes, redlock.WithTTL(TTL))
	if err != nil {
		for _, n := range nodes {
			_ = n.Close()
		}
		return nil, errors.Join(err, l.closeClients())
	}
	l.C = c
	return l, nil
}

// closeClients closes the adapters' Redis clients (redlock.Client.Close
// closes the nodes, which leave their clients open).
func (l *RedlockLocker) closeClients() error {
	var errs []error
	for _, c := range l.closers {
		errs = append(errs, c())
	}
	l.closers = nil
	return errors.Join(errs...)
}

// ScenarioClientsAdapters is the separate-clients scenario of the adapters'
// comparison (redlock over its core node, its goredis node and its rueidis
// node), named apart from ScenarioClients so that its rows are not mistaken
// for the peers' comparison.
const ScenarioClientsAdapters = "adapters, separate clients"

// AdapterTolerance is how far from the core (redigo) node's figures an
// adapter's may fall: see CompareAdapter.
const AdapterTolerance = 0.20

// AdapterFairness is the least fairness (fewest grants ÷ most) an adapter
// must keep.
const AdapterFairness = 0.8

// Median sums up separate runs of one scenario, library and N by their
// medians: rate, handoff p50 and p99, fairness, commands and CPU times per
// operation are the medians of the runs' (an even count takes the mean of the
// middle two; unknown values are left out); operations, errors, overlaps, samples and time add up. Latencies are
// not kept.
func Median(parts ...Result) Result {
	if len(parts) == 0 {
		return Result{}
	}
	r := parts[0]
	r.Latencies, r.counts = nil, nil
	r.Rounds = len(parts)
	for _, p := range parts[1:] {
		r.Ops += p.Ops
		r.Errors += p.Errors
		if r.FirstErr == nil {
			r.FirstErr = p.FirstErr
		}
		r.Elapsed += p.Elapsed
		r.Overlaps += p.Overlaps
		r.Samples += p.Samples
		r.Capped = r.Capped || p.Capped
	}
	med := func(v func(Result) float64) float64 {
		xs := make([]float64, 0, len(parts))
		for _, p := range parts {
			if x := v(p); !math.IsNaN(x) {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		slices.Sort(xs)
		if k := len(xs); k%2 == 0 {
			return (xs[k/2-1] + xs[k/2]) / 2
		}
		return xs[len(xs)/2]
	}
	r.OpsPerSec = med(func(p Result) float64 { return p.OpsPerSec })
	r.P50 = time.Duration(med(func(p Result) float64 { return float64(p.P50) }))
	r.P99 = time.Duration(med(func(p Result) float64 { return float64(p.P99) }))
	r.Fairness = med(func(p Result) float64 { return p.Fairness })
	r.CmdsPerOp = med(func(p Result) float64 { return p.CmdsPerOp })
	r.ReqsPerOp = med(func(p Result) float64 { return p.ReqsPerOp })
	cpu := func(d time.Duration) float64 {
		if d <= 0 {
			return math.NaN() // unknown
		}
		return float64(d)
	}
	known := func(v float64) time.Duration {
		if math.IsNaN(v) {
			return 0
		}
		return time.Duration(v)
	}
	r.ClientCPUPerOp = known(med(func(p Result) float64 { return cpu(p.ClientCPUPerOp) }))
	r.ServerCPUPerOp = known(med(func(p Result) float64 { return cpu(p.ServerCPUPerOp) }))
	return r
}

// CompareAdapter evaluates an adapter's medians against the core node's
// (both from Median, at the same N): its acquisitions/s at least
// 1−AdapterTolerance times the core's, its handoff p50 at most
// 1+AdapterTolerance times the core's, and its fairness at least
// AdapterFairness. Being faster than the core node meets the target.
func CompareAdapter(core, adapter Result) Target {
	t := Target{Name: fmt.Sprintf("%s within %.0f %% of the redigo node (acq/s, handoff p50) and fairness ≥ %.1f, N=%d",
		adapter.Lib, 100*AdapterTolerance, AdapterFairness, adapter.N)}
	if core.OpsPerSec <= 0 || core.P50 <= 0 || adapter.Ops == 0 || math.IsNaN(adapter.Fairness) {
		return t
	}
	rate := adapter.OpsPerSec / core.OpsPerSec
	lat := float64(adapter.P50) / float64(core.P50)
	t.Known = true
	t.Met = rate >= 1-AdapterTolerance && lat <= 1+AdapterTolerance && adapter.Fairness >= AdapterFairness
	t.Measured = fmt.Sprintf("acq/s %s vs %s (%.2f×), handoff p50 %s vs %s ms (%.2f×), fairness %.2f",
		opsS(adapter.OpsPerSec), opsS(core.OpsPerSec), rate, ms(adapter.P50), ms(core.P50), lat, adapter.Fairness)
	return t
}
