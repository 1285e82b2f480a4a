package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsredigo "github.com/go-redsync/redsync/v4/redis/redigo"
	"github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
)

// TTL is the lease every library asks for in the benchmarks.
const TTL = 10 * time.Second

// PoolSize is the number of idle connections the peers keep per node (redigo
// MaxIdle for go-redsync, go-redis PoolSize for bsm/redislock), so that neither
// is starved of connections at 32 goroutines. This library runs with its
// defaults.
const PoolSize = 64

// RedsyncReadTimeout is the read, write and connect timeout of go-redsync's
// redigo connections. Its redigo adapter calls Do, not DoContext, so without a
// read timeout a paused node would block Lock and Unlock forever.
const RedsyncReadTimeout = time.Second

// Library names, as they appear in the report.
const (
	LibRedlock = "redlock"
	// LibRedlockFair is this library with WithFair (cross-client first come,
	// first served).
	LibRedlockFair = "redlock (fair)"
	LibRedsync     = "go-redsync"
	LibRedislock   = "bsm/redislock"
)

// Held is a lock that a Locker acquired.
type Held interface {
	Release(ctx context.Context) error
}

// Locker drives one library over N nodes through one interface.
type Locker interface {
	// Lib returns the library's name (LibRedlock, LibRedsync or LibRedislock).
	Lib() string
	// N returns the number of nodes.
	N() int
	// Lock acquires key, retrying with the library's own policy until ctx ends.
	Lock(ctx context.Context, key string) (Held, error)
	// Close releases the client and its connections.
	Close() error
}

// NewLocker returns the Locker of library lib over the servers at addrs
// (host:port).
func NewLocker(lib string, addrs []string) (Locker, error) {
	switch lib {
	case LibRedlock:
		return NewRedlock(addrs)
	case LibRedlockFair:
		return NewRedlock(addrs, redlock.WithFair())
	case LibRedlockGoredis:
		return NewRedlockGoredis(addrs)
	case LibRedlockRueidis:
		return NewRedlockRueidis(addrs)
	case LibRedsync:
		return NewRedsync(addrs), nil
	case LibRedislock:
		if len(addrs) != 1 {
			return nil, fmt.Errorf("bench: %s is single-node, got %d nodes", lib, len(addrs))
		}
		return NewRedislock(addrs[0]), nil
	}
	return nil, fmt.Errorf("bench: unknown library %q", lib)
}

// RedlockLocker is this library, with its defaults (node timeout 500ms, backoff
// 4–250ms with full jitter) and a TTL of TTL.
type RedlockLocker struct {
	C   *redlock.Client
	n   int
	lib string
	req Requests
	// closers close the Redis clients below adapter nodes (see
	// NewRedlockGoredis).
	closers []func() error
}

// NewRedlock dials this library's client over addrs, with opts added.
func NewRedlock(addrs []string, opts ...redlock.Option) (*RedlockLocker, error) {
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "redis://" + a
	}
	l := &RedlockLocker{n: len(addrs), lib: LibRedlock}
	if len(opts) > 0 {
		l.lib = LibRedlockFair
	}
	c, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithTTL(TTL),
		redlock.WithNodeOptions(node.WithDialer(l.req.DialContext))}, opts...)...)
	if err != nil {
		return nil, err
	}
	l.C = c
	return l, nil
}

// Requests implements RequestCounter.
func (l *RedlockLocker) Requests() int64 { return l.req.Count() }

// Lib implements Locker.
func (l *RedlockLocker) Lib() string { return l.lib }

// N implements Locker.
func (l *RedlockLocker) N() int { return l.n }

// Lock implements Locker.
func (l *RedlockLocker) Lock(ctx context.Context, key string) (Held, error) {
	lk, err := l.C.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// Close implements Locker; it waits for background releases of stragglers,
// then closes the adapters' Redis clients, if any.
func (l *RedlockLocker) Close() error { return errors.Join(l.C.Close(), l.closeClients()) }

// RedsyncLocker is go-redsync v4 over redigo pools (MaxIdle PoolSize, timeouts
// RedsyncReadTimeout), with its defaults (retry 50–250ms, 32 tries) and an
// expiry of TTL. One Mutex is made per Lock, as its documentation does.
type RedsyncLocker struct {
	RS    *redsync.Redsync
	pools []*redis.Pool
	req   Requests
}

// Requests implements RequestCounter.
func (l *RedsyncLocker) Requests() int64 { return l.req.Count() }

// NewRedsync returns go-redsync over addrs.
func NewRedsync(addrs []string) *RedsyncLocker {
	l := &RedsyncLocker{}
	var pools []rsredis.Pool
	for _, a := range addrs {
		p := &redis.Pool{
			MaxIdle:     PoolSize,
			IdleTimeout: 4 * time.Minute,
			Dial: func() (redis.Conn, error) {
				return redis.Dial("tcp", a,
					redis.DialConnectTimeout(RedsyncReadTimeout),
					redis.DialReadTimeout(RedsyncReadTimeout),
					redis.DialWriteTimeout(RedsyncReadTimeout),
					redis.DialContextFunc(l.req.DialContext))
			},
		}
		l.pools = append(l.pools, p)
		pools = append(pools, rsredigo.NewPool(p))
	}
	l.RS = redsync.New(pools...)
	return l
}

// Lib implements Locker.
func (l *RedsyncLocker) Lib() string { return LibRedsync }

// N implements Locker.
func (l *RedsyncLocker) N() int { return len(l.pools) }

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = redsync.ErrFailed
	}
	return err
}

// Lock implements Locker.
func (l *RedsyncLocker) Lock(ctx context.Context, key string) (Held, error) {
	m := l.RS.NewMutex(key, redsync.WithExpiry(TTL))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

// Close implements Locker.
func (l *RedsyncLocker) Close() error {
	for _, p := range l.pools {
		_ = p.Close()
	}
	return nil
}

// RedislockLocker is bsm/redislock over go-redis (PoolSize PoolSize), with a
// fresh ExponentialBackoff(16ms, 250ms) retry strategy per Lock (its strategies
// keep state across calls, so one cannot be shared).
type RedislockLocker struct {
	RDB *goredis.Client
	C   *redislock.Client
	req *Requests
}

// Requests implements RequestCounter.
func (l *RedislockLocker) Requests() int64 { return l.req.Count() }

// NewRedislock returns bsm/redislock over the server at addr.
func NewRedislock(addr string) *RedislockLocker {
	req := &Requests{}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: PoolSize, Dialer: req.DialContext})
	return &RedislockLocker{RDB: rdb, C: redislock.New(rdb), req: req}
}

// Lib implements Locker.
func (l *RedislockLocker) Lib() string { return LibRedislock }

// N implements Locker.
func (l *RedislockLocker) N() int { return 1 }

// Lock implements Locker.
func (l *RedislockLocker) Lock(ctx context.Context, key string) (Held, error) {
	lk, err := l.C.Obtain(ctx, key, TTL, &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 250*time.Millisecond),
	})
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// Close implements Locker.
func (l *RedislockLocker) Close() error { return l.RDB.Close() }
