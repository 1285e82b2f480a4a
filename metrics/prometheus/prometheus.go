// Package prometheus exports the events of a redlock.Client as Prometheus
// metrics.
//
// A Collector turns the client's hooks (redlock.Hooks) into counters and
// histograms, and is itself a prometheus.Collector:
//
//	col := prometheus.New()
//	reg.MustRegister(col)
//	client, err := redlock.Dial(urls, redlock.WithHooks(col.Hooks()))
//
// The package lives in a module of its own (github.com/redlock-go/redlock/metrics)
// so that the core module does not depend on the Prometheus client.
//
// # Metrics
//
// With the default namespace "redlock" (see WithNamespace):
//
//	redlock_attempts_total{result="acquired|conflict|error"}   counter
//	redlock_acquisitions_total{result="acquired|failed"}       counter
//	redlock_acquire_wait_seconds{result="acquired|failed"}     histogram
//	redlock_hold_seconds                                       histogram
//	redlock_extensions_total{result="ok|failed"}               counter
//	redlock_renewal_failures_total                             counter
//	redlock_lost_total                                         counter
//	redlock_releases_total{result="ok|lost|error"}             counter
//	redlock_node_requests_total{node,op,result="ok|refused|error"} counter
//	redlock_node_latency_seconds{node,op}                      histogram
//
// An attempt (one TryLock, or one try inside Lock) is "acquired" when it took
// the lock, "conflict" when it did not and at least one node refused (the
// resource was held), and "error" otherwise: no node refused, but too few
// agreed (nodes failed or timed out, the caller's context ended first, or the
// majority agreed too late for the lease to have any validity left).
//
// An acquisition is one Lock or TryLock call (LockMulti, Do and DoMulti call
// Lock once per resource); its wait is the time from the call to its return. A release is "ok" when a
// majority deleted the lock, "lost" when a majority no longer held it
// (redlock.ErrLockLost) and "error" otherwise (too few nodes answered). The
// hold time is observed at every release, whatever its result. op is one of
// "acquire", "extend", "release" and "fence"; node is the node's name
// (host:port/db for dialed nodes).
//
// Success and conflict rates are ratios of these counters, computed in PromQL:
// see docs/observability.md.
//
// # Cardinality
//
// Resource names are not exported by default: they are unbounded. With
// WithResourceLabel every metric but the per-node ones gets a "resource" label
// whose value the given function chooses; it must map resources onto a small,
// fixed set of values.
package prometheus

import (
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlock-go/redlock"
)

// DefaultNamespace prefixes every metric name unless WithNamespace says
// otherwise.
const DefaultNamespace = "redlock"

// Default histogram buckets, in seconds.
var (
	// DefaultWaitBuckets bound the time Lock and TryLock take: from a
	// millisecond (an uncontended lock on a local network) to a minute.
	DefaultWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// DefaultHoldBuckets bound how long locks are held: from 10ms to an hour.
	DefaultHoldBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// DefaultLatencyBuckets bound one node's answer time: from 250µs to the
	// order of the default node timeout (500ms) and beyond.
	DefaultLatencyBuckets = []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// Label values, part of the metrics' contract.
const (
	// Results of redlock_attempts_total.
	ResultAcquired = "acquired"
	ResultConflict = "conflict"
	ResultError    = "error"
	// Result of redlock_acquisitions_total and redlock_acquire_wait_seconds
	// besides ResultAcquired.
	ResultFailed = "failed"
	// Results of redlock_extensions_total (ResultFailed too), of
	// redlock_releases_total (ResultLost, ResultError too) and of
	// redlock_node_requests_total (ResultRefused, ResultError too).
	ResultOK      = "ok"
	ResultLost    = "lost"
	ResultRefused = "refused"
)

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	constLabels prometheus.Labels
	resource    func(string) string
	waitBuckets []float64
	holdBuckets []float64
	latBuckets  []float64
}

// WithNamespace sets the prefix of every metric name (default "redlock"); an
// empty namespace leaves names unprefixed ("attempts_total"). An invalid name
// makes registration fail.
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithConstLabels adds labels with fixed values to every metric, for example to
// tell apart two clients in one process. Two Collectors registered with the
// same registry must have the same constant label names (and the same other
// options) with different values: Prometheus refuses both a duplicate series
// and one name with two sets of label names.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) {
		c.constLabels = make(prometheus.Labels, len(l))
		for k, v := range l {
			c.constLabels[k] = v
		}
	}
}

// WithResourceLabel adds a "resource" label, whose value is f(resource), to
// every metric that concerns one lock (all but the per-node ones). f is called
// on every event, from many goroutines at once: it must be fast, safe for
// concurrent use, and return few distinct values (a resource's kind, say
// "report" for "report:2024-06-01"), never the raw name of an unbounded set of
// resources. Without this option no metric has a resource label. A nil f
// removes the label.
func WithResourceLabel(f func(resource string) string) Option {
	return func(c *config) { c.resource = f }
}

// WithWaitBuckets sets the buckets of redlock_acquire_wait_seconds (default
// DefaultWaitBuckets): upper bounds in seconds, strictly increasing, as for
// any Prometheus histogram (bounds that are not make New or the first event
// panic).
func WithWaitBuckets(b ...float64) Option {
	return func(c *config) { c.waitBuckets = slices.Clone(b) }
}

// WithHoldBuckets sets the buckets of redlock_hold_seconds (default
// DefaultHoldBuckets), under the same rules as WithWaitBuckets.
func WithHoldBuckets(b ...float64) Option {
	return func(c *config) { c.holdBuckets = slices.Clone(b) }
}

// WithLatencyBuckets sets the buckets of redlock_node_latency_seconds (default
// DefaultLatencyBuckets), under the same rules as WithWaitBuckets.
func WithLatencyBuckets(b ...float64) Option {
	return func(c *config) { c.latBuckets = slices.Clone(b) }
}

// Collector turns a redlock.Client's hook events into Prometheus metrics. It
// implements prometheus.Collector: register it with a registry, and pass
// Hooks to the client with redlock.WithHooks. It is safe for concurrent use;
// one Collector may serve several clients, whose events then add up.
type Collector struct {
	resource func(string) string

	attempts      *prometheus.CounterVec
	acquisitions  *prometheus.CounterVec
	wait          *prometheus.HistogramVec
	hold          *prometheus.HistogramVec
	extensions    *prometheus.CounterVec
	renewalFails  *prometheus.CounterVec
	lost          *prometheus.CounterVec
	releases      *prometheus.CounterVec
	nodeRequests  *prometheus.CounterVec
	nodeLatency   *prometheus.HistogramVec
	allCollectors []prometheus.Collector
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector configured by opts.
func New(opts ...Option) *Collector {
	cfg := config{
		namespace:   DefaultNamespace,
		waitBuckets: slices.Clone(DefaultWaitBuckets),
		holdBuckets: slices.Clone(DefaultHoldBuckets),
		latBuckets:  slices.Clone(DefaultLatencyBuckets),
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	// Labels of the metrics about one lock: the resource label comes last.
	lockLabels := func(labels ...string) []string {
		if cfg.resource != nil {
			labels = append(labels, "resource")
		}
		return labels
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: cfg.constLabels,
		}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: cfg.constLabels,
			Buckets: buckets,
		}, labels)
	}

	c := &Collector{
		resource: cfg.resource,
		attempts: counter("attempts_total",
			"Acquisition attempts (one per TryLock, one per try inside Lock), by result: acquired, conflict (not acquired, refused by at least one node) or error (not acquired, no node refused).",
			lockLabels("result")),
		acquisitions: counter("acquisitions_total",
			"Lock and TryLock calls, by result: acquired or failed.",
			lockLabels("result")),
		wait: histogram("acquire_wait_seconds",
			"Time from a Lock or TryLock call to its return, by result: acquired or failed.",
			cfg.waitBuckets, lockLabels("result")),
		hold: histogram("hold_seconds",
			"Time from acquisition to release of locks, observed at every release.",
			cfg.holdBuckets, lockLabels()),
		extensions: counter("extensions_total",
			"Extend calls, Do's renewals included, by result: ok or failed.",
			lockLabels("result")),
		renewalFails: counter("renewal_failures_total",
			"Failed renewals in Do (lock lost, or too few nodes answered).",
			lockLabels()),
		lost: counter("lost_total",
			"Locks that could no longer be trusted: Extend found them gone, or their validity ran out under Do or Lock.Context.",
			lockLabels()),
		releases: counter("releases_total",
			"Release calls, by result: ok, lost (a majority no longer held the lock) or error (too few nodes answered).",
			lockLabels("result")),
		nodeRequests: counter("node_requests_total",
			"Answers of each node to each operation (acquire, extend, release, fence), stragglers included, by result: ok, refused or error.",
			[]string{"node", "op", "result"}),
		nodeLatency: histogram("node_latency_seconds",
			"Time each node took to answer each operation (acquire, extend, release, fence), failures included.",
			cfg.latBuckets, []string{"node", "op"}),
	}
	c.allCollectors = []prometheus.Collector{
		c.attempts, c.acquisitions, c.wait, c.hold, c.extensions, c.renewalFails,
		c.lost, c.releases, c.nodeRequests, c.nodeLatency,
	}
	if c.resource == nil {
		// Without a resource label every series of the lock metrics is known:
		// export them at zero from the start, so that rates and ratios are
		// defined before the first event.
		for _, r := range []string{ResultAcquired, ResultConflict, ResultError} {
			c.attempts.WithLabelValues(r)
		}
		for _, r := range []string{ResultAcquired, ResultFailed} {
			c.acquisitions.WithLabelValues(r)
			c.wait.WithLabelValues(r)
		}
		c.hold.WithLabelValues()
		for _, r := range []string{ResultOK, ResultFailed} {
			c.extensions.WithLabelValues(r)
		}
		c.renewalFails.WithLabelValues()
		c.lost.WithLabelValues()
		for _, r := range []string{ResultOK, ResultLost, ResultError} {
			c.releases.WithLabelValues(r)
		}
	}
	return c
}

// Describe sends the descriptors of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.allCollectors {
		m.Describe(ch)
	}
}

// Collect sends the current value of every metric of c.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.allCollectors {
		m.Collect(ch)
	}
}

// Hooks returns the hooks that feed c, for redlock.WithHooks. Every field is
// set. To combine them with hooks of your own, call both from one function.
func (c *Collector) Hooks() redlock.Hooks {
	return redlock.Hooks{
		OnAttempt:        c.onAttempt,
		OnAcquire:        c.onAcquire,
		OnNodeReply:      c.onNodeReply,
		OnExtend:         c.onExtend,
		OnRenewalFailure: c.onRenewalFailure,
		OnLost:           c.onLost,
		OnRelease:        c.onRelease,
	}
}

// values returns the label values of a lock metric: values, then the mapped
// resource when there is a resource label.
func (c *Collector) values(resource string, values ...string) []string {
	if c.resource != nil {
		values = append(values, c.resource(resource))
	}
	return values
}

// attemptResult classifies an attempt as redlock_attempts_total does:
// ResultAcquired, ResultConflict or ResultError.
func attemptResult(e redlock.AttemptEvent) string {
	switch {
	case e.Acquired:
		return ResultAcquired
	case e.Refused > 0:
		return ResultConflict
	default:
		return ResultError
	}
}

// releaseResult classifies a release as redlock_releases_total does:
// ResultOK, ResultLost or ResultError.
func releaseResult(e redlock.ReleaseEvent) string {
	switch {
	case e.Err == nil:
		return ResultOK
	case errors.Is(e.Err, redlock.ErrLockLost):
		return ResultLost
	default:
		return ResultError
	}
}

// nodeResult classifies a node's answer as redlock_node_requests_total does:
// ResultOK, ResultRefused or ResultError.
func nodeResult(e redlock.NodeReplyEvent) string {
	switch {
	case e.Err != nil:
		return ResultError
	case e.OK:
		return ResultOK
	default:
		return ResultRefused
	}
}

func (c *Collector) onAttempt(e redlock.AttemptEvent) {
	c.attempts.WithLabelValues(c.values(e.Resource, attemptResult(e))...).Inc()
}

func (c *Collector) onAcquire(e redlock.AcquireEvent) {
	result := ResultFailed
	if e.Acquired {
		result = ResultAcquired
	}
	lv := c.values(e.Resource, result)
	c.acquisitions.WithLabelValues(lv...).Inc()
	c.wait.WithLabelValues(lv...).Observe(e.Wait.Seconds())
}

func (c *Collector) onNodeReply(e redlock.NodeReplyEvent) {
	c.nodeRequests.WithLabelValues(e.Node, e.Op, nodeResult(e)).Inc()
	c.nodeLatency.WithLabelValues(e.Node, e.Op).Observe(e.Latency.Seconds())
}

func (c *Collector) onExtend(e redlock.ExtendEvent) {
	result := ResultFailed
	if e.OK {
		result = ResultOK
	}
	c.extensions.WithLabelValues(c.values(e.Resource, result)...).Inc()
}

func (c *Collector) onRenewalFailure(e redlock.RenewalFailureEvent) {
	c.renewalFails.WithLabelValues(c.values(e.Resource)...).Inc()
}

func (c *Collector) onLost(e redlock.LostEvent) {
	c.lost.WithLabelValues(c.values(e.Resource)...).Inc()
}

func (c *Collector) onRelease(e redlock.ReleaseEvent) {
	c.releases.WithLabelValues(c.values(e.Resource, releaseResult(e))...).Inc()
	c.hold.WithLabelValues(c.values(e.Resource)...).Observe(e.Held.Seconds())
}
