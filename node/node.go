package node

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Node is one independent Redis instance as the lock algorithm sees it: every
// operation the lock client needs, in one contract — the lock itself, the
// fence counter, the waiters' queue (Queuer), release notifications (Watcher) and a probe (Ping). Every method
// must return by the context's deadline; implementations must be safe for
// concurrent use. A backend built on another Redis client embeds Scripted,
// which implements every script operation over one Eval, and adds Name,
// Watch, Ping and Close; nodetest.Run checks it.
type Node interface {
	// Name identifies the node in errors and logs, and in the check that no node is
	// given twice. Two Nodes with the same Name are the same instance.
	Name() string
	// Acquire sets key to token with a TTL if key does not exist (SET NX PX), and
	// reports whether it did, together with the fence counter stored at fenceKey,
	// read atomically with the SET. With fenceKey "" no counter is read (Fence
	// 0, HasFence false): a lock that is not fenced at once reads the counters
	// later with ReadFence, and an uncontended acquisition costs the node one
	// command fewer.
	Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (Acquired, error)
	// ReadFence reads the fence counter stored at fenceKey, and whether key
	// holds token (reported as OK), in one atomic step: the counters of a
	// lock acquired without them, read inside its window. It writes nothing.
	ReadFence(ctx context.Context, key, fenceKey, token string) (Acquired, error)
	// Release deletes key if it still holds token, and reports whether it did.
	// With notify, waiters watching key are told that it is free (see Watcher).
	Release(ctx context.Context, key, token string, notify bool) (bool, error)
	// Extend resets key's TTL if key still holds token, and reports whether it did.
	// It never creates key. It resets MetaKey(key)'s TTL too (WriteMeta).
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// WriteFence raises the counter at fenceKey to at least fence, only if key
	// still holds token, and reports whether key held token.
	WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error)
	// RaiseFence raises the counter at fenceKey to at least fence, whoever holds
	// the lock, if the counter exists; it never creates one (a late raise on a
	// node that lost its data would create a counter below tokens the node had
	// accepted).
	RaiseFence(ctx context.Context, fenceKey string, fence uint64) error
	// CreateFence sets the counter at fenceKey to fence only if no counter
	// exists and key holds token (never with token "": then it only checks),
	// and reports whether a counter existed (then nothing was written) and, if
	// not, whether key held token (the counter was created). It writes back the
	// first token of a resource.
	CreateFence(ctx context.Context, key, fenceKey, token string, fence uint64) (held, existed bool, err error)
	// --- holder metadata (meta.go; issue 27: leader election, WithMetadata) ---
	// WriteMeta stores m at MetaKey(key), expiring after ttl, only if key
	// holds token, and reports whether it did; it publishes the change on
	// MetaKey(key)'s channel. It never creates or changes key. Extend renews
	// the metadata with the lock.
	WriteMeta(ctx context.Context, key, token string, m Meta, ttl time.Duration) (bool, error)
	// ReadMeta returns the metadata stored beside key, if it was written by
	// key's current holder (ok false otherwise: no holder, a holder without
	// metadata, or a leftover of an earlier holder).
	ReadMeta(ctx context.Context, key string) (m Meta, ok bool, err error)
	// --- end holder metadata ---
	Queuer
	Watcher
	// RWLocker: read-write locks (rw.go).
	RWLocker
	// Ping checks that the node answers, within ctx and the node's timeout
	// (the lock client's breaker probes a failing node with it).
	Ping(ctx context.Context) error
	// Close releases the node's resources (connections).
	Close() error
}

// Acquired is one node's answer to Acquire.
type Acquired struct {
	// OK is true when this node granted the lock.
	OK bool
	// Fence is the node's fence counter at the time of the request (0 if unset).
	Fence uint64
	// HasFence is true when the counter exists on the node. A node without it
	// while others have one has lost it (a restart without persistence, an
	// eviction) or never saw a fenced grant of the resource.
	HasFence bool
	// Ahead is, for a refusal of Queuer.AcquireFair, the number of waiters
	// the node has queued before the caller: 0 when the caller is at the
	// head (the lock is held), and always 0 for the other acquisitions.
	Ahead int
	// Clock is the node's clock (TIME) in µs when it ran a queued
	// acquisition (AcquireFair) or refused an Acquire; 0 for a
	// granted Acquire, or when the node may not run TIME. A waiter takes its
	// ticket from the nodes' clocks (see Waiter).
	Clock int64
	// Queue tells what a queued acquisition did with the waiter.
	Queue QueueState
}

// QueueState is what a queued acquisition did with the waiter.
type QueueState int8

const (
	// NotQueued: the waiter is not queued on the node (a plain Acquire; a
	// waiter without a ticket yet; a waiter that left).
	NotQueued QueueState = iota
	// Queued: the waiter is queued on the node (or was granted the lock).
	Queued
	// TicketRefused: the node did not queue the waiter, its ticket being
	// more than TicketBound from the node's clock; it needs a new ticket.
	TicketRefused
)

// queueState maps a script's queue code (1, 0, -1) to a QueueState.
func queueState(code int64) QueueState {
	switch code {
	case 1:
		return Queued
	case 0:
		return TicketRefused
	}
	return NotQueued
}

// Sentinel errors of this package, reachable with errors.Is.
var (
	// ErrInvalidURL reports a node URL that cannot be used.
	ErrInvalidURL = errors.New("node: invalid URL")
	// ErrInvalidOption reports an option value out of range.
	ErrInvalidOption = errors.New("node: invalid option")
	// ErrUnexpectedReply reports a reply of a shape the scripts never produce.
	ErrUnexpectedReply = errors.New("node: unexpected reply")
)

// Option configures a Redis node.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	timeout time.Duration
	conns   int
	tls     *tls.Config
	name    string
	limits  replyLimits // WithReplyLimits (guard.go)
	log     *slog.Logger
	dialer  DialFunc // WithDialer; nil = a net.Dialer

	quarantine *RestartGuard // WithRestartQuarantine or WithRestartGuard (restart.go); nil when off
	instances  *Instances    // WithInstances (instance.go); nil when off

	// What was given, for FromPool to refuse what it cannot honour, and for
	// the lock client to tell a timeout given twice (TimeoutOf).
	timeoutSet, connsSet, limitsSet bool
	ownGuard                        bool // the guard comes from WithRestartQuarantine: Dial feeds it
	guardSet                        bool // WithRestartGuard
}

// WithTimeout bounds each call to the node (including taking a connection and
// dialing) to d, in addition to the context's own deadline (see CheckTimeout).
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := CheckTimeout(d); err != nil {
			return err
		}
		c.timeout, c.timeoutSet = d, true
		return nil
	})
}

// TimeoutOf returns the per-call timeout that opts set (WithTimeout; the last
// one wins), and whether any of them sets one. It fails as Dial would on an
// invalid option. The lock client uses it to refuse a node timeout given both
// ways with different values.
func TimeoutOf(opts ...Option) (d time.Duration, set bool, err error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return 0, false, err
	}
	return cfg.timeout, cfg.timeoutSet, nil
}

// WithConnections sets how many connections a dialed node pipelines its
// commands over (default 1; 1 to 64). Commands of concurrent callers share them:
// one connection batches best; more spread the client's work over more goroutines.
func WithConnections(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("%w: connections %d must be in [1, 64]", ErrInvalidOption, n)
		}
		c.conns, c.connsSet = n, true
		return nil
	})
}

// WithTLSConfig sets the TLS configuration used for rediss:// URLs (by default,
// the system's roots and the URL's host as the server name). Dial refuses it with
// a redis:// URL rather than connect in plaintext; FromPool refuses it (the pool
// dials).
func WithTLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) error { c.tls = cfg; return nil })
}

// WithName overrides the node's name (by default the URL's host:port/db, or the name
// given to FromPool).
func WithName(name string) Option {
	return optionFunc(func(c *config) error {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("%w: empty node name", ErrInvalidOption)
		}
		c.name = name
		return nil
	})
}

// WithLogger sets a logger for what happens in the background, where no call
// can return an error: the release-notification subscriber logs a warning once
// when notifications become unavailable (and waiters poll), and once when they
// are restored. Off by default.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error { c.log = l; return nil })
}

// DialFunc opens a network connection to addr, as (*net.Dialer).DialContext
// does. The context bounds the dial: it ends at the call's deadline.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// WithDialer sets how Dial opens its connections (by default a net.Dialer
// with the context's deadline): to reach a node through a proxy or a tunnel,
// or to wrap connections (to count or trace what is sent). TLS, AUTH and
// SELECT run over the connection it returns, all still bounded by the call's
// context. d must return once its context ends: callers do not wait longer
// than their deadline, but a dial that never returns is a goroutine that
// never ends. FromPool refuses it: the pool dials.
func WithDialer(d DialFunc) Option {
	return optionFunc(func(c *config) error {
		if d == nil {
			return fmt.Errorf("%w: nil dialer", ErrInvalidOption)
		}
		c.dialer = d
		return nil
	})
}

func newConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout, conns: 1}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

//go:embed acquire.lua
var acquireSrc string

//go:embed release.lua
var releaseSrc string

//go:embed extend.lua
var extendSrc string

//go:embed writefence.lua
var writeFenceSrc string

//go:embed raisefence.lua
var raiseFenceSrc string

//go:embed createfence.lua
var createFenceSrc string

//go:embed readfence.lua
var readFenceSrc string

var (
	acquireScript = newGrantScript("acquire", 2, 1, acquireSrc)
	releaseScript = newScript("release", 1, 1, releaseSrc)
	extendScript  = newScript("extend", 2, 1, extendSrc) // KEYS[2]: the metadata (meta.go), renewed with the lock
	fenceScript   = newScript("writefence", 2, 1, writeFenceSrc)
	raiseScript   = newScript("raisefence", 1, 0, raiseFenceSrc)
	createScript  = newScript("createfence", 2, 1, createFenceSrc)
	readScript    = newScript("readfence", 2, 1, readFenceSrc)
)

// script is a Lua script sent by SHA-1 (EVALSHA), and in full (EVAL) when the
// server answers NOSCRIPT.
type script struct {
	name      string // the .lua file it comes from, without the extension
	keys      int
	lock      int // the lock key's position in KEYS (1-based); 0: the script takes none
	src, hash string
	hashArg   any // hash, boxed once: EVALSHA's first argument
	// grants: the script can create the lock key or overwrite it
	// with a new token, that is grant a lock. Every guard that must refuse
	// grants (the restart quarantine) refuses every such script: see
	// newGrantScript and grantScript.
	grants bool
	// holders: the position (1-based) in KEYS of a container of holders
	// that share it (readers: rw.go), or 0; Script.Holders.
	holders int
}

// scripts holds every script of the package, by SHA-1 and by source, so that
// a guard can tell from a command alone whether it may grant a lock, and a
// test can enumerate them all (Scripts).
var scripts = struct {
	all           []*script
	byHash, bySrc map[string]*script
}{byHash: map[string]*script{}, bySrc: map[string]*script{}}

// newScript defines a script that cannot grant a lock (it never creates or
// overwrites the lock key with a new token).
func newScript(name string, keys, lock int, src string) *script {
	return register(name, keys, lock, src, false)
}

// newGrantScript defines a script that can grant a lock: the restart
// quarantine refuses it (before it is sent, and on a connection dialed while
// the node is quarantined: grantScript).
func newGrantScript(name string, keys, lock int, src string) *script {
	return register(name, keys, lock, src, true)
}

func register(name string, keys, lock int, src string, grants bool) *script {
	h := sha1.Sum([]byte(src))
	s := &script{name: name, keys: keys, lock: lock, src: src, hash: hex.EncodeToString(h[:]), grants: grants}
	s.hashArg = s.hash
	scripts.all = append(scripts.all, s)
	scripts.byHash[s.hash] = s
	scripts.bySrc[s.src] = s
	return s
}

// grantScript reports whether a command runs a script that can grant a lock
// (EVALSHA of its SHA-1, or EVAL of its source, the fallback on NOSCRIPT).
func grantScript(cmd string, args []any) bool {
	if len(args) == 0 {
		return false
	}
	s, _ := args[0].(string)
	var sc *script
	switch {
	case strings.EqualFold(cmd, "EVALSHA"):
		sc = scripts.byHash[s]
	case strings.EqualFold(cmd, "EVAL"):
		sc = scripts.bySrc[s]
	}
	return sc != nil && sc.grants
}

// Hash returns the script's SHA-1, as EVALSHA takes it.
func (s *script) Hash() string { return s.hash }

// Redis is a Node backed by a redigo connection pool. It is safe for concurrent use.
type Redis struct {
	// Scripted runs every lock operation through eval (the same scripts and
	// calls as every backend's).
	Scripted
	sub *subscriber
	mux *mux // dialed nodes: pipelined connections
	// quarantine refuses acquisitions after a restart (WithRestartQuarantine,
	// WithRestartGuard).
	quarantine *RestartGuard
	pool       *redis.Pool // nodes made by FromPool
	name       string
	timeout    time.Duration
}

var _ Node = (*Redis)(nil)

// Dial returns a node for the Redis instance at rawURL, a URL in the grammar of
// URL (see Parse): it dials the URL's host:port, with TLS for rediss://, and
// authenticates and selects the database the URL gives. It does not connect: the
// first call does, so that a node that is down at start-up is just one failed vote.
func Dial(rawURL string, opts ...Option) (*Redis, error) {
	u, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil && !u.TLS() {
		return nil, fmt.Errorf("%w: WithTLSConfig given for %s, a plaintext URL: write rediss:// for TLS", ErrInvalidOption, u.Redacted())
	}
	name := u.Name()
	if cfg.name != "" {
		name = cfg.name
	}
	target := targetFromURL(u, cfg.tls, cfg.timeout)
	target.limits = cfg.limits
	target.dialer = cfg.dialer
	dial := func(ctx context.Context) (redis.Conn, error) {
		c, err := dialConn(ctx, target)
		if err != nil || (cfg.instances == nil && cfg.quarantine == nil) {
			return c, err
		}
		// One INFO server per new connection feeds both checks.
		info, infoErr := redis.String(redis.DoContext(c, ctx, "INFO", "server"))
		if cfg.instances != nil {
			if err := cfg.instances.dialed(name, info, infoErr); err != nil {
				c.Close()
				return nil, err
			}
		}
		if cfg.quarantine == nil {
			return c, nil
		}
		return quarantineDialed(cfg.quarantine, c, info, infoErr)
	}
	r := &Redis{name: name, timeout: cfg.timeout, sub: newSubscriber(dial, name, cfg.log), quarantine: cfg.quarantine}
	r.scripted()
	r.mux = newMux(cfg.conns, cfg.timeout, max(4*cfg.timeout, 2*time.Second), dial)
	return r, nil
}

// FromPool returns a node that uses an existing pool. The pool's connections must
// support contexts (those of redis.Dial do). name identifies the instance (for
// example its host:port/db). Close does not close a pool given here.
//
// The pool dials, so the options about dialing and connections cannot apply:
// FromPool refuses them with ErrInvalidOption rather than ignore them
// (WithRestartQuarantine, WithInstances, WithTLSConfig, WithDialer,
// WithConnections, WithReplyLimits). In particular it cannot see a restart of
// the node by itself: give it WithRestartGuard and feed the guard (Observe the
// INFO server of the pool's new connections, from the pool's Dial, or call
// Restarted), or the node grants locks right after a restart that lost its keys
// (docs/safety.md). WithTimeout, WithName, WithLogger and WithRestartGuard
// apply.
func FromPool(pool *redis.Pool, name string, opts ...Option) (*Redis, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidOption)
	}
	if strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf("%w: a pool needs a non-empty node name", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.poolUnsupported(); err != nil {
		return nil, err
	}
	if cfg.name != "" {
		name = cfg.name
	}
	dial := pool.DialContext
	if dial == nil {
		dial = func(context.Context) (redis.Conn, error) { return pool.Dial() }
	}
	r := &Redis{pool: pool, name: name, timeout: cfg.timeout, sub: newSubscriber(dial, name, cfg.log), quarantine: cfg.quarantine}
	r.scripted()
	return r, nil
}

// poolUnsupported names the options given that a node made by FromPool cannot
// honour, in an ErrInvalidOption.
func (c *config) poolUnsupported() error {
	var bad []string
	for _, o := range []struct {
		given bool
		name  string
	}{
		{c.ownGuard, "WithRestartQuarantine (the pool dials, so the node cannot see restarts: use WithRestartGuard and feed the guard)"},
		{c.instances != nil, "WithInstances"},
		{c.tls != nil, "WithTLSConfig"},
		{c.dialer != nil, "WithDialer"},
		{c.connsSet, "WithConnections"},
		{c.limitsSet, "WithReplyLimits"},
	} {
		if o.given {
			bad = append(bad, o.name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: FromPool cannot honour %s: the pool dials and owns the connections", ErrInvalidOption, strings.Join(bad, ", "))
}

// Refusal returns the node's current restart quarantine (a *QuarantineError,
// errors.Is ErrQuarantined) while it refuses acquisitions, and nil otherwise
// (always nil without WithRestartQuarantine or WithRestartGuard). The lock
// client reports it in its nodes' health.
func (r *Redis) Refusal() error {
	if r.quarantine == nil {
		return nil
	}
	return r.quarantine.Refusal()
}

// Name returns the node's name.
func (r *Redis) Name() string { return r.name }

// Close stops release notifications and closes the connections Dial made; a
// pool given to FromPool stays open.
func (r *Redis) Close() error {
	r.sub.close()
	if r.mux != nil {
		r.mux.close()
	}
	return nil
}

// Ping checks that the node answers, within the context and the node's timeout.
func (r *Redis) Ping(ctx context.Context) error {
	_, err := r.exec(ctx, "PING")
	return err
}

// scripted sets r's lock operations up: Scripted over r.eval, behind r's
// restart guard (a connection dialed for the very call refuses grants too:
// quarantinedConn, execCtx).
func (r *Redis) scripted() {
	r.Scripted = Scripted{Evaler: redisEvaler{r}, Timeout: r.timeout}
	if r.quarantine != nil {
		r.Scripted.Refusal = r.quarantine.Refusal
	}
}

// redisEvaler is Redis' Evaler.
type redisEvaler struct{ r *Redis }

// Eval implements Evaler. It lays EVALSHA's arguments out once: the hash,
// the number of keys, the keys, the arguments.
func (e redisEvaler) Eval(ctx context.Context, c Call) (any, error) {
	s := c.Script.s
	var buf [8]any // on the stack: the connection copies what it sends
	args := append(buf[:0], s.hashArg, s.keys)
	for _, k := range c.Keys {
		args = append(args, k)
	}
	return e.r.evalArgs(ctx, s, append(args, c.Args...))
}

// evalArgv runs script s with EVALSHA's arguments argv laid out already
// (LockArgs), shared by the calls of every node: copied, since evalArgs
// replaces the hash on NOSCRIPT.
func (e redisEvaler) evalArgv(ctx context.Context, s *script, argv []any) (any, error) {
	var buf [8]any // on the stack: the connection copies what it sends
	return e.r.evalArgs(ctx, s, append(buf[:0], argv...))
}

// evalArgs runs a script by SHA-1, and sends its source when the server does not
// have it (NOSCRIPT: after a restart or SCRIPT FLUSH). A script that can grant
// a lock is refused while the node is quarantined, whichever method runs it;
// a connection dialed for this very call, which may be the one that detects
// the restart, refuses it too (quarantinedConn).
//
// args are EVALSHA's arguments: args[0] is the script's hash (replaced by its
// source on NOSCRIPT), args[1] its number of keys, then the keys and the
// arguments.
func (r *Redis) evalArgs(ctx context.Context, s *script, args []any) (any, error) {
	if s.grants && r.quarantine != nil {
		// Scripted asked already; this also covers a caller of the
		// exported Evaler, or one that cleared Scripted.Refusal.
		if err := r.quarantine.Refusal(); err != nil {
			return nil, err
		}
	}
	mode := modeOf(ctx)
	ctx, cancel := r.bound(ctx)
	defer cancel()
	v, err := r.execCtx(ctx, mode, "EVALSHA", args...)
	if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "NOSCRIPT ") {
		args[0] = s.src
		v, err = r.execCtx(ctx, mode, "EVAL", args...)
	}
	return v, err
}

// exec runs one command, bounded by ctx and the node's timeout.
func (r *Redis) exec(ctx context.Context, cmd string, args ...any) (any, error) {
	mode := modeOf(ctx)
	ctx, cancel := r.bound(ctx)
	defer cancel()
	return r.execCtx(ctx, mode, cmd, args...)
}

// DeadlineBound is implemented by a context whose Done channel closes at its
// deadline and at no other time while a node call runs on it (the lock
// client's rounds: their calls are bounded by the node timeout, and the
// caller cannot cancel them). A command sent on such a context, or on one
// that cannot be cancelled at all, may be written and its reply read on the
// calling goroutine when the connection is idle: a lone command, two
// goroutine hand-overs fewer than through the connection's writer and reader.
type DeadlineBound interface {
	context.Context
	// Waiter returns the context of a caller that waits for the call on
	// the call's own goroutine (the lock client's rounds on one node), or
	// nil. When it ends, the call stops waiting for the reply and returns
	// the waiter's error; the command, once written, is not taken back, and
	// its reply is read and dropped, as for any caller that gave up.
	Waiter() context.Context
}

// callMode is how a command may be sent: lone (DeadlineBound), and what
// stops the wait for its reply besides the deadline (watch, or nothing).
type callMode struct {
	lone  bool
	watch context.Context
}

// modeOf returns the mode of a command sent on ctx (before the node's
// timeout bounds it).
func modeOf(ctx context.Context) callMode {
	// DeadlineBound first: its Done channel may be made on demand.
	if d, ok := ctx.(DeadlineBound); ok {
		return callMode{lone: true, watch: d.Waiter()}
	}
	if ctx.Done() == nil {
		return callMode{lone: true}
	}
	return callMode{}
}

// bound applies the node's timeout to ctx, unless ctx already ends sooner.
func (r *Redis) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= r.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.timeout)
}

func (r *Redis) execCtx(ctx context.Context, mode callMode, cmd string, args ...any) (any, error) {
	if r.mux != nil {
		return r.mux.do(ctx, mode, cmd, args...)
	}
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close() // back to the pool, or dropped if it failed
	if r.quarantine != nil && grantScript(cmd, args) {
		// The pool may have dialed for this very call, and its dial may
		// have fed the guard the restart (WithRestartGuard): ask again.
		if err := r.quarantine.Refusal(); err != nil {
			return nil, err
		}
	}
	return redis.DoContext(c, ctx, cmd, slices.Clone(args)...) // args may be on the caller's stack
}
