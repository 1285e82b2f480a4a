// Package otel exports the events of a redlock.Client as OpenTelemetry
// metrics, the counterpart of metrics/prometheus:
//
//	m, err := otel.New(otelglobal.GetMeterProvider()) // or your SDK MeterProvider
//	client, err := redlock.Dial(urls, redlock.WithHooks(m.Hooks()))
//
// The package lives in a module of its own
// (github.com/redlock-go/redlock/metrics/otel) so that the core module does not
// depend on OpenTelemetry. Its name clashes with go.opentelemetry.io/otel:
// import it as, say, redlockotel.
//
// # Instruments
//
// With the default prefix "redlock." (see WithPrefix), one per Prometheus
// metric of metrics/prometheus, with the same attribute values:
//
//	redlock.attempts           counter    {attempt}  result=acquired|conflict|error
//	redlock.acquisitions       counter    {call}     result=acquired|failed
//	redlock.acquire.wait       histogram  s          result=acquired|failed
//	redlock.hold               histogram  s
//	redlock.extensions         counter    {call}     result=ok|failed
//	redlock.renewal.failures   counter    {renewal}
//	redlock.lost               counter    {lock}
//	redlock.releases           counter    {call}     result=ok|lost|error
//	redlock.node.requests      counter    {request}  node, op, result=ok|refused|error
//	redlock.node.latency       histogram  s          node, op
//
// Resource names are not exported unless WithResourceAttribute maps them onto a
// small, fixed set of values (attribute "resource").
package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlock-go/redlock"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/redlock-go/redlock/metrics/otel"

// DefaultPrefix starts every instrument name unless WithPrefix says otherwise.
const DefaultPrefix = "redlock."

// Default histogram bucket boundaries, in seconds (those of metrics/prometheus).
var (
	DefaultWaitBuckets    = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	DefaultHoldBuckets    = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	DefaultLatencyBuckets = []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// Attribute values, part of the metrics' contract (as in metrics/prometheus).
const (
	ResultAcquired = "acquired"
	ResultConflict = "conflict"
	ResultError    = "error"
	ResultFailed   = "failed"
	ResultOK       = "ok"
	ResultLost     = "lost"
	ResultRefused  = "refused"
)

// Option configures New.
type Option func(*config)

type config struct {
	prefix      string
	attrs       []attribute.KeyValue
	resource    func(string) string
	waitBuckets []float64
	holdBuckets []float64
	latBuckets  []float64
}

// WithPrefix sets the start of every instrument name (default "redlock.").
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithAttributes adds attributes with fixed values to every measurement, for
// example to tell two clients apart.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = slices.Clone(kv) }
}

// WithResourceAttribute adds a "resource" attribute, whose value is
// f(resource), to every measurement that concerns one lock (all but the
// per-node ones). f must be fast, safe for concurrent use, and return few
// distinct values. A nil f removes the attribute.
func WithResourceAttribute(f func(resource string) string) Option {
	return func(c *config) { c.resource = f }
}

// WithWaitBuckets sets the bucket boundaries of redlock.acquire.wait.
func WithWaitBuckets(b ...float64) Option {
	return func(c *config) { c.waitBuckets = slices.Clone(b) }
}

// WithHoldBuckets sets the bucket boundaries of redlock.hold.
func WithHoldBuckets(b ...float64) Option {
	return func(c *config) { c.holdBuckets = slices.Clone(b) }
}

// WithLatencyBuckets sets the bucket boundaries of redlock.node.latency.
func WithLatencyBuckets(b ...float64) Option {
	return func(c *config) { c.latBuckets = slices.Clone(b) }
}

// Metrics records a redlock.Client's hook events on OpenTelemetry instruments.
// It is safe for concurrent use; one Metrics may serve several clients.
type Metrics struct {
	base     []attribute.KeyValue
	resource func(string) string

	attempts, acquisitions, extensions, renewalFails, lost, releases, nodeRequests metric.Int64Counter
	wait, hold, nodeLatency                                                        metric.Float64Histogram

	fixed map[string]metric.MeasurementOption // result → base attributes + result, without a resource attribute
}

// New creates the instruments on a meter of mp (scope ScopeName).
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("otel: nil MeterProvider")
	}
	cfg := config{
		prefix:      DefaultPrefix,
		waitBuckets: slices.Clone(DefaultWaitBuckets),
		holdBuckets: slices.Clone(DefaultHoldBuckets),
		latBuckets:  slices.Clone(DefaultLatencyBuckets),
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{base: cfg.attrs, resource: cfg.resource, fixed: map[string]metric.MeasurementOption{}}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(cfg.prefix+name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(cfg.prefix+name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	m.attempts = counter("attempts", "{attempt}",
		"Acquisition attempts (one per TryLock, one per try inside Lock), by result: acquired, conflict (not acquired, refused by at least one node) or error (not acquired, no node refused).")
	m.acquisitions = counter("acquisitions", "{call}", "Lock and TryLock calls, by result: acquired or failed.")
	m.wait = histogram("acquire.wait", "Time from a Lock or TryLock call to its return, by result: acquired or failed.", cfg.waitBuckets)
	m.hold = histogram("hold", "Time from acquisition to release of locks, observed at every release.", cfg.holdBuckets)
	m.extensions = counter("extensions", "{call}", "Extend calls, Do's renewals included, by result: ok or failed.")
	m.renewalFails = counter("renewal.failures", "{renewal}", "Failed renewals in Do (lock lost, or too few nodes answered).")
	m.lost = counter("lost", "{lock}", "Locks that could no longer be trusted: Extend found them gone, or their validity ran out under Do or Lock.Context.")
	m.releases = counter("releases", "{call}", "Release calls, by result: ok, lost (a majority no longer held the lock) or error (too few nodes answered).")
	m.nodeRequests = counter("node.requests", "{request}", "Answers of each node to each operation (acquire, extend, release, fence), stragglers included, by result: ok, refused or error.")
	m.nodeLatency = histogram("node.latency", "Time each node took to answer each operation (acquire, extend, release, fence), failures included.", cfg.latBuckets)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	for _, r := range []string{"", ResultAcquired, ResultConflict, ResultError, ResultFailed, ResultOK, ResultLost} {
		m.fixed[r] = metric.WithAttributeSet(attribute.NewSet(m.attrs("", r, false)...))
	}
	return m, nil
}

// attrs returns the attributes of a lock measurement: the base ones, result
// (if any) and the mapped resource (if configured and withResource).
func (m *Metrics) attrs(resource, result string, withResource bool) []attribute.KeyValue {
	kv := slices.Clone(m.base)
	if result != "" {
		kv = append(kv, attribute.String("result", result))
	}
	if withResource && m.resource != nil {
		kv = append(kv, attribute.String("resource", m.resource(resource)))
	}
	return kv
}

// opt returns the measurement option of a lock measurement.
func (m *Metrics) opt(resource, result string) metric.MeasurementOption {
	if m.resource == nil {
		return m.fixed[result]
	}
	return metric.WithAttributes(m.attrs(resource, result, true)...)
}

// Hooks returns the hooks that feed m, for redlock.WithHooks. Every field is
// set. To combine them with hooks of your own, call both from one function.
func (m *Metrics) Hooks() redlock.Hooks {
	return redlock.Hooks{
		OnAttempt:        m.onAttempt,
		OnAcquire:        m.onAcquire,
		OnNodeReply:      m.onNodeReply,
		OnExtend:         m.onExtend,
		OnRenewalFailure: m.onRenewalFailure,
		OnLost:           m.onLost,
		OnRelease:        m.onRelease,
	}
}

// Hooks run on the goroutine doing the work, with no context of the caller.
var ctx = context.Background()

func (m *Metrics) onAttempt(e redlock.AttemptEvent) {
	r := ResultError
	switch {
	case e.Acquired:
		r = ResultAcquired
	case e.Refused > 0:
		r = ResultConflict
	}
	m.attempts.Add(ctx, 1, m.opt(e.Resource, r))
}

func (m *Metrics) onAcquire(e redlock.AcquireEvent) {
	r := ResultFailed
	if e.Acquired {
		r = ResultAcquired
	}
	o := m.opt(e.Resource, r)
	m.acquisitions.Add(ctx, 1, o)
	m.wait.Record(ctx, e.Wait.Seconds(), o)
}

func (m *Metrics) onNodeReply(e redlock.NodeReplyEvent) {
	r := ResultRefused
	switch {
	case e.Err != nil:
		r = ResultError
	case e.OK:
		r = ResultOK
	}
	kv := append(slices.Clone(m.base), attribute.String("node", e.Node), attribute.String("op", e.Op))
	m.nodeLatency.Record(ctx, e.Latency.Seconds(), metric.WithAttributes(kv...))
	m.nodeRequests.Add(ctx, 1, metric.WithAttributes(append(kv, attribute.String("result", r))...))
}

func (m *Metrics) onExtend(e redlock.ExtendEvent) {
	r := ResultFailed
	if e.OK {
		r = ResultOK
	}
	m.extensions.Add(ctx, 1, m.opt(e.Resource, r))
}

func (m *Metrics) onRenewalFailure(e redlock.RenewalFailureEvent) {
	m.renewalFails.Add(ctx, 1, m.opt(e.Resource, ""))
}

func (m *Metrics) onLost(e redlock.LostEvent) {
	m.lost.Add(ctx, 1, m.opt(e.Resource, ""))
}

func (m *Metrics) onRelease(e redlock.ReleaseEvent) {
	r := ResultError
	switch {
	case e.Err == nil:
		r = ResultOK
	case errors.Is(e.Err, redlock.ErrLockLost):
		r = ResultLost
	}
	m.releases.Add(ctx, 1, m.opt(e.Resource, r))
	m.hold.Record(ctx, e.Held.Seconds(), m.opt(e.Resource, ""))
}
