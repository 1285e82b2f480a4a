package redlock

import (
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/redlock-go/redlock/clock"
	"github.com/redlock-go/redlock/node"
)

// Defaults used when no option says otherwise.
const (
	// DefaultTTL is the lease requested from each node.
	DefaultTTL = 10 * time.Second
	// DefaultNodeTimeout bounds each call to one node.
	DefaultNodeTimeout = node.DefaultTimeout
	// DefaultRetryMin and DefaultRetryMax bound the exponential backoff between
	// attempts of Lock (full jitter: each wait is uniform in [0, bound)).
	DefaultRetryMin = 4 * time.Millisecond
	DefaultRetryMax = 250 * time.Millisecond
	// DefaultKeyPrefix is prepended to every key.
	DefaultKeyPrefix = "redlock:"
	// MaxResourceLen is the longest resource name accepted, in bytes.
	MaxResourceLen = 1024
	// MaxNodes is the largest number of nodes a Client accepts.
	MaxNodes = 99
	// MaxTTL is the longest lease accepted.
	MaxTTL = 24 * time.Hour
)

type config struct {
	ttl         time.Duration
	driftFactor float64
	retryMin    time.Duration
	retryMax    time.Duration
	nodeTimeout time.Duration
	prefix      string
	logger      *slog.Logger
	clock       clock.Clock
	nodeOpts    []node.Option
	// nodeOptsGiven: WithNodeOptions was given (nodeOpts also holds what
	// WithLogger adds); New refuses it.
	nodeOptsGiven bool
	hooks         Hooks
	fair          bool

	breakerFailures int
}

func defaultConfig() config {
	return config{
		ttl:         DefaultTTL,
		driftFactor: clock.DefaultDriftFactor,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		nodeTimeout: DefaultNodeTimeout,
		prefix:      DefaultKeyPrefix,
		clock:       clock.Real(),

		breakerFailures: DefaultBreakerFailures,
	}
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Option configures a Client.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// LockOption configures one acquisition: Lock, TryLock, LockMulti, and the
// acquisition made by Do and DoMulti.
type LockOption interface {
	DoOption
	applyLock(*lockConfig) error
}

// HoldOption configures how a lock is held once taken: Lock.Keep, Lock.Context,
// and the holding part of Do and DoMulti.
type HoldOption interface {
	DoOption
	applyHold(*holdConfig) error
}

// DoOption configures Do and DoMulti: every LockOption and every HoldOption is
// one.
type DoOption interface {
	applyDo(*lockConfig, *holdConfig) error
}

type lockOptionFunc func(*lockConfig) error

// watchedKey marks a lock whose key's own channel others watch for its
// release (a semaphore's slot, an election's name: Client.newLock).
var watchedKey = lockOptionFunc(func(c *lockConfig) error { c.watched = true; return nil })

func (f lockOptionFunc) applyLock(c *lockConfig) error              { return f(c) }
func (f lockOptionFunc) applyDo(c *lockConfig, _ *holdConfig) error { return f(c) }

type holdOptionFunc func(*holdConfig) error

func (f holdOptionFunc) applyHold(h *holdConfig) error              { return f(h) }
func (f holdOptionFunc) applyDo(_ *lockConfig, h *holdConfig) error { return f(h) }

type lockConfig struct {
	attempts *int   // counts attempts for hooks, when set
	waiter   *place // the place in the nodes' waiters' queues (WithFair)
	once     bool   // one attempt (TryLock, TryWLock): its refusal takes no ticket (nodeClock.unheard)
	fence    bool
	meta     *string // WithMetadata, or a leader's value (meta.go): written right after the grant
	watched  bool    // the key's own channel is watched (semaphore slots, an election): newLock
	ttl      time.Duration
	retryMin time.Duration
	retryMax time.Duration
}

// WithTTL sets the lease requested from each node (default 10s). It must be a
// whole number of milliseconds (Redis' PX unit), at most MaxTTL, and long enough to
// leave validity after its own drift allowance.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error { c.ttl = d; return nil })
}

// WithDriftFactor sets the fraction of the TTL reserved for clock-rate
// differences between client and nodes (default 0.01); it must be in [0, 0.5).
// The allowance is TTL·factor + 2ms.
func WithDriftFactor(f float64) Option {
	return optionFunc(func(c *config) error {
		if math.IsNaN(f) || f < 0 || f >= 0.5 {
			return invalid("drift factor %v must be in [0, 0.5)", f)
		}
		c.driftFactor = f
		return nil
	})
}

// WithRetryBackoff sets the bounds of the exponential backoff between attempts of
// Lock: the n-th wait is uniform in [0, min(max, min·2ⁿ)) ("full jitter").
func WithRetryBackoff(min, max time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := checkBackoff(min, max); err != nil {
			return err
		}
		c.retryMin, c.retryMax = min, max
		return nil
	})
}

func checkBackoff(min, max time.Duration) error {
	if min <= 0 || max < min || max > time.Minute {
		return invalid("retry backoff [%v, %v] must satisfy 0 < min <= max <= 1m", min, max)
	}
	return nil
}

// WithNodeTimeout bounds every call to one node (default 500ms), in addition to
// the caller's context. It must be in (0, node.MaxTimeout]. It is the one node
// timeout of a Client: the client bounds its rounds with it, and Dial gives it to
// its nodes (node.WithTimeout). A node.WithTimeout among WithNodeOptions with
// another value than this one (or than the default when this option is not
// given) makes Dial fail with ErrInvalid: give the timeout once, here.
func WithNodeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := node.CheckTimeout(d); err != nil {
			return invalid("node timeout: %w", err)
		}
		c.nodeTimeout = d
		return nil
	})
}

// WithKeyPrefix sets the prefix of every key (default "redlock:"). The keys of a
// resource are LockKey(prefix, r) and FenceKey(prefix, r), which share a Cluster
// hash slot; the prefix itself may therefore not contain braces.
func WithKeyPrefix(p string) Option {
	return optionFunc(func(c *config) error {
		if strings.ContainsAny(p, "{}") || len(p) > 256 {
			return invalid("key prefix %q must not contain braces and be at most 256 bytes", p)
		}
		c.prefix = p
		return nil
	})
}

// WithLogger sets a logger (off by default). Logs carry digests of keys and tokens,
// never their values.
// The nodes that Dial creates log to it too (node.WithLogger: release
// notifications becoming unavailable, and restored).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		c.nodeOpts = append(c.nodeOpts, node.WithLogger(l))
		return nil
	})
}

// WithClock sets the clock used to measure acquisitions (default clock.Real()).
func WithClock(cl clock.Clock) Option {
	return optionFunc(func(c *config) error {
		if cl == nil {
			return invalid("nil clock")
		}
		c.clock = cl
		return nil
	})
}

// WithNodeOptions passes options to the nodes that Dial creates. New refuses it
// with ErrInvalid: its nodes exist already, so the options could not apply (a
// restart quarantine believed on would be off); give them to node.Dial or
// node.FromPool instead. A node.WithTimeout among them must agree with the
// client's node timeout (WithNodeTimeout).
func WithNodeOptions(opts ...node.Option) Option {
	return optionFunc(func(c *config) error {
		c.nodeOpts = append(c.nodeOpts, opts...)
		c.nodeOptsGiven = c.nodeOptsGiven || len(opts) > 0
		return nil
	})
}

// WithFair makes the client's acquisitions first come, first served across
// clients: each Lock call takes a ticket (its wall-clock time) and waits in a
// queue kept on every node beside the lock key, and a node grants the lock
// only to the head of its queue. All clients of a resource must use it for
// the order to hold. It is a liveness property, not a safety one: see
// docs/safety.md ("Fair mode") for what it costs and how it fails.
func WithFair() Option {
	return optionFunc(func(c *config) error { c.fair = true; return nil })
}

// WithLockTTL overrides the client's TTL for one lock.
func WithLockTTL(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) error { c.ttl = d; return nil })
}

// WithLockRetryBackoff overrides the client's retry backoff for one Lock call.
func WithLockRetryBackoff(min, max time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) error {
		if err := checkBackoff(min, max); err != nil {
			return err
		}
		c.retryMin, c.retryMax = min, max
		return nil
	})
}

// checkTTL rejects a lease that Redis cannot represent or that leaves no validity.
func checkTTL(ttl time.Duration, factor float64) error {
	switch {
	case ttl < time.Millisecond:
		return invalid("TTL %v must be at least 1ms", ttl)
	case ttl > MaxTTL:
		return invalid("TTL %v exceeds the maximum %v", ttl, MaxTTL)
	case ttl%time.Millisecond != 0:
		return invalid("TTL %v must be a whole number of milliseconds", ttl)
	case clock.Validity(ttl, 0, factor) <= 0:
		return invalid("TTL %v is too short for its own drift allowance %v", ttl, clock.Drift(ttl, factor))
	}
	return nil
}

// WithBreaker sets how many calls in a row a node must fail by timing out or at
// the transport before its circuit breaker opens (default
// DefaultBreakerFailures). While open, calls to the node fail at once with
// ErrNodeDown, cleanup releases for it wait (at most 1024 per node; the rest
// expire by their TTL), and a background probe pings it, first after the node
// timeout, then at doubling intervals up to 2 node timeouts (every interval at
// most 1 s; the longest at least 100 ms); the first answer closes the breaker.
// 0 turns breakers off: every call then waits for the node or its timeout.
func WithBreaker(failures int) Option {
	return optionFunc(func(c *config) error {
		if failures < 0 {
			return invalid("breaker failures %d must not be negative", failures)
		}
		c.breakerFailures = failures
		return nil
	})
}
