package node

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Node is one independent Redis instance as the lock algorithm sees it. Every method
// must return by the context's deadline; implementations must be safe for concurrent
// use.
type Node interface {
	// Name identifies the node in errors and logs, and in the check that no node is
	// given twice. Two Nodes with the same Name are the same instance.
	Name() string
	// Acquire sets key to token with a TTL if key does not exist (SET NX PX), and
	// reports whether it did, together with the fence counter stored at fenceKey,
	// read atomically with the SET.
	Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (Acquired, error)
	// Release deletes key if it still holds token, and reports whether it did.
	// With notify, waiters watching key are told that it is free (see Watcher).
	Release(ctx context.Context, key, token string, notify bool) (bool, error)
	// Extend resets key's TTL if key still holds token, and reports whether it did.
	// It never creates key.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// WriteFence raises the counter at fenceKey to at least fence, only if key
	// still holds token, and reports whether key held token.
	WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error)
	// RaiseFence raises the counter at fenceKey to at least fence, whoever holds
	// the lock.
	RaiseFence(ctx context.Context, fenceKey string, fence uint64) error
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

// DefaultTimeout bounds every call to a node when no Timeout option is given.
const DefaultTimeout = 500 * time.Millisecond

// Option configures a Redis node.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	timeout   time.Duration
	maxIdle   int
	maxActive int
	tls       *tls.Config
	name      string

	quarantine *quarantine // WithRestartQuarantine (restart.go); nil when off
}

// WithTimeout bounds each call to the node (including taking a connection and
// dialing) to d, in addition to the context's own deadline. It must be positive and
// at most a minute.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("%w: timeout %v must be in (0, 1m]", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	})
}

// WithPoolSize sets how many idle connections the node keeps (maxIdle) and how many
// it opens at most (maxActive, 0 = no limit; callers beyond it wait, bounded by
// their context).
func WithPoolSize(maxIdle, maxActive int) Option {
	return optionFunc(func(c *config) error {
		if maxIdle < 0 || maxActive < 0 || maxIdle > 10000 || maxActive > 10000 {
			return fmt.Errorf("%w: pool size idle=%d active=%d must be in [0, 10000]", ErrInvalidOption, maxIdle, maxActive)
		}
		c.maxIdle, c.maxActive = maxIdle, maxActive
		return nil
	})
}

// WithTLSConfig sets the TLS configuration used for rediss:// URLs.
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

func newConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout, maxIdle: 64}
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

var (
	acquireScript = redis.NewScript(2, acquireSrc)
	releaseScript = redis.NewScript(1, releaseSrc)
	extendScript  = redis.NewScript(1, extendSrc)
	fenceScript   = redis.NewScript(2, writeFenceSrc)
	raiseScript   = redis.NewScript(1, raiseFenceSrc)
)

// Redis is a Node backed by a redigo connection pool. It is safe for concurrent use.
type Redis struct {
	sub     *subscriber
	pool    *redis.Pool
	name    string
	timeout time.Duration
	owned   bool
}

var _ Node = (*Redis)(nil)

// ParseURL checks a node URL and returns the node's canonical name (host:port/db).
// Accepted: redis://[user[:password]@]host[:port][/db] and the same with rediss://
// (TLS). The port defaults to 6379 and the database to 0.
func ParseURL(rawURL string) (name string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidURL, redactURL(rawURL), err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", fmt.Errorf("%w: %q: scheme must be redis:// or rediss://", ErrInvalidURL, redactURL(rawURL))
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return "", fmt.Errorf("%w: %q: missing host", ErrInvalidURL, redactURL(rawURL))
	}
	if port == "" {
		port = "6379"
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%w: %q: bad port %q", ErrInvalidURL, redactURL(rawURL), port)
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err = strconv.Atoi(p)
		if err != nil || db < 0 {
			return "", fmt.Errorf("%w: %q: database %q is not a non-negative number", ErrInvalidURL, redactURL(rawURL), p)
		}
	}
	if q := u.Query().Get("db"); q != "" {
		return "", fmt.Errorf("%w: %q: give the database in the path (/%s), not as a query", ErrInvalidURL, redactURL(rawURL), q)
	}
	return fmt.Sprintf("%s/%d", net.JoinHostPort(strings.ToLower(host), port), db), nil
}

// redactURL hides a password so that it never reaches an error message or a log.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "***" + raw[i:]
		}
		return raw
	}
	return u.Redacted()
}

// Dial returns a node for the Redis instance at rawURL. It does not connect: the
// first call does, so that a node that is down at start-up is just one failed vote.
func Dial(rawURL string, opts ...Option) (*Redis, error) {
	name, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.name != "" {
		name = cfg.name
	}
	dialOpts := []redis.DialOption{
		redis.DialConnectTimeout(cfg.timeout),
		redis.DialReadTimeout(cfg.timeout),
		redis.DialWriteTimeout(cfg.timeout),
	}
	if cfg.tls != nil {
		dialOpts = append(dialOpts, redis.DialTLSConfig(cfg.tls))
	}
	pool := &redis.Pool{
		MaxIdle:     cfg.maxIdle,
		MaxActive:   cfg.maxActive,
		Wait:        cfg.maxActive > 0,
		IdleTimeout: 4 * time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, rawURL, dialOpts...)
			if err != nil || cfg.quarantine == nil {
				return c, err
			}
			return cfg.quarantine.dialed(ctx, c)
		},
	}
	return newRedis(pool, name, cfg.timeout, true), nil
}

// FromPool returns a node that uses an existing pool. The pool's connections must
// support contexts (those of redis.Dial do). name identifies the instance (for
// example its host:port/db). Close does not close a pool given here.
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
	if cfg.name != "" {
		name = cfg.name
	}
	return newRedis(pool, name, cfg.timeout, false), nil
}

func newRedis(pool *redis.Pool, name string, timeout time.Duration, owned bool) *Redis {
	dial := pool.DialContext
	if dial == nil {
		dial = func(context.Context) (redis.Conn, error) { return pool.Dial() }
	}
	sub := &subscriber{dial: dial, watches: map[string]map[*watch]struct{}{}, confirmed: map[string]chan struct{}{}}
	return &Redis{sub: sub, pool: pool, name: name, timeout: timeout, owned: owned}
}

// Name returns the node's name.
func (r *Redis) Name() string { return r.name }

// Close stops release notifications and closes the node's pool if Dial created it.
func (r *Redis) Close() error {
	r.sub.close()
	if r.owned {
		return r.pool.Close()
	}
	return nil
}

// Ping checks that the node answers, within the context and the node's timeout.
func (r *Redis) Ping(ctx context.Context) error {
	_, err := r.do(ctx, func(ctx context.Context, c redis.Conn) (any, error) {
		return redis.DoContext(c, ctx, "PING")
	})
	return err
}

// Acquire implements Node.
func (r *Redis) Acquire(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (Acquired, error) {
	reply, err := r.do(ctx, func(ctx context.Context, c redis.Conn) (any, error) {
		return acquireScript.DoContext(ctx, c, key, fenceKey, token, ttl.Milliseconds())
	})
	if err != nil {
		return Acquired{}, err
	}
	vals, err := redis.Values(reply, nil)
	if err != nil || len(vals) != 3 {
		return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
	}
	ok, err1 := redis.Int64(vals[0], nil)
	fs, err2 := redis.String(vals[1], nil)
	present, err3 := redis.Int64(vals[2], nil)
	if err1 != nil || err2 != nil || err3 != nil {
		return Acquired{}, fmt.Errorf("%w: acquire: %v", ErrUnexpectedReply, reply)
	}
	f, err := strconv.ParseUint(fs, 10, 64)
	if err != nil {
		return Acquired{}, fmt.Errorf("%w: fence counter %q is not a uint64", ErrUnexpectedReply, fs)
	}
	return Acquired{OK: ok == 1, Fence: f, HasFence: present == 1}, nil
}

// Release implements Node.
func (r *Redis) Release(ctx context.Context, key, token string, notify bool) (bool, error) {
	n := "0"
	if notify {
		n = "1"
	}
	return r.flag(ctx, releaseScript, key, token, n)
}

// Extend implements Node.
func (r *Redis) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return r.flag(ctx, extendScript, key, token, ttl.Milliseconds())
}

// WriteFence implements Node.
func (r *Redis) WriteFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	return r.flag(ctx, fenceScript, key, fenceKey, token, strconv.FormatUint(fence, 10))
}

// RaiseFence implements Node.
func (r *Redis) RaiseFence(ctx context.Context, fenceKey string, fence uint64) error {
	_, err := r.flag(ctx, raiseScript, fenceKey, strconv.FormatUint(fence, 10))
	return err
}

func (r *Redis) flag(ctx context.Context, s *redis.Script, keysAndArgs ...any) (bool, error) {
	reply, err := r.do(ctx, func(ctx context.Context, c redis.Conn) (any, error) {
		return s.DoContext(ctx, c, keysAndArgs...)
	})
	if err != nil {
		return false, err
	}
	n, err := redis.Int64(reply, nil)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnexpectedReply, reply)
	}
	return n == 1, nil
}

// do runs f on a pooled connection, the whole call bounded by ctx and the node's
// timeout. A connection whose call timed out is closed by redigo, never reused.
func (r *Redis) do(ctx context.Context, f func(context.Context, redis.Conn) (any, error)) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close() // returns the connection to the pool, or drops it if it failed
	return f(ctx, c)
}
